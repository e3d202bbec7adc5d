package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Redrive of held keys (ON_PARK=hold-key; the pipeline side is internal/pipeline/hold.go).
//
// With WithRedriveHolds, a received message whose partition key is held is not redriven at once:
// the session collects them, and once the queue has no unseen message it walks each held key's
// list (dedupe.HoldState.Held, the order the records were parked in, head first) from the
// first record not yet applied. Each record is redriven through the same pipeline as any other
// (its redrive pipeline runs ON_PARK=continue: the hold is the Redriver's business here) and,
// once it is processed (or found a duplicate), the hold's applied count moves past it before
// its message is deleted, so a record is never deleted unapplied and never applied twice by two
// sessions. The walk stops at the first record that fails again (the pipeline parks it again;
// the key stays held and nothing behind it is applied) or whose message this session did not
// receive. When every listed record is applied the hold is released with a condition on its
// length: if records were parked behind it meanwhile the release fails, the hold is read again
// and the walk goes on. Messages left are made visible again at the end of the session.
//
// A message of a held key that the hold does not list (parked before hold-key was turned on)
// is redriven at once, before the walk.

// RedriveHolds is the hold store the Redriver uses (*dedupe.Holds).
type RedriveHolds interface {
	Get(ctx context.Context, group, key string) (dedupe.HoldState, bool, error)
	Applied(ctx context.Context, group, key string, from, to int) error
	Release(ctx context.Context, group, key string, n int) error
}

var _ RedriveHolds = (*dedupe.Holds)(nil)

// WithRedriveHolds redrives held keys in order and releases them (ON_PARK=hold-key).
func WithRedriveHolds(h RedriveHolds) RedriveOption { return func(d *Redriver) { d.holds = h } }

// heldSession is one Run's messages of held keys.
type heldSession struct {
	d     *Redriver
	held  map[string]bool                          // partition keys read as held (never unset)
	keys  []string                                 // held keys in order of their first message
	msgs  map[string]map[string][]sqstypes.Message // key -> record id -> messages
	taken int
}

func (d *Redriver) heldSession() *heldSession {
	if d.holds == nil {
		return nil
	}
	return &heldSession{d: d, held: map[string]bool{}, msgs: map[string]map[string][]sqstypes.Message{}}
}

// take keeps m for the walk when its key is held; false: redrive it now.
func (s *heldSession) take(ctx context.Context, m sqstypes.Message) bool {
	if s == nil {
		return false
	}
	pm, err := park.Decode(aws.ToString(m.Body))
	if err != nil || pm.Group != s.d.cfg.Group || pm.Stream != s.d.cfg.Stream {
		return false
	}
	// Only a message the ledger confirms takes part in a key's walk: a refused one (or one that
	// cannot be confirmed now) is handled at once, and left, so it can neither release the key
	// nor have the real record's message deleted as a duplicate (redrive_confirm.go).
	if s.d.confirm(ctx, pm) != nil {
		return false
	}
	// Only "held" is remembered: a key read as not held is read again for each of its messages,
	// because it can become held during the session (the consumer parks a head, then records
	// behind it, whose messages this session may receive next). The hold is listed before any
	// message behind it is sent, so a read after receiving a message sees the hold it names.
	if !s.held[pm.PartitionKey] {
		_, found, err := s.d.holds.Get(ctx, pm.Group, pm.PartitionKey)
		if err != nil {
			s.d.log.WarnContext(ctx, "reading a key hold failed: the key is treated as held", "error", err)
			found = true
		}
		if !found {
			return false
		}
		s.held[pm.PartitionKey] = true
	}
	byID := s.msgs[pm.PartitionKey]
	if byID == nil {
		byID = map[string][]sqstypes.Message{}
		s.msgs[pm.PartitionKey] = byID
		s.keys = append(s.keys, pm.PartitionKey)
	}
	byID[pm.RecordID] = append(byID[pm.RecordID], m)
	s.taken++
	return true
}

// run walks every held key; it returns the receipt handles of the messages left in the queue.
func (s *heldSession) run(ctx context.Context, started time.Time, rep *RedriveReport) []*string {
	if s == nil {
		return nil
	}
	var keep []*string
	for _, key := range s.keys {
		keep = append(keep, s.walk(ctx, key, started, rep)...)
	}
	return keep
}

func (s *heldSession) walk(ctx context.Context, key string, started time.Time, rep *RedriveReport) []*string {
	d, byID := s.d, s.msgs[key]
	log := d.log.With("group", d.cfg.Group).With(park.KeyLogAttrs(key, false)...) // the key itself is user data
	leave := func(why error) []*string {
		var keep []*string
		for rid, ms := range byID {
			for _, m := range ms {
				keep = append(keep, m.ReceiptHandle)
				rep.Held++
				d.report(RedriveEvent{MessageID: aws.ToString(m.MessageId), RecordID: rid, Outcome: OutcomeHeld, Err: why})
			}
		}
		return keep
	}
	st, ok, err := d.holds.Get(ctx, d.cfg.Group, key)
	if err != nil {
		log.ErrorContext(ctx, "key hold unreadable: its records are left in the queue", "error", err)
		return leave(err)
	}
	if !ok { // released since: redrive what came like any message
		var keep []*string
		for _, ms := range byID {
			for _, m := range ms {
				keep = append(keep, d.handleCounted(ctx, m, started, rep, nil)...)
			}
		}
		return keep
	}
	// Messages the hold does not list were parked before the key was held: redrive them first.
	listed := map[string]bool{}
	for _, id := range st.Held {
		listed[id.String()] = true
	}
	var keep []*string
	for rid, ms := range byID {
		if !listed[rid] {
			for _, m := range ms {
				keep = append(keep, d.handleCounted(ctx, m, started, rep, nil)...)
			}
			delete(byID, rid)
		}
	}
	ahead := map[recordid.ID]bool{} // applied by applyEarlier, ahead of their places
	for {
		applied := map[recordid.ID]bool{}
		for _, id := range st.Held[:min(st.Applied, len(st.Held))] {
			applied[id] = true
		}
		// Messages of records the hold counts applied are copies left by a lost response (the
		// applied count moved, the delete did not happen or was not acknowledged): the record is
		// applied and its message confirmed, so it is deleted, never redriven again (it would
		// run after the key's later records once the key is released).
		for id := range applied {
			s.deleteApplied(ctx, byID, id, rep)
		}
		i := st.Applied
		for ; i < len(st.Held); i++ {
			id := st.Held[i]
			if applied[id] { // listed again (parked again): applied at its first place
				if err := d.holds.Applied(ctx, d.cfg.Group, key, i, i+1); err != nil {
					log.ErrorContext(ctx, "key hold not moved on: its records are left in the queue", "error", err)
					return append(keep, leave(err)...)
				}
				continue
			}
			// Records of the same shard listed after this one but earlier in the stream (parked
			// behind a later head: a record the mapping went past unparked and a reconciler
			// replayed once the key was held) come first in the key's order: they are applied
			// before it, each leaving its message for its own place in the list, where the
			// ledger then finds it processed.
			if err := s.applyEarlier(ctx, byID, st.Held[i+1:], id, applied, ahead, started, rep); err != nil {
				log.WarnContext(ctx, "held key's earlier record not applied: nothing behind it is applied, the key stays held", "error", err)
				return append(keep, leave(err)...)
			}
			ms := byID[id.String()]
			if len(ms) == 0 {
				log.WarnContext(ctx, "held record not received in this session: the key stays held", "record_id", id.String())
				return append(keep, leave(fmt.Errorf("reconcile: held behind %s, whose parked message this session did not receive", id))...)
			}
			at := i
			ev := d.handleThen(ctx, ms[0], started, rep, func(o Outcome) error {
				if o == OutcomeProcessed || o == OutcomeDuplicate {
					return d.holds.Applied(ctx, d.cfg.Group, key, at, at+1)
				}
				return nil
			})
			d.count(rep, ev)
			d.report(ev)
			if ev.Outcome != OutcomeProcessed && ev.Outcome != OutcomeDuplicate {
				if ev.Outcome != OutcomeParkedAgain {
					keep = append(keep, ms[0].ReceiptHandle)
				}
				byID[id.String()] = ms[1:]
				log.WarnContext(ctx, "held key's record not applied: nothing behind it is applied, the key stays held",
					"record_id", id.String(), "outcome", string(ev.Outcome))
				return append(keep, leave(fmt.Errorf("reconcile: held behind %s (%s)", id, ev.Outcome))...)
			}
			byID[id.String()] = ms[1:] // the same record parked more than once: copies of it
			s.deleteApplied(ctx, byID, id, rep)
			applied[id] = true
		}
		err := d.holds.Release(ctx, d.cfg.Group, key, len(st.Held))
		if err == nil {
			rep.Released++
			log.InfoContext(ctx, "held key released: every held record applied in order", "records", len(st.Held))
			return append(keep, leave(nil)...) // (nothing left unless a message was listed twice)
		}
		if !errors.Is(err, dedupe.ErrHoldChanged) {
			log.ErrorContext(ctx, "held key not released", "error", err)
			return append(keep, leave(err)...)
		}
		// Records were parked behind it meanwhile: read it again and go on.
		if st, ok, err = d.holds.Get(ctx, d.cfg.Group, key); err != nil || !ok {
			return append(keep, leave(err)...)
		}
	}
}

// errKeepMessage makes handleThen leave the message of a record applied ahead of its place in
// a hold's list: the message is deleted when the walk reaches that place.
var errKeepMessage = errors.New("reconcile: applied ahead of its place in the hold: message kept for its place")

// applyEarlier applies, in sequence order, the records listed in later (the hold's list after
// the record next) that are of next's shard, earlier in it than next, and not applied yet. Each
// is run through the pipeline as the walk runs any record, but neither the hold's applied count
// nor its message is touched: at its own place the ledger finds it processed (a duplicate), the
// count moves and the message is deleted. An error names the record that could not be applied
// (not received in this session, or not processed): nothing after it may be applied.
func (s *heldSession) applyEarlier(ctx context.Context, byID map[string][]sqstypes.Message, later []recordid.ID, next recordid.ID,
	applied, ahead map[recordid.ID]bool, started time.Time, rep *RedriveReport) error {
	var earlier []recordid.ID
	for _, id := range later {
		if id.ShardID == next.ShardID && streamOrder(id, next) < 0 && !applied[id] && !ahead[id] && !slices.Contains(earlier, id) {
			earlier = append(earlier, id)
		}
	}
	slices.SortFunc(earlier, streamOrder)
	for _, id := range earlier {
		ms := byID[id.String()]
		if len(ms) == 0 {
			return fmt.Errorf("reconcile: held behind %s (earlier in the stream than %s), whose parked message this session did not receive", id, next)
		}
		var outcome Outcome
		ev := s.d.handleThen(ctx, ms[0], started, rep, func(o Outcome) error {
			outcome = o
			return errKeepMessage
		})
		if outcome != OutcomeProcessed && outcome != OutcomeDuplicate {
			if outcome == OutcomeParkedAgain {
				// Parked anew: the new message stands for it; the old one stays until the walk
				// reaches its place (a copy then).
				ev.Outcome, ev.Err = OutcomeParkedAgain, nil
			}
			s.d.count(rep, ev)
			s.d.report(ev)
			return fmt.Errorf("reconcile: held behind %s (earlier in the stream than %s): %s", id, next, ev.Outcome)
		}
		ev.Outcome, ev.Err = outcome, nil
		s.d.count(rep, ev)
		s.d.report(ev)
		ahead[id] = true
	}
	return nil
}

// streamOrder orders two records of one shard by sequence number, then sub-sequence number.
func streamOrder(a, b recordid.ID) int {
	if c := seqnum.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	return int(a.Sub) - int(b.Sub)
}

// deleteApplied deletes the session's messages of id, a record the hold counts applied (each
// confirmed by the ledger when it was taken).
func (s *heldSession) deleteApplied(ctx context.Context, byID map[string][]sqstypes.Message, id recordid.ID, rep *RedriveReport) {
	d := s.d
	for _, dup := range byID[id.String()] {
		if _, err := d.q.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{QueueUrl: aws.String(d.url), ReceiptHandle: dup.ReceiptHandle}); err != nil {
			rep.DeleteFailures++
		}
		rep.Duplicates++
		d.report(RedriveEvent{MessageID: aws.ToString(dup.MessageId), RecordID: id.String(), Outcome: OutcomeDuplicate})
	}
	delete(byID, id.String())
}

// handleCounted redrives m like Run does and counts it; the receipt handle when it stays.
func (d *Redriver) handleCounted(ctx context.Context, m sqstypes.Message, started time.Time, rep *RedriveReport, before func(Outcome) error) []*string {
	ev := d.handleThen(ctx, m, started, rep, before)
	d.count(rep, ev)
	d.report(ev)
	switch ev.Outcome {
	case OutcomeLeft, OutcomeSkipped, OutcomeInvalid, OutcomeRefused:
		return []*string{m.ReceiptHandle}
	}
	return nil
}

func (d *Redriver) count(rep *RedriveReport, ev RedriveEvent) {
	switch ev.Outcome {
	case OutcomeProcessed:
		rep.Processed++
	case OutcomeDuplicate:
		rep.Duplicates++
	case OutcomeParkedAgain:
		rep.ParkedAgain++
	case OutcomeLeft:
		rep.Left++
	case OutcomeSkipped:
		rep.Skipped++
	case OutcomeInvalid:
		rep.Invalid++
	case OutcomeRefused:
		rep.Refused++
	}
}

func (d *Redriver) report(ev RedriveEvent) {
	if d.progress != nil {
		d.progress(ev)
	}
}
