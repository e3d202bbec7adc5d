package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// BatchFunc is the batch form of ProcessFunc: the user's business logic for a group of records
// (a "wave"), returning one outcome per record in the same order (nil: done; an error fails that
// record as a ProcessFunc error would). A wave holds at most one record per partition key, so
// the records of one call may be sent in any order or all at once; the next record of a key is
// handed over only in a later call, after its predecessor succeeded. A slice of another length
// than recs fails every record of the wave (ErrSinkOutcomes); so does a panic (ErrPanic).
type BatchFunc func(ctx context.Context, recs []Record) []error

// ErrSinkOutcomes is the failure of every record of a wave whose BatchFunc returned a number of
// outcomes other than the number of records it was given.
var ErrSinkOutcomes = errors.New("pipeline: batch sink returned the wrong number of outcomes")

type batchSink struct {
	f     BatchFunc
	chunk int
}

// WithBatchSink runs records through f in waves instead of through the ProcessFunc, one call per
// wave (see BatchFunc). chunk is the sink's natural request size (10 for SQS SendMessageBatch):
// when more than chunk records are ready, a wave takes the largest multiple of chunk of them,
// oldest first, and the rest wait for the next wave, so the sink's requests are full. chunk <= 1
// hands over every ready record. Everything else is as for Process: per-key order (a failure stops
// its key), attempts and parking, business-key claims (made before the wave, per record), the
// deadline (the call gets the Process context; a call still running at the wait limit is
// abandoned and each of its records is a failed attempt, ErrAbandoned) and panics. A record with
// a failed attempt behind it is sent in a call of its own, beside the wave, so a record that
// hangs or panics its call every time is parked alone instead of with its wave (batchRun.retried).
func WithBatchSink(f BatchFunc, chunk int) Option {
	return func(p *Pipeline) {
		if f != nil {
			p.batch = &batchSink{f: f, chunk: max(chunk, 1)}
		}
	}
}

// waves drives the lanes through the batch sink: each wave takes at most one record from each
// lane (its head), calls the sink once, and moves a lane on only when its head is done.
func (r *batchRun) waves(ctx, procCtx context.Context, lanes [][]int) {
	pos := make([]int, len(lanes))            // next record of each lane not yet resolved
	head := make([]int, len(lanes))           // record waiting for the sink (-1: none)
	blocked := make([]bool, len(lanes))       // an earlier record of the lane failed
	behind := make([]recordid.ID, len(lanes)) // hold-key: the head the lane's key is held behind
	for k := range head {
		head[k] = -1
	}
	for {
		// Resolve what needs no sink call (key blocked, deadline, dead, decode error, claims) and
		// find each lane's next record for the sink. Claims are I/O: lanes run concurrently then.
		var gone atomic.Bool
		step := func(k int) {
			if head[k] < 0 && !r.advanceLane(ctx, procCtx, lanes[k], &pos[k], &blocked[k], &behind[k], &head[k]) {
				gone.Store(true)
			}
		}
		if r.p.keyPath != nil {
			r.each(len(lanes), step)
		} else {
			for k := range lanes {
				step(k)
			}
		}
		if gone.Load() {
			return // abandoned
		}
		var ready []int // lanes with a head
		for k := range lanes {
			if head[k] >= 0 {
				ready = append(ready, k)
			}
		}
		if len(ready) == 0 {
			return
		}
		if r.deadlineNear(ctx) {
			for _, k := range ready { // prepared but not sent: not attempted
				if !r.hand(head[k], outcome{status: statusFailed, err: ErrDeadline, why: whyDeadline}) {
					return
				}
				head[k], pos[k] = -1, pos[k]+1
			}
			continue // the lanes' remaining records fail with ErrDeadline in advanceLane
		}
		slices.SortFunc(ready, func(a, b int) int { return head[a] - head[b] }) // oldest first
		// A record with a failed attempt behind it goes alone: its wave may have failed as a whole
		// because of another record (a wave abandoned at the deadline, a panic), and a record that
		// takes its wave down every time must then take down only itself (see retried).
		var shared, alone []int
		for _, k := range ready {
			if r.retried(head[k]) {
				alone = append(alone, k)
			} else {
				shared = append(shared, k)
			}
		}
		if c := r.p.batch.chunk; len(shared) > c {
			shared = shared[:len(shared)/c*c]
		}
		calls := make([][]int, 0, len(alone)+1)
		if len(shared) > 0 {
			calls = append(calls, shared)
		}
		for _, k := range alone {
			calls = append(calls, []int{k})
		}
		var gave atomic.Bool // Run abandoned the batch during a call
		r.each(len(calls), func(c int) {
			if !r.sendWave(ctx, procCtx, calls[c], head) {
				gave.Store(true)
			}
		})
		if gave.Load() {
			return
		}
		sent := make([]int, 0, len(ready))
		for _, k := range slices.Concat(calls...) {
			sent = append(sent, head[k])
			blocked[k] = r.outcomes[head[k]].status == statusFailed
			behind[k] = r.nextBehind(&r.outcomes[head[k]], behind[k]) // parked: it holds its key
			head[k], pos[k] = -1, pos[k]+1
		}
		more := false // records left for the sink in a later round (a blocked lane's fail unsent)
		for k := range lanes {
			more = more || (pos[k] < len(lanes[k]) && !blocked[k])
		}
		r.saveProgress(ctx, sent, more) // progress.go
	}
}

// retried reports whether record i has a failed attempt behind it (recorded failures, or deaths
// of invocations that ran it alone): such a record is sent in a call of its own.
//
// Why: an outcome of a wave call may not be the record's own. A call still running at the wait
// limit is abandoned and every record of it counts a failed attempt
// (ErrAbandoned); a panic fails every record of it (ErrPanic). A record that does this on every
// attempt (a hang or panic killer) would charge the records sharing its wave an attempt each time
// and take them to MaxRecordAttempts and the parked queue with it. The ledger counts attempts,
// not their causes, so the rule is on the count: a record shares a wave only on its first
// attempt. An innocent record is then charged for someone else's fault at most once (its first
// attempt), and the killer, alone from its second attempt on, uses up its own attempts and is
// parked alone. Per-key order is unchanged: a lane still has at most one record in the sink, and
// the calls of one round (the shared wave and the lone records) run concurrently, so a lone
// record that hangs does not hold back the others' outcomes (the next round waits for it: the
// records behind it are then not started, failed but not attempted). The price is one sink
// request per retried record.
func (r *batchRun) retried(i int) bool {
	return r.plan.attempts(r.view, i, r.b.Records[i].ID) > 0
}

// advanceLane resolves lane records from *pos on until one needs the sink (stored in *head, not
// yet begun) or the lane ends. With hold-key, a record of a held key (or behind a record of the
// lane parked earlier, *behind) is parked behind the head without going to the sink, as in
// Process mode (lane). False when Run has abandoned the batch.
func (r *batchRun) advanceLane(ctx, procCtx context.Context, lane []int, pos *int, blocked *bool, behind *recordid.ID, head *int) bool {
	for ; *pos < len(lane); *pos++ {
		i := lane[*pos]
		rec := &r.b.Records[i]
		var o outcome
		ran := false
		switch {
		case *blocked:
			o.status, o.err = statusFailed, ErrKeyBlocked
		case r.isHeld(i, *behind):
			if !r.begin(i) {
				return false
			}
			r.parkHeld(ctx, rec, i, *behind, &o)
			ran = true
		case r.plan.kinds[i] == planDead:
			if !r.begin(i) {
				return false
			}
			r.parkDead(ctx, rec, i, &o)
			ran = true
		case r.deadlineNear(ctx):
			o.status, o.err, o.why = statusFailed, ErrDeadline, whyDeadline
		default:
			send, ok := r.prepare(ctx, procCtx, rec, i, &o)
			if !ok {
				return false
			}
			if send {
				*head = i
				return true
			}
			ran = true
		}
		if !r.hand(i, o) {
			return false
		}
		if ran {
			*blocked = o.status == statusFailed
			*behind = r.nextBehind(&o, *behind)
		}
	}
	return true
}

// prepare does what Process mode does before calling Process: a record that failed to decode is
// a failed attempt; the business key is claimed. send reports that the record goes to the sink;
// otherwise o is its outcome. ok is false when Run has abandoned the batch.
func (r *batchRun) prepare(ctx, procCtx context.Context, rec *Record, i int, o *outcome) (send, ok bool) {
	p := r.p
	err := rec.DecodeErr
	if err == nil && p.keyPath != nil {
		if key, found := businessKey(rec.Data, p.keyPath); found {
			dup, cerr := p.claimer.Claim(procCtx, r.b.Shard.Group, key, rec.ID)
			switch {
			case errors.Is(cerr, ErrRecordFault):
				err = fmt.Errorf("claim business key: %w", cerr) // an attempt, as in Process mode
			case cerr != nil:
				r.p.recordLogger(r.log, rec).ErrorContext(ctx, "business-key claim failed: record left failed", "error", cerr)
				o.status, o.err = statusFailed, fmt.Errorf("claim business key: %w", cerr)
				return false, true
			case dup:
				r.p.recordLogger(r.log, rec).InfoContext(ctx, "business-key duplicate skipped", "dedupe_key", p.cfg.DedupeKey)
				o.status = statusKeyDup
				return false, true
			}
		}
	}
	if err == nil {
		return true, true
	}
	if !r.begin(i) {
		return false, false
	}
	o.attempted, o.err = true, err
	o.attempts = r.plan.attempts(r.view, i, rec.ID) + 1
	r.finishFailed(ctx, rec, o)
	return false, true
}

// sendWave calls the sink once for the heads of lanes ks and hands each record its outcome.
// False when Run has abandoned the batch (the outcomes are dropped; Run counted the attempts).
func (r *batchRun) sendWave(ctx, procCtx context.Context, ks []int, head []int) bool {
	idx := make([]int, len(ks))
	recs := make([]Record, len(ks))
	for j, k := range ks {
		idx[j] = head[k]
		recs[j] = r.b.Records[head[k]]
	}
	r.mu.Lock()
	if r.abandoned {
		r.mu.Unlock()
		return false
	}
	for _, i := range idx {
		r.running[i] = true
	}
	r.mu.Unlock()

	errs := r.p.callBatch(procCtx, r.log, recs)
	outs := make([]outcome, len(idx))
	var failed []int
	for j, err := range errs {
		if err == nil {
			outs[j].status = statusProcessed
			continue
		}
		i := idx[j]
		outs[j] = outcome{attempted: true, err: err, attempts: r.plan.attempts(r.view, i, r.b.Records[i].ID) + 1}
		failed = append(failed, j)
	}
	// Failed attempts: logged, parked at the maximum (an SQS call each, so concurrently).
	r.each(len(failed), func(f int) {
		j := failed[f]
		r.finishFailed(ctx, &r.b.Records[idx[j]], &outs[j])
	})
	for j, i := range idx {
		if !r.hand(i, outs[j]) {
			return false
		}
	}
	return true
}

// callBatch calls the sink, turning a panic or a wrong number of outcomes into the failure of
// every record of the wave.
func (p *Pipeline) callBatch(ctx context.Context, log *slog.Logger, recs []Record) (errs []error) {
	all := func(err error) []error {
		out := make([]error, len(recs))
		for j := range out {
			out[j] = err
		}
		return out
	}
	defer func() {
		if v := recover(); v != nil {
			log.ErrorContext(ctx, "batch sink panicked: every record of the wave failed",
				"records", len(recs), "sequence_number", recs[0].ID.Seq, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			errs = all(fmt.Errorf("%w: %v", ErrPanic, v))
		}
	}()
	errs = p.batch.f(ctx, slices.Clip(recs))
	if len(errs) != len(recs) {
		err := fmt.Errorf("%w: %d outcomes for %d records", ErrSinkOutcomes, len(errs), len(recs))
		log.ErrorContext(ctx, "batch sink returned the wrong number of outcomes: every record of the wave failed",
			"records", len(recs), "outcomes", len(errs), "sequence_number", recs[0].ID.Seq)
		return all(err)
	}
	return errs
}

// each runs f(0..n-1) with at most MaxConcurrency at once.
func (r *batchRun) each(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	sem := make(chan struct{}, r.p.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	for k := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(k)
		})
	}
	wg.Wait()
}

// Batched reports whether p runs records through a batch sink (WithBatchSink).
func (p *Pipeline) Batched() bool { return p.batch != nil }
