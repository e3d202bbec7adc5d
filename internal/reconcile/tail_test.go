package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// runGivingUp runs the local mapping (TRIM_HORIZON, until drained) over s's stream with the real
// consumer (rec as Process) until every shard is drained. Every invocation holding a record of
// given crashes, so the mapping (MaximumRetryAttempts 1, BatchSize 5) gives those batches up,
// and every on-failure delivery fails (WithDestinationFault: DestinationDeliveryFailures). It
// checks that the failure queue stayed empty and that the mapping's
// destination_delivery_failed events cover exactly the records given, and returns the events.
func (s *stack) runGivingUp(t *testing.T, rec *recorder, given []put) []esm.Event {
	t.Helper()
	crash := map[string]bool{}
	for _, p := range given {
		crash[p.seq] = true
	}
	h := consumer.NewHandler(s.pipeline(rec.process, 3), s.group, nil)
	inv := crashingInvoker{h: h, crash: crash}
	lanes := func(string, int) (esm.Invoker, error) { return inv, nil }
	failureURL := stacktest.Queue(t, "failure", false)
	cfg := esm.DefaultConfig()
	cfg.StreamName, cfg.FunctionName = s.stream, "consumer"
	cfg.StartingPosition = esm.TrimHorizon
	cfg.BatchSize = 5
	cfg.MaximumRetryAttempts = 1
	cfg.ReportBatchItemFailures = true
	cfg.FunctionTimeout = 30 * time.Second
	cfg.PollInterval = esm.MinPollInterval
	cfg.OnFailureQueueURL = failureURL
	var mu sync.Mutex
	var failed []esm.Event
	m, err := esm.New(s.kin, s.sqs, lanes, cfg, esm.WithStopWhenDrained(), esm.WithRetryDelay(10*time.Millisecond),
		esm.WithDestinationFault(func(onfailure.Message) error { return errors.New("AccessDenied") }),
		esm.WithObserver(func(e esm.Event) {
			if e.Type == esm.EventDestinationDeliveryFailed {
				mu.Lock()
				failed = append(failed, e)
				mu.Unlock()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("mapping: %v", err)
	}
	if n := m.DestinationDeliveryFailures(); n < 1 {
		t.Fatalf("DestinationDeliveryFailures %d, want at least 1", n)
	}
	out, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(failureURL), MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Fatalf("%d failure-queue messages, want none (delivery failed)", len(out.Messages))
	}
	mu.Lock()
	defer mu.Unlock()
	covered := 0
	for _, e := range failed {
		covered += e.Size
	}
	if covered != len(given) {
		t.Fatalf("delivery-failed events cover %d records, want the %d given up", covered, len(given))
	}
	return failed
}

// crashingInvoker runs the real consumer handler, except that every invocation holding one of
// crash crashes the runtime before the handler runs (a function error: the mapping retries the
// batch, then gives it up).
type crashingInvoker struct {
	h     *consumer.Handler
	crash map[string]bool
}

func (c crashingInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var ev struct {
		Records []struct {
			Kinesis struct {
				SequenceNumber string `json:"sequenceNumber"`
			} `json:"kinesis"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	for _, r := range ev.Records {
		if c.crash[r.Kinesis.SequenceNumber] {
			return nil, errors.New("Runtime.ExitError")
		}
	}
	return consumerInvoker{c.h}.Invoke(ctx, payload)
}

// givenUpTail makes the loss path real with the local mapping and the real consumer: records A
// are consumed; the last records of the shard, T, crash every invocation, so the mapping
// (MaximumRetryAttempts 1) gives them up; the OnFailure delivery fails
// (DestinationDeliveryFailures), so the failure queue never hears of them; nothing is written
// after them, so the checkpoint mirror stays on A's last record. It returns A, T and the
// recorder counting what the consumer (and, later, the reconciler) processed.
func givenUpTail(t *testing.T, s *stack) (a, tail []put, rec *recorder) {
	t.Helper()
	a = s.putN(10, "A", keyMod(3), nil)
	tail = s.putN(5, "T", keyMod(3), nil)
	rec = newRecorder()
	failed := s.runGivingUp(t, rec, tail) // A in two batches, T in a third: only T crashes
	if len(failed) == 0 || failed[0].FirstSeq != tail[0].seq || failed[len(failed)-1].LastSeq != tail[len(tail)-1].seq {
		t.Fatalf("delivery-failed events %+v, want them to cover %s..%s", failed, tail[0].seq, tail[len(tail)-1].seq)
	}
	checkOnce(t, "mapping", rec.counts(), idsOf(a)) // T processed by nobody
	if st := s.state(a[0].shard); st.Checkpoint != a[len(a)-1].seq {
		t.Fatalf("checkpoint %s, want A's last %s", st.Checkpoint, a[len(a)-1].seq)
	}
	return a, tail, rec
}

// TestTailTheMappingGaveUpIsReplayed: the records the mapping gave up at the end of a shard,
// with the on-failure delivery failing and nothing written after them, are past the checkpoint
// mirror for good. Once older than the mapping's maximum record age plus the settle window the
// scheduled pass replays them, exactly once, counted TailReplayed, and moves the watermark past
// them. On the old code (the pass stopped at the checkpoint) they were never replayed.
func TestTailTheMappingGaveUpIsReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		maxAge time.Duration // the mapping's MaximumRecordAge (0: unlimited)
		ahead  time.Duration // the pass's clock
	}{
		{"maximum record age 10m, an hour later", 10 * time.Minute, time.Hour},
		{"unlimited age: past the 12h cap", 0, 13 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, 1)
			a, tail, rec := givenUpTail(t, s)
			ctx := context.Background()
			r := s.reconciler(s.pipeline(rec.process, 3), Config{MaxRecordAge: tt.maxAge, SettleAfter: 30 * time.Minute},
				WithClock(func() time.Time { return time.Now().Add(tt.ahead) }))
			rep, err := r.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkOnce(t, "mapping and reconciler together", rec.counts(), append(idsOf(a), idsOf(tail)...))
			if rep.GapsReplayed != len(tail) || rep.TailReplayed != len(tail) {
				t.Errorf("GapsReplayed %d TailReplayed %d, want both %d", rep.GapsReplayed, rep.TailReplayed, len(tail))
			}
			last := tail[len(tail)-1].seq
			if st := s.state(tail[0].shard); st.Watermark != last || st.Checkpoint != a[len(a)-1].seq {
				t.Errorf("watermark %s checkpoint %s, want the watermark on T's last %s past the checkpoint %s", st.Watermark, st.Checkpoint, last, a[len(a)-1].seq)
			}
			// A second pass replays nothing.
			rep, err = r.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.GapsDetected != 0 || rep.TailReplayed != 0 {
				t.Errorf("second pass: gaps %d tail %d, want none", rep.GapsDetected, rep.TailReplayed)
			}
			checkOnce(t, "after a second pass", rec.counts(), append(idsOf(a), idsOf(tail)...))
		})
	}
}

// TestYoungTailIsLeftToTheMapping: records past the checkpoint younger than the mapping's
// maximum record age plus the settle window may still be in the mapping's hands (retried, or
// not read yet): the pass leaves them alone, and reports no lag for them. Only once they are
// older does a pass replay them.
func TestYoungTailIsLeftToTheMapping(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	a, tail, rec := givenUpTail(t, s)
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setClock := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	start := now
	r := s.reconciler(s.pipeline(rec.process, 3), Config{MaxRecordAge: 10 * time.Minute, SettleAfter: 30 * time.Minute}, WithClock(clock))
	for _, ahead := range []time.Duration{0, 35 * time.Minute} { // settled, but within the age + settle
		setClock(start.Add(ahead))
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GapsDetected != 0 || rep.TailReplayed != 0 {
			t.Errorf("%s later: gaps %d tail %d, want none (the mapping may still be on them)", ahead, rep.GapsDetected, rep.TailReplayed)
		}
		checkOnce(t, "young tail", rec.counts(), idsOf(a))
		if st := s.state(a[0].shard); st.Watermark != "" && st.Watermark != a[len(a)-1].seq {
			t.Fatalf("watermark %s moved past the checkpoint %s over young records", st.Watermark, a[len(a)-1].seq)
		}
	}
	// An unlimited age is capped at TailAgeCap, not taken for "never": an hour later it still waits.
	r0 := s.reconciler(s.pipeline(rec.process, 3), Config{SettleAfter: 30 * time.Minute}, WithClock(func() time.Time { return start.Add(time.Hour) }))
	if rep, err := r0.Run(ctx); err != nil || rep.TailReplayed != 0 {
		t.Fatalf("unlimited age an hour later: tail %d, %v; want 0", rep.TailReplayed, err)
	}
	setClock(start.Add(41 * time.Minute)) // past 10m + 30m
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TailReplayed != len(tail) {
		t.Errorf("TailReplayed %d once due, want %d", rep.TailReplayed, len(tail))
	}
	checkOnce(t, "due tail", rec.counts(), append(idsOf(a), idsOf(tail)...))
}

// TestTailAfter: the age past which the tail is verified.
func TestTailAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ age, settle, want time.Duration }{
		{10 * time.Minute, 30 * time.Minute, 40 * time.Minute},
		{-1, 30 * time.Minute, TailAgeCap + 30*time.Minute},
		{0, 30 * time.Minute, TailAgeCap + 30*time.Minute},
		{7 * 24 * time.Hour, 30 * time.Minute, TailAgeCap + 30*time.Minute},
	} {
		if got := TailAfter(tc.age, tc.settle); got != tc.want {
			t.Errorf("TailAfter(%s, %s) = %s, want %s", tc.age, tc.settle, got, tc.want)
		}
	}
}

// TestTailALatestRestartSkippedOnAQuietStream: the mapping is replaced at LATEST and the stream
// then stays quiet: the records written while no mapping ran lie past the checkpoint with nothing
// after them to move it. Once due, the pass replays them exactly once (on the old code never:
// TestReconcilerReplaysWhatALatestRestartSkipped needed a later record to move the checkpoint).
func TestTailALatestRestartSkippedOnAQuietStream(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	rec, p, lanes, cfg := s.consumerMapping(esm.MinPollInterval)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	a := s.putN(10, "A", keyMod(3), nil)
	cfg.StartingPosition = esm.TrimHorizon
	m1, err := esm.New(s.kin, nil, lanes, cfg, esm.WithStopWhenDrained())
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Run(ctx); err != nil {
		t.Fatalf("first mapping: %v", err)
	}
	b := s.putN(10, "B", keyMod(3), nil) // while no mapping runs

	kin := &iteratorSignal{Client: s.kin, positioned: make(chan struct{})}
	cfg.StartingPosition = esm.Latest
	m2, err := esm.New(kin, nil, lanes, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m2.Run(runCtx) }()
	select {
	case <-kin.positioned:
	case err := <-done:
		t.Fatalf("second mapping ended before positioning: %v", err)
	}
	stop() // nothing more is written: the stream stays quiet
	<-done
	checkOnce(t, "mappings", rec.counts(), idsOf(a))
	if st := s.state(a[0].shard); st.Checkpoint != a[len(a)-1].seq {
		t.Fatalf("checkpoint %s, want A's last %s", st.Checkpoint, a[len(a)-1].seq)
	}

	r := s.reconciler(p, Config{MaxRecordAge: 10 * time.Minute}) // an hour later: past 10m + 30m
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TailReplayed != len(b) || rep.GapsReplayed != len(b) {
		t.Errorf("TailReplayed %d GapsReplayed %d, want both %d (the records the restart skipped)", rep.TailReplayed, rep.GapsReplayed, len(b))
	}
	checkOnce(t, "mappings and reconciler together", rec.counts(), append(idsOf(a), idsOf(b)...))
	if st := s.state(a[0].shard); st.Watermark != b[len(b)-1].seq {
		t.Errorf("watermark %s, want B's last %s", st.Watermark, b[len(b)-1].seq)
	}
}
