package esm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/lanes"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Errors an Event's Err can wrap.
var (
	// ErrFunction wraps every failed invocation: the invoker's error or a timeout.
	ErrFunction = errors.New("esm: function error")
	// ErrFunctionTimeout marks an invocation that ran past FunctionTimeout (also ErrFunction).
	ErrFunctionTimeout = errors.New("esm: function timed out")
	// ErrPayloadTooLarge marks a single record whose event exceeds MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("esm: invocation payload too large")
)

// LaneOf maps a partition key to one of n lanes: the mapping's rule, lanes.Of (one definition,
// shared with the reconciler). Records of one key always share a lane, so per-key order is kept
// with ParallelizationFactor > 1.
func LaneOf(key string, n int) int { return lanes.Of(key, n) }

// lane is one of a shard's ParallelizationFactor concurrent batch streams. It receives the
// shard's records of the partition keys hashed to it, in sequence order, invokes them in
// batches one at a time and keeps its own checkpoint.
type lane struct {
	s   *shardRun
	idx int
	inv Invoker

	mu     sync.Mutex
	queue  []*record // read, not yet done; the head is the batch in progress
	busy   bool      // a batch is being processed
	closed bool      // the reader is done: no more records will come
	wake   chan struct{}
}

func newLane(s *shardRun, idx int) *lane {
	return &lane{s: s, idx: idx, wake: make(chan struct{}, 1)}
}

func (l *lane) push(recs ...*record) {
	l.mu.Lock()
	l.queue = append(l.queue, recs...)
	l.mu.Unlock()
	l.signal()
}

func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.signal()
}

func (l *lane) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue) == 0 && !l.busy
}

func (l *lane) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// run processes batches until the reader is done and the queue is empty, or ctx ends.
func (l *lane) run(ctx context.Context) {
	windowStart := time.Now()
	for {
		batch := l.next(ctx, windowStart)
		if batch == nil {
			return
		}
		l.process(ctx, batch)
		l.mu.Lock()
		if ctx.Err() == nil {
			l.queue = l.queue[len(batch):]
			if len(l.queue) == 0 {
				l.queue = nil // let the backing array go
			}
		}
		l.busy = false
		l.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		// "the next batching window begins as soon as the previous function invocation
		// completes" (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventsourcemapping.html#invocation-eventsourcemapping-batching)
		windowStart = time.Now()
	}
}

// next waits for the next batch: it is sent when it is full (BatchSize records, or the next
// record would push the payload over the limit), when the batching window has passed, or when
// the shard is read to its end (no record can still join). It returns nil when the lane is done.
func (l *lane) next(ctx context.Context, windowStart time.Time) []*record {
	cfg := l.s.m.cfg
	for {
		l.mu.Lock()
		if len(l.queue) == 0 && l.closed {
			l.mu.Unlock()
			return nil
		}
		wait := time.Duration(-1)
		if len(l.queue) > 0 {
			n, full := cut(l.queue, cfg.BatchSize, cfg.MaxPayloadBytes)
			remaining := cfg.BatchingWindow - time.Since(windowStart)
			if full || remaining <= 0 || l.closed {
				l.busy = true
				batch := slices.Clone(l.queue[:n])
				l.mu.Unlock()
				return batch
			}
			wait = remaining
		}
		l.mu.Unlock()
		var timer *time.Timer
		var fired <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			fired = timer.C
		}
		select {
		case <-ctx.Done():
		case <-l.wake:
		case <-fired:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// unit is a batch or a part of one (after a partial failure or a bisection) with the history
// that decides its fate.
type unit struct {
	recs    []*record
	retries int         // retries consumed by this batch lineage
	invokes int         // invocations of this lineage (approximateInvokeCount)
	last    *lastInvoke // the latest invocation, for the OnFailure message
}

// process takes batch to done: every record succeeds, expires or is given up, in order. The
// rules (https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html,
// https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html):
//   - records older than MaximumRecordAge are not sent: they go to OnFailure as
//     RecordAgeExceeded, checked before every invocation, retries included;
//   - a partial batch response checkpoints before the lowest failed record and retries every
//     record from it on (one retry);
//   - a function error with BisectBatchOnFunctionError splits the batch in two halves, each
//     processed in order; "Splitting batches doesn't consume the retry quota": the halves keep
//     the retry count of the batch, so retries are spent once a batch cannot be split further;
//   - any other failure retries the same records (one retry);
//   - after MaximumRetryAttempts retries the records go to OnFailure as RetryAttemptsExhausted
//     and the lane moves on.
func (l *lane) process(ctx context.Context, batch []*record) {
	m := l.s.m
	end := batch[len(batch)-1].seq
	batch = l.unfiltered(batch)
	work := []unit{{recs: batch}}
	var given []*givenUp // what the batch gave up, one consolidated message per condition
	// Once the batch has given records up, the lane's checkpoint is held until their message is
	// sent: a checkpoint past a given-up record says its metadata is where it goes.
	var held string
	checkpoint := func(seq string) {
		if len(given) > 0 {
			held = seq
			return
		}
		l.checkpoint(seq)
	}
	defer func() {
		if ctx.Err() != nil || !l.flush(ctx, given) {
			return
		}
		if held != "" {
			l.checkpoint(held)
		}
	}()
	giveUp := func(recs []*record, condition string, u unit) {
		i := slices.IndexFunc(given, func(g *givenUp) bool { return g.condition == condition })
		if i < 0 {
			given = append(given, &givenUp{condition: condition})
			i = len(given) - 1
		}
		given[i].add(recs, u)
		m.log.WarnContext(ctx, "esm: records given up", "shard_id", l.s.id, "lane", l.idx, "condition", condition,
			"sequence_number", recs[0].seq, "end_sequence_number", recs[len(recs)-1].seq, "records", len(recs))
		checkpoint(recs[len(recs)-1].seq)
	}
	for len(work) > 0 {
		if ctx.Err() != nil {
			return
		}
		u := work[0]
		work = work[1:]

		if !l.beforeInvoke(ctx, &u, giveUp, checkpoint) {
			return
		}
		if len(u.recs) == 0 {
			continue
		}

		res := l.invoke(ctx, u)
		if res.aborted {
			return
		}
		u.invokes++
		u.last = &res.last
		first, last := u.recs[0].seq, u.recs[len(u.recs)-1].seq
		switch {
		case res.err == nil && res.failedIdx < 0:
			checkpoint(last)

		case res.err == nil:
			i := res.failedIdx
			m.emit(Event{Type: EventPartialFailure, ShardID: l.s.id, Lane: l.idx, FirstSeq: first, LastSeq: last,
				Size: len(u.recs), Attempt: u.retries, RequestID: res.last.requestID, FailedSeq: u.recs[i].seq})
			if i > 0 {
				checkpoint(u.recs[i-1].seq)
			}
			rest := u
			rest.recs = u.recs[i:]
			if l.exhausted(rest.retries) {
				giveUp(rest.recs, onfailure.ConditionRetryAttemptsExhausted, rest)
				continue
			}
			rest.retries++
			if ctxtime.Sleep(ctx, m.retryDelay) != nil {
				return
			}
			work = append([]unit{rest}, work...)

		default:
			m.emit(Event{Type: EventFunctionError, ShardID: l.s.id, Lane: l.idx, FirstSeq: first, LastSeq: last,
				Size: len(u.recs), Attempt: u.retries, RequestID: res.last.requestID, Err: res.err})
			m.log.WarnContext(ctx, "esm: invocation failed", "shard_id", l.s.id, "lane", l.idx,
				"sequence_number", first, "request_id", res.last.requestID, "attempt", u.retries, "error", res.err)
			if res.functionError && m.cfg.BisectBatchOnFunctionError && len(u.recs) > 1 {
				h := len(u.recs) / 2
				m.emit(Event{Type: EventBisected, ShardID: l.s.id, Lane: l.idx, FirstSeq: first, LastSeq: last,
					Size: len(u.recs), Attempt: u.retries, FailedSeq: u.recs[h].seq})
				left, right := u, u
				left.recs, right.recs = u.recs[:h], u.recs[h:]
				work = append([]unit{left, right}, work...)
				continue
			}
			if l.exhausted(u.retries) {
				giveUp(u.recs, onfailure.ConditionRetryAttemptsExhausted, u)
				continue
			}
			u.retries++
			if ctxtime.Sleep(ctx, m.retryDelay) != nil {
				return
			}
			work = append([]unit{u}, work...)
		}
	}
	if len(batch) == 0 || batch[len(batch)-1].seq != end {
		checkpoint(end) // the batch ends with records FilterCriteria dropped: they are done too
	}
}

// beforeInvoke drops the head records of u that have expired from the stream or exceeded
// MaximumRecordAge, and waits while the shard's invocations are throttled (checking again
// after each wait: a throttled batch is retried until its records expire). It returns false
// when ctx ended.
func (l *lane) beforeInvoke(ctx context.Context, u *unit, giveUp func([]*record, string, unit), checkpoint func(string)) bool {
	m := l.s.m
	for {
		if n := l.trimmed(u.recs); n > 0 {
			l.drop(ctx, u.recs[:n], checkpoint)
			u.recs = u.recs[n:]
		}
		if n := l.expired(u.recs); n > 0 {
			giveUp(u.recs[:n], onfailure.ConditionRecordAgeExceeded, *u)
			u.recs = u.recs[n:]
		}
		if len(u.recs) == 0 || m.throttled == nil || !m.throttled(l.s.id) {
			return true
		}
		if ctxtime.Sleep(ctx, m.cfg.PollInterval) != nil {
			return false
		}
	}
}

// trimmed returns how many records at the head of recs are older than the stream's retention
// period. Lambda "retries until the records expire" (kinesis-on-failure-destination, and
// services-kinesis-parameters: with MaximumRecordAgeInSeconds -1 "Kinesis Data Streams data
// retention settings still apply"), then discards them and continues with the batches after
// them. AWS documents no OnFailure invocation record for records the stream itself trimmed;
// chosen: none is sent, so the loss is silent here, the worst case a consumer must detect on
// its own (gapless: the reconciler's LostToRetention).
func (l *lane) trimmed(recs []*record) int {
	m := l.s.m
	var horizon time.Time
	switch {
	case m.horizon != nil:
		horizon = m.horizon()
	case m.retention > 0:
		horizon = m.now().Add(-m.retention)
	default:
		return 0
	}
	n := 0
	for n < len(recs) && recs[n].arrival.Before(horizon) {
		n++
	}
	return n
}

// drop discards records that expired from the stream and moves the checkpoint past them
// (through checkpoint, which holds it while a given-up message of the batch is unsent).
func (l *lane) drop(ctx context.Context, recs []*record, checkpoint func(string)) {
	m := l.s.m
	m.emit(Event{Type: EventRecordsTrimmed, ShardID: l.s.id, Lane: l.idx, FirstSeq: recs[0].seq, LastSeq: recs[len(recs)-1].seq, Size: len(recs)})
	m.log.WarnContext(ctx, "esm: records expired from the stream before they were processed", "shard_id", l.s.id, "lane", l.idx,
		"sequence_number", recs[0].seq, "end_sequence_number", recs[len(recs)-1].seq, "records", len(recs))
	checkpoint(recs[len(recs)-1].seq)
}

func (l *lane) exhausted(retries int) bool {
	limit := l.s.m.cfg.MaximumRetryAttempts
	return limit >= 0 && retries >= limit
}

// expired returns how many records at the head of recs are older than MaximumRecordAge.
// Arrival times grow with sequence numbers within a shard, so the old records are a prefix.
func (l *lane) expired(recs []*record) int {
	m := l.s.m
	if m.cfg.MaximumRecordAge <= 0 {
		return 0
	}
	now := m.now()
	n := 0
	for n < len(recs) && now.Sub(recs[n].arrival) > m.cfg.MaximumRecordAge {
		n++
	}
	return n
}

// flush sends the batch's consolidated OnFailure messages, in sequence order, once the batch
// is done (every record succeeded, expired or was given up). A message that cannot be
// delivered is counted (DestinationDeliveryFailures) and its records stay discarded, as on AWS.
// It reports false when ctx ended first (the mapping is stopping): a message is left unsent.
func (l *lane) flush(ctx context.Context, given []*givenUp) bool {
	m := l.s.m
	slices.SortFunc(given, func(a, b *givenUp) int { return seqnum.Compare(a.first.seq, b.first.seq) })
	for _, g := range given {
		msg := m.failureMessage(l.s.id, g)
		err := m.deliver(ctx, msg)
		if err != nil && !errors.Is(err, ErrDestinationDelivery) {
			return false // ctx ended: the mapping is stopping
		}
		typ := EventRetriesExhausted
		if g.condition == onfailure.ConditionRecordAgeExceeded {
			typ = EventRecordsExpired
		}
		ev := Event{Type: typ, ShardID: l.s.id, Lane: l.idx, FirstSeq: g.first.seq, LastSeq: g.last.seq,
			Size: g.size, Attempt: g.retries, RequestID: msg.RequestContext.RequestID, Failure: msg}
		m.emit(ev)
		if err != nil {
			ev.Type, ev.Err = EventDestinationDeliveryFailed, err
			m.emit(ev)
			m.log.ErrorContext(ctx, "esm: OnFailure message not delivered; its records are discarded", "shard_id", l.s.id,
				"lane", l.idx, "sequence_number", g.first.seq, "end_sequence_number", g.last.seq, "records", g.size, "error", err)
		}
	}
	return true
}

func (l *lane) checkpoint(seq string) {
	l.s.m.setCheckpoint(l.s.id, l.idx, seq)
	l.s.m.emit(Event{Type: EventCheckpoint, ShardID: l.s.id, Lane: l.idx, Checkpoint: seq})
}

type invokeResult struct {
	failedIdx     int   // lowest failed record after a partial response; -1 on success
	err           error // complete failure
	functionError bool  // err is a function error (eligible for bisection)
	aborted       bool  // the mapping is stopping
	last          lastInvoke
}

// invoke runs one invocation of u with the function timeout as the invoker's deadline.
func (l *lane) invoke(ctx context.Context, u unit) invokeResult {
	m := l.s.m
	p := payload(u.recs)
	reqID := newRequestID()
	m.emit(Event{Type: EventBatchInvoked, ShardID: l.s.id, Lane: l.idx, FirstSeq: u.recs[0].seq,
		LastSeq: u.recs[len(u.recs)-1].seq, Size: len(u.recs), Attempt: u.retries, RequestID: reqID})
	if len(p) > m.cfg.MaxPayloadBytes {
		// Lambda refuses the request (413 RequestEntityTooLargeException): not a function error.
		return invokeResult{err: fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(p), m.cfg.MaxPayloadBytes),
			last: lastInvoke{requestID: reqID, statusCode: 413}}
	}
	ictx, cancel := context.WithTimeout(ctx, m.cfg.FunctionTimeout)
	resp, err := l.inv.Invoke(ictx, p)
	timedOut := errors.Is(ictx.Err(), context.DeadlineExceeded)
	cancel()
	if ctx.Err() != nil {
		return invokeResult{aborted: true}
	}
	res := invokeResult{failedIdx: -1, last: lastInvoke{requestID: reqID, statusCode: 200}}
	switch {
	case timedOut:
		res.err = fmt.Errorf("%w: %w: Task timed out after %.2f seconds", ErrFunction, ErrFunctionTimeout, m.cfg.FunctionTimeout.Seconds())
		if err != nil {
			res.err = fmt.Errorf("%w (%w)", res.err, err)
		}
		res.functionError, res.last.functionError = true, true
	case err != nil:
		res.err = fmt.Errorf("%w: %w", ErrFunction, err)
		res.functionError, res.last.functionError = true, true
	case m.cfg.ReportBatchItemFailures:
		// Without ReportBatchItemFailures Lambda ignores the response body.
		res.failedIdx, res.err = parseResponse(resp, u.recs)
	}
	return res
}
