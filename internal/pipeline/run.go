package pipeline

// One Run's workers: records run concurrently across partition keys and in sequence order
// within a key (a lane per key), each outcome handed over under the run's lock.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// processContext ends half a margin before ctx's deadline, leaving the rest for the writes.
func (p *Pipeline) processContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && p.cfg.DeadlineMargin > 0 {
		return context.WithDeadline(ctx, dl.Add(-p.cfg.DeadlineMargin/2))
	}
	return context.WithCancel(ctx)
}

// batchRun is the shared state of one Run's workers. Workers hand each record's outcome over
// under mu; once Run has given up waiting (abandoned), late outcomes are dropped, so a Process
// still running can never write into what Run tallies.
type batchRun struct {
	p        *Pipeline
	b        *Batch
	view     View
	plan     *plan
	outcomes []outcome
	log      *slog.Logger
	stopped  atomic.Bool // the deadline was reached: start nothing more

	mu        sync.Mutex
	abandoned bool
	running   map[int]bool // records whose Process (or parking) is under way

	// Batch-sink progress (progress.go), touched by the waves loop only.
	saved   time.Time // the run's start or its last saving of progress
	unsaved []int     // records sent since then
}

// wait waits for the workers, but not past a quarter margin before ctx's deadline: a Process
// that ignores its context must not turn into a function timeout that loses the whole batch.
func (r *batchRun) wait(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	dl, ok := ctx.Deadline()
	if !ok {
		<-done
		return
	}
	t := time.NewTimer(max(dl.Sub(r.p.now())-r.p.cfg.DeadlineMargin/4, 0))
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	r.mu.Lock()
	r.abandoned = true
	running := r.running
	r.running = nil
	r.mu.Unlock()
	for i := range r.outcomes {
		o := &r.outcomes[i]
		if o.status != statusPending {
			continue
		}
		if !running[i] {
			*o = outcome{status: statusFailed, err: ErrDeadline, why: whyDeadline}
			continue
		}
		rec := &r.b.Records[i]
		*o = outcome{why: whyAbandoned, attempted: true, err: ErrAbandoned, attempts: r.plan.attempts(r.view, i, rec.ID) + 1}
		r.p.recordLogger(r.log, rec).ErrorContext(ctx, "process did not return before the deadline: counted as a failed attempt and abandoned",
			"attempts", o.attempts, "max_attempts", r.p.cfg.MaxRecordAttempts)
		r.finishFailed(ctx, rec, o)
	}
}

func (r *batchRun) isAbandoned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abandoned
}

// begin marks record i as running; false when Run has abandoned the batch.
func (r *batchRun) begin(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abandoned {
		return false
	}
	r.running[i] = true
	return true
}

// hand stores record i's outcome; false when Run has abandoned the batch (the outcome is dropped).
func (r *batchRun) hand(i int, o outcome) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abandoned {
		return false
	}
	delete(r.running, i)
	r.outcomes[i] = o
	return true
}

func (r *batchRun) lane(ctx, procCtx context.Context, lane []int) {
	blocked := false
	var behind recordid.ID // hold-key: the head this lane's key is held behind
	for _, i := range lane {
		var o outcome
		ran := false
		switch {
		case blocked:
			o.status, o.err = statusFailed, ErrKeyBlocked
		case r.isHeld(i, behind):
			if !r.begin(i) {
				return
			}
			r.parkHeld(ctx, &r.b.Records[i], i, behind, &o)
			ran = true
		case r.plan.kinds[i] == planDead:
			if !r.begin(i) {
				return
			}
			r.parkDead(ctx, &r.b.Records[i], i, &o)
			ran = true
		case r.deadlineNear(ctx):
			o.status, o.err, o.why = statusFailed, ErrDeadline, whyDeadline // sticky: the rest follow
		default:
			if !r.begin(i) {
				return
			}
			r.record(ctx, procCtx, &r.b.Records[i], i, &o)
			ran = true
		}
		if !r.hand(i, o) {
			return
		}
		if ran {
			blocked = o.status == statusFailed
			behind = r.nextBehind(&o, behind)
		}
	}
}

func (r *batchRun) deadlineNear(ctx context.Context) bool {
	if r.stopped.Load() {
		return true
	}
	near := ctx.Err() != nil
	if dl, ok := ctx.Deadline(); ok && dl.Sub(r.p.now()) < r.p.cfg.DeadlineMargin {
		near = true
	}
	if near && !r.stopped.Swap(true) {
		r.log.WarnContext(ctx, "deadline near: starting no more records", "margin", r.p.cfg.DeadlineMargin.String())
	}
	return near
}

// parkDead parks a record whose attempts were used up by invocations that died running it.
func (r *batchRun) parkDead(ctx context.Context, rec *Record, i int, o *outcome) {
	o.attempted, o.why, o.err = false, whyDied, ErrDied
	o.attempts = r.plan.attempts(r.view, i, rec.ID)
	r.p.recordLogger(r.log, rec).ErrorContext(ctx, "record killed the invocations that ran it: parking it without running it again",
		"attempts", o.attempts, "dead_attempts", r.plan.deathsOf(i), "max_attempts", r.p.cfg.MaxRecordAttempts)
	r.finishFailed(ctx, rec, o)
	if o.status == statusFailed {
		o.why = whyNone
	}
}

// record runs one record and sets its outcome.
func (r *batchRun) record(ctx, procCtx context.Context, rec *Record, i int, o *outcome) {
	p := r.p
	log := r.log // with the record's attributes, built only when a line is written
	if r.log.Enabled(ctx, slog.LevelDebug) || rec.DecodeErr != nil {
		log = r.p.recordLogger(r.log, rec)
	}
	err := rec.DecodeErr
	if err == nil {
		if p.keyPath != nil {
			if key, ok := businessKey(rec.Data, p.keyPath); !ok {
				log.DebugContext(ctx, "no business key in payload: processing without key dedupe", "dedupe_key", p.cfg.DedupeKey)
			} else {
				dup, cerr := p.claimer.Claim(procCtx, r.b.Shard.Group, key, rec.ID)
				switch {
				case errors.Is(cerr, ErrRecordFault):
					// The record's own fault: an attempt like a failed Process (counted below),
					// so the record is parked after the maximum instead of blocking its key.
					err = fmt.Errorf("claim business key: %w", cerr)
				case cerr != nil:
					// Not the record's fault: fail it (retried later) without counting an attempt,
					// and never skip it.
					r.p.recordLogger(r.log, rec).ErrorContext(ctx, "business-key claim failed: record left failed", "error", cerr)
					o.status, o.err = statusFailed, fmt.Errorf("claim business key: %w", cerr)
					return
				case dup:
					r.p.recordLogger(r.log, rec).InfoContext(ctx, "business-key duplicate skipped", "dedupe_key", p.cfg.DedupeKey)
					o.status = statusKeyDup
					return
				}
			}
		}
		if err == nil {
			if err = p.call(procCtx, r.log, rec); err == nil {
				o.status = statusProcessed
				return
			}
		}
	}
	o.attempted, o.err = true, err
	o.attempts = r.plan.attempts(r.view, i, rec.ID) + 1
	r.finishFailed(ctx, rec, o)
}

// finishFailed logs a failed attempt and parks the record when its attempts are used up.
func (r *batchRun) finishFailed(ctx context.Context, rec *Record, o *outcome) {
	p := r.p
	log := r.p.recordLogger(r.log, rec)
	err := o.err
	attrs := []any{"attempts", o.attempts, "max_attempts", p.cfg.MaxRecordAttempts, "error", err.Error()}
	if p.cfg.LogPayloads {
		attrs = append(attrs, "data", payloadForLog(rec.Data))
	}
	if o.attempts < p.cfg.MaxRecordAttempts || (o.why != whyAbandoned && r.isAbandoned()) {
		// (A worker returning after Run gave up on it: Run has counted this attempt and parks
		// the record itself; this outcome is dropped.)
		log.WarnContext(ctx, "record failed", attrs...)
		o.status = statusFailed
		return
	}
	heldBehind, ok := r.holdHead(ctx, rec, o) // hold-key: the hold is written before the park
	if !ok {
		return
	}
	pr, perr := p.parker.Park(ctx, park.Record{
		ID: rec.ID, Shard: r.b.Shard, PartitionKey: rec.PartitionKey, ArrivalTime: rec.ArrivalTime,
		Data: rec.Data, Attempts: o.attempts, LastError: err.Error(), Source: r.b.Source, HeldBehind: heldBehind,
		GroupPerRecord: p.holder != nil, // the hold orders a held key's records (park.Record)
	})
	switch {
	case perr != nil:
		log.ErrorContext(ctx, "record failed and could not be parked: left failed", append(attrs, "park_error", perr.Error())...)
		o.status, o.parkErr = statusFailed, true
	default:
		log.WarnContext(ctx, "record parked", append(attrs, "message_id", pr.MessageID, "park_id", pr.Receipt.ParkID)...)
		o.status = statusParked
		if o.parked == nil {
			o.parked = &parkedAs{}
		}
		o.parked.receipt = pr.Receipt
	}
}

// recordLogger adds a record's attributes to l; the partition key as park.KeyLogAttrs logs it
// (as is only with Config.LogPayloads, otherwise a short digest).
func (p *Pipeline) recordLogger(l *slog.Logger, rec *Record) *slog.Logger {
	return l.With("sequence_number", rec.ID.Seq, "sub_sequence_number", rec.ID.Sub).With(park.KeyLogAttrs(rec.PartitionKey, p.cfg.LogPayloads)...)
}

// call runs Process, turning a panic into an error.
func (p *Pipeline) call(ctx context.Context, log *slog.Logger, rec *Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			p.recordLogger(log, rec).ErrorContext(ctx, "process panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", ErrPanic, v)
		}
	}()
	return p.process(ctx, *rec)
}
