package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Strict order per partition key (ON_PARK=hold-key, WithHoldKey). The design is in
// docs/consumer.md, "Holding a key"; the argument that no record overtakes a parked one in
// docs/design.md, "6. Under `ON_PARK=hold-key`".
//
//   - When a record is about to be parked, its key's hold is written first (Holder.Hold with
//     create): the record becomes the key's head, or, if the key is already held, is listed
//     behind the head. A hold that cannot be written leaves the record failed, not parked.
//   - Every Run reads the holds of its batch's keys (Holder.Heads, strongly consistent) in
//     parallel with the ledger Lookup: no round trip is added. A record of a held key that is
//     not done is parked behind the head without running (listed in the hold first, then sent
//     with park.Message.HeldBehind and LastError "held behind <head>"), and so is every later
//     record of its key in the batch. Other keys and the shard go on.
//   - The hold read runs beside the Lookup, so it can be older than the Lookup: a record of K
//     that the Lookup shows parked, with no hold of K read, may be a head whose hold was written
//     after the read. Such keys are read again after the Lookup (one more round trip, only for
//     batches holding a parked record of a key read as not held).
//   - Only `gapless redrive` releases a key (reconcile.Redriver with WithRedriveHolds).

// Hold errors.
var (
	// ErrNoHold: Holder.Hold without create wraps it when the key is not held.
	ErrNoHold = errors.New("pipeline: partition key not held")
	// ErrHoldReleased is the failure of a record planned to be parked behind its key's hold when
	// the hold was released before it could be listed: it is retried, and then runs normally.
	ErrHoldReleased = errors.New("pipeline: not started, its key's hold was released meanwhile")
	// ErrHold wraps a hold that could not be written: the record stays failed, not parked.
	ErrHold = errors.New("pipeline: key hold not written")
)

// Holder stores key holds (dedupe.Holds through HoldStore; see the package comment above).
type Holder interface {
	// Heads returns the head of every held key among keys of group (absent: not held).
	Heads(ctx context.Context, group string, keys []string) (map[string]recordid.ID, error)
	// Hold lists ids behind key's head and returns the head. With create a key not held becomes
	// held with ids[0] as head; without, it is an error wrapping ErrNoHold.
	Hold(ctx context.Context, group, key string, ids []recordid.ID, create bool) (recordid.ID, error)
}

// WithHoldKey turns on ON_PARK=hold-key with h storing the holds.
func WithHoldKey(h Holder) Option { return func(p *Pipeline) { p.holder = h } }

// HoldStore adapts dedupe.Holds to Holder.
type HoldStore struct{ H *dedupe.Holds }

var _ Holder = HoldStore{}

// Heads implements Holder.
func (s HoldStore) Heads(ctx context.Context, group string, keys []string) (map[string]recordid.ID, error) {
	return s.H.Heads(ctx, group, keys)
}

// Hold implements Holder.
func (s HoldStore) Hold(ctx context.Context, group, key string, ids []recordid.ID, create bool) (recordid.ID, error) {
	head, err := s.H.Hold(ctx, group, key, ids, create)
	if errors.Is(err, dedupe.ErrNoHold) {
		return recordid.ID{}, fmt.Errorf("%w: %w", ErrNoHold, err)
	}
	return head, err
}

// holdRead is a Run's read of its keys' holds, started beside the Lookup.
type holdRead struct {
	p     *Pipeline
	group string
	done  chan struct{}
	heads map[string]recordid.ID
	err   error
}

// readHolds starts reading the holds of b's keys; nil when hold-key is off.
func (p *Pipeline) readHolds(ctx context.Context, b *Batch) *holdRead {
	if p.holder == nil {
		return nil
	}
	seen := map[string]bool{}
	var keys []string
	for i := range b.Records {
		if k := b.Records[i].PartitionKey; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	h := &holdRead{p: p, group: b.Shard.Group, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.heads, h.err = p.holder.Heads(ctx, h.group, keys)
	}()
	return h
}

type parkedView interface{ Parked(id recordid.ID) bool }

// wait returns the heads once the Lookup's view is in: keys the view shows a parked record of,
// read as not held, are read again (see the package comment above).
func (h *holdRead) wait(ctx context.Context, b *Batch, view View, res *Result) (map[string]recordid.ID, error) {
	if h == nil {
		return nil, nil
	}
	<-h.done
	if h.err != nil {
		return nil, h.err
	}
	pv, _ := view.(parkedView)
	seen := map[string]bool{}
	var again []string
	for i := range b.Records {
		r := &b.Records[i]
		if _, held := h.heads[r.PartitionKey]; held || seen[r.PartitionKey] || !view.Done(r.ID) || (pv != nil && !pv.Parked(r.ID)) {
			continue
		}
		seen[r.PartitionKey] = true
		again = append(again, r.PartitionKey)
	}
	if len(again) == 0 {
		return h.heads, nil
	}
	res.HoldRereads++
	more, err := h.p.holder.Heads(ctx, h.group, again)
	if err != nil {
		return nil, err
	}
	for k, id := range more {
		h.heads[k] = id
	}
	return h.heads, nil
}

// applyHolds plans every record of a held key that is not done, and would run or be parked for
// deaths, to be parked behind its key's head.
func applyHolds(b *Batch, view View, pl *plan, heads map[string]recordid.ID) {
	if len(heads) == 0 {
		return
	}
	pl.heads = heads
	for i := range b.Records {
		r := &b.Records[i]
		if _, held := heads[r.PartitionKey]; held && (pl.kinds[i] == planRun || pl.kinds[i] == planDead) && !view.Done(r.ID) {
			pl.kinds[i] = planHoldKey
		}
	}
}

// isHeld: record i is parked behind its key's hold rather than run (behind is the head parked
// earlier in this lane, zero if none).
func (r *batchRun) isHeld(i int, behind recordid.ID) bool {
	return r.p.holder != nil && (behind != recordid.ID{} || r.plan.kinds[i] == planHoldKey)
}

// nextBehind is the head later records of the lane are parked behind after o.
func (r *batchRun) nextBehind(o *outcome, behind recordid.ID) recordid.ID {
	if r.p.holder != nil && o.status == statusParked && o.parked != nil && (o.parked.head != recordid.ID{}) {
		return o.parked.head
	}
	return behind
}

// parkHeld lists rec in its key's hold and parks it behind the head, without running it.
func (r *batchRun) parkHeld(ctx context.Context, rec *Record, i int, behind recordid.ID, o *outcome) {
	if r.deadlineNear(ctx) { // two writes per held record: none started past the margin
		o.status, o.err, o.why = statusFailed, ErrDeadline, whyDeadline
		return
	}
	o.why = whyHeldKey
	o.attempts = r.plan.attempts(r.view, i, rec.ID)
	log := r.p.recordLogger(r.log, rec)
	head, err := r.p.holder.Hold(ctx, r.b.Shard.Group, rec.PartitionKey, []recordid.ID{rec.ID}, false)
	switch {
	case errors.Is(err, ErrNoHold):
		log.InfoContext(ctx, "key hold released meanwhile: record left failed, it runs when retried")
		o.status, o.err = statusFailed, ErrHoldReleased
		return
	case err != nil:
		log.ErrorContext(ctx, "key hold not written: record left failed", "error", err)
		o.status, o.err, o.parkErr = statusFailed, fmt.Errorf("%w: %w", ErrHold, err), true
		return
	}
	if (behind != recordid.ID{}) && behind != head {
		head = behind // (cannot differ: a key has one head until released)
	}
	pr := park.Record{ID: rec.ID, Shard: r.b.Shard, PartitionKey: rec.PartitionKey, ArrivalTime: rec.ArrivalTime,
		Data: rec.Data, Attempts: o.attempts, LastError: "held behind " + head.String(), HeldBehind: head.String(), Source: r.b.Source,
		GroupPerRecord: true}
	if head == rec.ID {
		pr.LastError, pr.HeldBehind = "parked again as the head of its held key", ""
	}
	res, err := r.p.parker.Park(ctx, pr)
	if err != nil {
		log.ErrorContext(ctx, "record held behind its key could not be parked: left failed", "held_behind", head.String(), "park_error", err.Error())
		o.status, o.err, o.parkErr = statusFailed, fmt.Errorf("park held record: %w", err), true
		return
	}
	log.WarnContext(ctx, "record parked behind its held key", "held_behind", head.String(), "message_id", res.MessageID, "park_id", res.Receipt.ParkID)
	o.status, o.parked, o.err = statusParked, &parkedAs{head: head, receipt: res.Receipt}, nil
}

// holdHead, with hold-key on, makes rec its key's head (or lists it behind the head) before it
// is parked: the HeldBehind of its message ("" for the head), false when the hold could not be
// written (o is then failed and the record is not parked).
func (r *batchRun) holdHead(ctx context.Context, rec *Record, o *outcome) (string, bool) {
	if r.p.holder == nil {
		return "", true
	}
	head, err := r.p.holder.Hold(ctx, r.b.Shard.Group, rec.PartitionKey, []recordid.ID{rec.ID}, true)
	if err != nil {
		r.p.recordLogger(r.log, rec).ErrorContext(ctx, "record due for parking: key hold not written, record left failed", "error", err)
		o.status, o.parkErr = statusFailed, true
		return "", false
	}
	o.parked = &parkedAs{head: head}
	if head == rec.ID {
		return "", true
	}
	return head.String(), true
}
