package esm

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetentionExpiresHeldRecords: a shard's invocations are throttled (the
// consumer is held back) until its buffered records are older than the stream's retention
// period: Lambda stops retrying them and moves on, silently (no OnFailure message); the records
// after them are processed.
func TestRetentionExpiresHeldRecords(t *testing.T) {
	t.Parallel()
	const retention = time.Hour
	s := newStream(t, 1)
	old := s.putN(t, 3)
	time.Sleep(10 * time.Millisecond) // arrival times have millisecond resolution
	t1 := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&t1)
	var held atomic.Bool
	held.Store(true)
	waiting := make(chan struct{})
	var once sync.Once
	throttle := WithInvokeThrottle(func(string) bool {
		if held.Load() {
			once.Do(func() { close(waiting) })
		}
		return held.Load()
	})
	fq := newFailureQueue(t)
	cfg := baseConfig(s)
	cfg.OnFailureQueueURL = fq.url
	r := newRecorder(t, nil)
	log := &eventLog{}
	opts := append([]Option{WithStopWhenDrained(), WithObserver(log.observe), throttle, WithRetention(retention),
		WithClock(func() time.Time { return *clock.Load() })}, fastOpts...)
	m, err := New(s.kin, fq.sqs, r.lanes, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-waiting: // the lane holds the old records and cannot invoke
	case <-ctx.Done():
		t.Fatal("the lane never tried to invoke")
	}
	expired := t1.Add(retention + 5*time.Millisecond) // the old records are now past retention
	clock.Store(&expired)
	time.Sleep(10 * time.Millisecond)
	fresh := s.putN(t, 2) // younger than retention on the mapping's clock
	held.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := r.delivered()
	for _, p := range old {
		if slices.Contains(got, p.seq) {
			t.Errorf("expired record %s was invoked", p.seq)
		}
	}
	for _, p := range fresh {
		if !slices.Contains(got, p.seq) {
			t.Errorf("record %s after the expired ones was never invoked", p.seq)
		}
	}
	trimmed := 0
	for _, e := range log.all(EventRecordsTrimmed) {
		trimmed += e.Size
	}
	if trimmed != len(old) {
		t.Errorf("records_trimmed events count %d records, want %d", trimmed, len(old))
	}
	fq.receive(t, 0) // silent: no OnFailure message for records the stream trimmed
	if cp := m.Checkpoints()[old[0].shard][0]; cp != fresh[1].seq {
		t.Errorf("checkpoint %s, want %s", cp, fresh[1].seq)
	}
}
