package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Redrive: parked records back through the pipeline after the cause is fixed.
//
// A parked record is done in the ledger (its entry lists it in Done and Parked), and its failed
// attempts are there too, so the consumer's pipeline would skip it, or park it again at the
// first failure. The redrive pipeline therefore reads the ledger through RedriveLedger, which
// changes two answers for the records it is asked about:
//
//   - Done(id) is true only for a record done without being parked (a redrive that already
//     processed it, or a business-key duplicate), so a parked record runs again;
//   - Attempts(id) counts only the failures recorded since this redrive first saw the record,
//     so the record gets a fresh budget of MaxRecordAttempts.
//
// Each failed redrive attempt is written to the ledger like any other (source redrive). The
// Redriver retries a failing record in place, with backoff, until it succeeds or its fresh
// budget is spent; then the pipeline parks it again, under the same rules as the consumer: a
// new parked message (source redrive, attempts counted from the redrive) replaces the old one.
// The old SQS message is deleted only once the record is processed, found already processed,
// or parked again — that is, after pipeline.Run returned, so after the new park's SendMessage
// was accepted: every park is a distinct message (park's parkId), so on a FIFO parked queue too
// an accepted send is a message in the queue, never a duplicate SQS dropped. In every other case
// (ledger, SQS or S3 unavailable, payload object missing or altered, version-1 by-reference
// payload no longer in the stream) the message stays in the queue and becomes visible again
// after the visibility timeout: a redriven record is never dropped.
//
// A payload parked in the payload bucket (park.Message.PayloadS3) is read back through the S3
// client given with WithRedrivePayloads and checked against the parked length and SHA-256. The
// object itself is never deleted here: the message may come back (delete failed, visibility
// expired), and the bucket's lifecycle outlives the queue's retention.

// RedriveLedger wraps the ledger for a redrive pipeline (see the comment above). It is safe for
// concurrent use; one instance should serve one redrive session.
type RedriveLedger struct {
	inner pipeline.Ledger
	mu    sync.Mutex
	base  map[recordid.ID]int // ledger attempts when the session first needed them
}

var _ pipeline.Ledger = (*RedriveLedger)(nil)

// NewRedriveLedger wraps l (pipeline.DedupeLedger in the CLI).
func NewRedriveLedger(l pipeline.Ledger) *RedriveLedger {
	return &RedriveLedger{inner: l, base: map[recordid.ID]int{}}
}

// Lookup implements pipeline.Ledger.
func (l *RedriveLedger) Lookup(ctx context.Context, shard recordid.Shard, first, last string) (pipeline.View, error) {
	v, err := l.inner.Lookup(ctx, shard, first, last)
	if err != nil {
		return nil, err
	}
	return redriveView{inner: v, l: l}, nil
}

// Record implements pipeline.Ledger.
func (l *RedriveLedger) Record(ctx context.Context, shard recordid.Shard, e pipeline.Entry) error {
	return l.inner.Record(ctx, shard, e)
}

// Mark implements pipeline.Ledger: a redrive writes no in-flight marker. Each of its runs is one
// parked message, which stays in the queue until the run's outcome is recorded: a redrive that
// dies leaves the message to come back after its visibility timeout (and, past the queue's
// maxReceiveCount, to its dead-letter queue), which is where its deaths are counted.
func (l *RedriveLedger) Mark(context.Context, recordid.Shard, pipeline.Marker) error { return nil }

// Unmark implements pipeline.Ledger: nothing was marked.
func (l *RedriveLedger) Unmark(context.Context, recordid.Shard, pipeline.Marker) error { return nil }

type redriveView struct {
	inner pipeline.View
	l     *RedriveLedger
}

// Markers implements pipeline.View: none. A redrive run neither waits for the mapping's or the
// reconciler's live runs nor counts their deaths; it acts on a parked message only once the ledger
// confirms it (redrive_confirm.go).
func (v redriveView) Markers() []pipeline.MarkerState { return nil }

// ParkedByRef reports whether the inner view records id parked by reference.
func (v redriveView) ParkedByRef(id recordid.ID) bool {
	bv, ok := v.inner.(interface{ ParkedByRef(recordid.ID) bool })
	return ok && bv.ParkedByRef(id)
}

// ParkReceipts implements pipeline.ParkView: the inner view's recorded parks.
func (v redriveView) ParkReceipts(id recordid.ID) []park.Receipt {
	if pv, ok := v.inner.(pipeline.ParkView); ok {
		return pv.ParkReceipts(id)
	}
	return nil
}

// Done is true for records done without being parked. A view that cannot tell parked records
// apart makes every record run again.
func (v redriveView) Done(id recordid.ID) bool {
	if rv, ok := v.inner.(interface{ RedriveProcessed(recordid.ID) bool }); ok && rv.RedriveProcessed(id) {
		return true // a redrive processed it already (its response may have been lost)
	}
	pv, ok := v.inner.(parkedView)
	return ok && v.inner.Done(id) && !pv.Parked(id)
}

// Attempts counts failures since the session first asked about id (the pipeline asks after a
// failure, before recording it).
func (v redriveView) Attempts(id recordid.ID) int {
	n := v.inner.Attempts(id)
	v.l.mu.Lock()
	defer v.l.mu.Unlock()
	b, ok := v.l.base[id]
	if !ok {
		v.l.base[id] = n
		return 0
	}
	return max(0, n-b)
}

// parkedQueueAPI is the part of *sqs.Client the Redriver uses.
type parkedQueueAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var _ parkedQueueAPI = (*sqs.Client)(nil)

// RedriveConfig tunes a Redriver.
type RedriveConfig struct {
	Group, Stream string
	// MaxRecordAttempts is the redrive pipeline's MaxRecordAttempts (the fresh budget); it
	// bounds the in-place retries of one record.
	MaxRecordAttempts int
	// MaxMessages stops the session after this many messages (0: until the queue has none left).
	MaxMessages int
	// VisibilityTimeout hides a received message from other readers while it is redriven, and
	// keeps messages left in the queue out of this session (default 2 minutes). At the end of
	// the session the messages left in the queue are made visible again at once.
	VisibilityTimeout time.Duration
	// WaitTime is the ReceiveMessage long-poll wait (default 1s, at most 20s).
	WaitTime time.Duration
	// Backoff is the first wait between two attempts of one record, doubled each time (default 200ms).
	Backoff time.Duration
}

// Outcome of one parked message.
type Outcome string

// Outcomes.
const (
	OutcomeProcessed   Outcome = "processed"    // Process succeeded; message deleted
	OutcomeDuplicate   Outcome = "duplicate"    // already processed (ledger or business key); message deleted
	OutcomeParkedAgain Outcome = "parked-again" // failed its fresh budget; parked anew, old message deleted
	OutcomeLeft        Outcome = "left"         // not accounted for (see Err); message stays in the queue
	OutcomeSkipped     Outcome = "skipped"      // another group, stream or this session's own park; stays
	OutcomeInvalid     Outcome = "invalid"      // not a parked-record message; stays (logged at ERROR)
	OutcomeHeld        Outcome = "held"         // behind a held key's head that is not applied yet; stays
	OutcomeRefused     Outcome = "refused"      // the ledger does not confirm it (see Err); never applied, stays
)

// RedriveEvent is reported for every message handled.
type RedriveEvent struct {
	MessageID string
	RecordID  string
	Outcome   Outcome
	Attempts  int   // redrive attempts made
	Err       error // why, for left and invalid
}

// RedriveReport sums a session.
type RedriveReport struct {
	Received, Processed, Duplicates, ParkedAgain, Left, Skipped, Invalid int
	DeleteFailures                                                       int
	// Key holds (WithRedriveHolds): records left held behind a head not applied yet, and keys
	// released (every held record applied in order).
	Held, Released int
	// Refused: messages the ledger does not confirm (redrive_confirm.go), left in the queue.
	Refused int
}

// ErrPayloadGone: a record parked by reference (by a release before payloads went to S3) is no
// longer in the stream.
var ErrPayloadGone = errors.New("reconcile: parked-by-reference payload no longer in the stream")

// Redriver moves parked records back through a pipeline.
type Redriver struct {
	q        parkedQueueAPI
	url      string
	kin      kinesisAPI
	objects  park.GetObjectAPI
	p        Replayer
	cfg      RedriveConfig
	log      *slog.Logger
	progress func(RedriveEvent)
	now      func() time.Time
	holds    RedriveHolds // ON_PARK=hold-key (redrive_hold.go)
	ledger   pipeline.Ledger
	bucket   string
	metrics  Emitter
}

// RedriveOption configures a Redriver.
type RedriveOption func(*Redriver)

// WithRedriveLogger sets the logger (default slog.Default()).
func WithRedriveLogger(l *slog.Logger) RedriveOption { return func(d *Redriver) { d.log = l } }

// WithRedrivePayloads reads payloads parked in S3 through client (required for such messages;
// without it they are left in the queue).
func WithRedrivePayloads(client park.GetObjectAPI) RedriveOption {
	return func(d *Redriver) { d.objects = client }
}

// WithRedriveProgress calls fn after every message.
func WithRedriveProgress(fn func(RedriveEvent)) RedriveOption {
	return func(d *Redriver) { d.progress = fn }
}

// NewRedriver returns a Redriver reading the parked queue at queueURL, re-reading version-1
// by-reference payloads through kin, and running records through p, a pipeline built over
// NewRedriveLedger (with the same Process, parker and MaxRecordAttempts as cfg).
func NewRedriver(q parkedQueueAPI, queueURL string, kin kinesisAPI, p Replayer, cfg RedriveConfig, opts ...RedriveOption) (*Redriver, error) {
	if q == nil || kin == nil || p == nil || queueURL == "" {
		return nil, fmt.Errorf("%w: queue client, queue URL, Kinesis client and pipeline are all required", ErrConfig)
	}
	if err := (recordid.Shard{Group: cfg.Group, Stream: cfg.Stream, ShardID: "s"}).Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.MaxRecordAttempts < 1 {
		return nil, fmt.Errorf("%w: MaxRecordAttempts %d < 1", ErrConfig, cfg.MaxRecordAttempts)
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = 2 * time.Minute
	}
	if cfg.WaitTime <= 0 {
		cfg.WaitTime = time.Second
	}
	cfg.WaitTime = min(cfg.WaitTime, 20*time.Second)
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	d := &Redriver{q: q, url: queueURL, kin: kin, p: p, cfg: cfg, log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(d)
	}
	if lp, ok := p.(interface{ Ledger() pipeline.Ledger }); ok && d.ledger == nil {
		d.ledger = lp.Ledger()
	}
	return d, nil
}

// Run receives parked messages until the queue has no message this session has not seen (or
// MaxMessages), redriving each. It returns an error only when the queue cannot be read; the
// report is valid either way. Messages it leaves in the queue are made visible again when it
// returns.
func (d *Redriver) Run(ctx context.Context) (RedriveReport, error) {
	var rep RedriveReport
	seen := map[string]bool{}
	var keep []*string // receipt handles of messages left in the queue
	defer func() {
		for _, h := range keep {
			_, err := d.q.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(d.url), ReceiptHandle: h, VisibilityTimeout: 0})
			if err != nil {
				d.log.WarnContext(ctx, "making a parked message visible again failed; it reappears after the visibility timeout", "error", err)
			}
		}
	}()
	defer func() { d.emitRefused(rep) }()
	started := d.now()
	held := d.heldSession()
	var lostUntil time.Time // when messages handed out in a lost receive response are visible again
	for d.cfg.MaxMessages == 0 || rep.Received < d.cfg.MaxMessages {
		n := int32(10)
		if d.cfg.MaxMessages > 0 {
			n = int32(min(10, d.cfg.MaxMessages-rep.Received))
		}
		out, err := d.q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(d.url), MaxNumberOfMessages: n,
			WaitTimeSeconds:   int32(d.cfg.WaitTime / time.Second),
			VisibilityTimeout: int32((d.cfg.VisibilityTimeout + time.Second - 1) / time.Second),
		})
		if err != nil {
			return rep, fmt.Errorf("reconcile: receive from %s: %w", d.url, err)
		}
		if ReceiveMayHaveLost(out) {
			lostUntil = d.now().Add(d.cfg.VisibilityTimeout)
		}
		fresh := 0
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id] = true
			fresh++
			rep.Received++
			if held.take(ctx, m) {
				continue // a record of a held key: redriven in order after the receive loop
			}
			ev := d.handle(ctx, m, started, &rep)
			switch ev.Outcome {
			case OutcomeLeft, OutcomeSkipped, OutcomeInvalid, OutcomeRefused:
				keep = append(keep, m.ReceiptHandle)
			}
			d.count(&rep, ev)
			d.report(ev)
		}
		if fresh == 0 && !lostUntil.IsZero() && ctx.Err() == nil {
			wait := lostUntil.Sub(d.now())
			lostUntil = time.Time{}
			d.log.WarnContext(ctx, "a receive attempt may have been answered with parked messages whose response was lost; "+
				"waiting for them to become visible again", "wait", wait.Round(time.Millisecond).String())
			if ctxtime.Sleep(ctx, wait) == nil {
				continue
			}
		}
		if fresh == 0 || ctx.Err() != nil {
			break
		}
	}
	keep = append(keep, held.run(ctx, started, &rep)...)
	return rep, nil
}

// ReceiveMayHaveLost reports whether the SDK retried a ReceiveMessage after an attempt that may have
// been answered: its error is not an error status from SQS (a throttle or server error hands
// out nothing) but a broken or unreadable response. SQS then made the messages of that answer
// invisible for the visibility timeout, and the retry cannot see them. The SDK retries such
// read errors on purpose (aws-sdk-go-v2 issue 2737 and pull request 2949: "use of closed
// network connection" while the body is read), so the redriver must allow for them.
func ReceiveMayHaveLost(out *sqs.ReceiveMessageOutput) bool {
	res, ok := retry.GetAttemptResults(out.ResultMetadata)
	if !ok {
		return false
	}
	for _, a := range res.Results {
		if a.Err == nil {
			continue
		}
		var re *awshttp.ResponseError
		if errors.As(a.Err, &re) && re.HTTPStatusCode() >= 300 {
			continue
		}
		return true
	}
	return false
}

// handle redrives one message.
func (d *Redriver) handle(ctx context.Context, m sqstypes.Message, started time.Time, rep *RedriveReport) RedriveEvent {
	return d.handleThen(ctx, m, started, rep, nil)
}

// handleThen is handle calling before (when not nil) once the record is accounted for and before
// its message is deleted: an error from it leaves the message in the queue (OutcomeLeft).
func (d *Redriver) handleThen(ctx context.Context, m sqstypes.Message, started time.Time, rep *RedriveReport, before func(Outcome) error) RedriveEvent {
	ev := RedriveEvent{MessageID: aws.ToString(m.MessageId)}
	pm, err := park.Decode(aws.ToString(m.Body))
	if err != nil {
		ev.Outcome, ev.Err = OutcomeInvalid, err
		d.log.ErrorContext(ctx, "parked queue message is not a parked record: left in the queue", "message_id", ev.MessageID, "error", err)
		return ev
	}
	ev.RecordID = pm.RecordID
	log := d.log.With("group", pm.Group, "stream", pm.Stream, "shard_id", pm.ShardID, "sequence_number", pm.Seq,
		"sub_sequence_number", pm.Sub, "message_id", ev.MessageID)
	switch {
	case pm.Group != d.cfg.Group || pm.Stream != d.cfg.Stream:
		ev.Outcome = OutcomeSkipped
		log.InfoContext(ctx, "parked record of another group or stream: left in the queue")
		return ev
	case pm.Source == pipeline.SourceRedrive && !pm.ParkedAt.Before(started):
		ev.Outcome = OutcomeSkipped // parked again by this session: the next session's work
		return ev
	}
	if err := d.confirm(ctx, pm); errors.Is(err, ErrRefused) {
		ev.Outcome, ev.Err = OutcomeRefused, err
		log.ErrorContext(ctx, "parked message refused, left in the queue for an operator: the ledger does not confirm it", "error", err)
		return ev
	} else if err != nil {
		ev.Outcome, ev.Err = OutcomeLeft, err
		log.ErrorContext(ctx, "parked message cannot be confirmed now: left in the queue", "error", err)
		return ev
	}
	rec, err := d.record(ctx, pm)
	if err != nil {
		ev.Outcome, ev.Err = OutcomeLeft, err
		log.ErrorContext(ctx, "parked record cannot be rebuilt: left in the queue", "error", err)
		return ev
	}
	batch := pipeline.Batch{Shard: recordid.Shard{Group: pm.Group, Stream: pm.Stream, ShardID: pm.ShardID},
		Records: []pipeline.Record{rec}, Source: pipeline.SourceRedrive}
	wait := d.cfg.Backoff
	// Each failed attempt is recorded, so the budget is spent after MaxRecordAttempts attempts;
	// one more guards against a ledger that does not count (then the message is left).
	for ev.Attempts < d.cfg.MaxRecordAttempts+1 {
		ev.Attempts++
		res, err := d.p.Run(ctx, batch)
		switch {
		case err != nil:
			ev.Outcome, ev.Err = OutcomeLeft, err
			log.ErrorContext(ctx, "redrive attempt failed as a whole (ledger unavailable): left in the queue", "error", err)
			return ev
		case res.Processed == 1:
			ev.Outcome = OutcomeProcessed
		case res.DuplicatesSkipped == 1:
			ev.Outcome = OutcomeDuplicate
		case res.Parked == 1:
			ev.Outcome = OutcomeParkedAgain
			log.WarnContext(ctx, "redriven record failed its fresh budget and is parked again", "attempts", ev.Attempts)
		case len(res.Failures) == 1 && res.Failures[0].Attempted && ctx.Err() == nil:
			log.WarnContext(ctx, "redrive attempt failed", "attempt", ev.Attempts, "error", res.Failures[0].Err)
			if err := ctxtime.Sleep(ctx, wait); err != nil {
				ev.Outcome, ev.Err = OutcomeLeft, err
				return ev
			}
			wait *= 2
			continue
		default:
			ev.Outcome, ev.Err = OutcomeLeft, failureErr(res)
			log.ErrorContext(ctx, "redrive attempt not made: left in the queue", "error", ev.Err)
			return ev
		}
		if before != nil {
			if err := before(ev.Outcome); err != nil {
				log.ErrorContext(ctx, "redriven record accounted for, but its key's hold could not be moved on: left in the queue", "outcome", string(ev.Outcome), "error", err)
				ev.Outcome, ev.Err = OutcomeLeft, err
				return ev
			}
		}
		if _, err := d.q.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{QueueUrl: aws.String(d.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
			// The record is accounted for; the message comes back after the visibility timeout
			// and a later redrive finds it done (processed) or parked anew.
			rep.DeleteFailures++
			log.ErrorContext(ctx, "deleting the redriven message failed: it will be received again", "outcome", string(ev.Outcome), "error", err)
		}
		return ev
	}
	ev.Outcome, ev.Err = OutcomeLeft, fmt.Errorf("reconcile: record %s still failing after %d attempts without being parked", pm.RecordID, ev.Attempts)
	log.ErrorContext(ctx, "redriven record neither succeeded nor was parked again: left in the queue", "error", ev.Err)
	return ev
}

func failureErr(res pipeline.Result) error {
	if len(res.Failures) > 0 && res.Failures[0].Err != nil {
		return res.Failures[0].Err
	}
	return errors.New("reconcile: record not processed")
}

// record rebuilds the pipeline record of a parked message: its payload is inline or in the
// payload bucket (park.Message.Payload checks it); a version-1 by-reference record is re-read
// from the stream (AT_SEQUENCE_NUMBER) and checked against the message's length and SHA-256.
func (d *Redriver) record(ctx context.Context, pm park.Message) (pipeline.Record, error) {
	id, err := pm.ID()
	if err != nil {
		return pipeline.Record{}, err
	}
	rec := pipeline.Record{ID: id, PartitionKey: pm.PartitionKey, ArrivalTime: pm.ArrivalTime}
	if !pm.ByRef {
		rec.Data, err = pm.Payload(ctx, d.objects)
		return rec, err
	}
	rd := &shardReader{kin: d.kin, stream: pm.Stream, shardID: pm.ShardID, limit: 1}
	err = rd.open(ctx, types.ShardIteratorTypeAtSequenceNumber, pm.Seq)
	if errors.Is(err, errTrimmed) || errors.Is(err, errNoRecord) {
		return rec, fmt.Errorf("%w: %s: %v", ErrPayloadGone, pm.RecordID, err)
	}
	if err != nil {
		return rec, err
	}
	var recs []pipeline.Record
	for len(recs) == 0 {
		page, caughtUp, err := rd.next(ctx)
		if err != nil {
			return rec, err
		}
		if len(page) > 0 {
			if aws.ToString(page[0].SequenceNumber) != pm.Seq {
				return rec, fmt.Errorf("%w: %s: the stream starts at %s", ErrPayloadGone, pm.RecordID, aws.ToString(page[0].SequenceNumber))
			}
			recs = UserRecords(pm.ShardID, page[:1])
		} else if caughtUp {
			return rec, fmt.Errorf("%w: %s: not found", ErrPayloadGone, pm.RecordID)
		}
	}
	for _, u := range recs {
		if u.ID.Sub != pm.Sub {
			continue
		}
		sum := sha256.Sum256(u.Data)
		if len(u.Data) != pm.DataBytes || hex.EncodeToString(sum[:]) != pm.DataSHA256 {
			return rec, fmt.Errorf("reconcile: record %s re-read from the stream does not match the parked checksum", pm.RecordID)
		}
		rec.Data, rec.PartitionKey = u.Data, u.PartitionKey
		return rec, nil
	}
	return rec, fmt.Errorf("%w: %s: no user record %d in the aggregate", ErrPayloadGone, pm.RecordID, pm.Sub)
}
