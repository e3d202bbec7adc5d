package esm

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func batchSizes(r *recorder) []int {
	var sizes []int
	for _, c := range r.invocations() {
		sizes = append(sizes, len(c.event.Records))
	}
	return sizes
}

func TestBatchSize(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	puts := s.putN(t, 25)
	cfg := baseConfig(s)
	cfg.BatchSize = 10
	r := newRecorder(t, nil)
	m, log := drain(t, s, nil, r, cfg)
	if got := batchSizes(r); !slices.Equal(got, []int{10, 10, 5}) {
		t.Fatalf("batch sizes %v, want [10 10 5]", got)
	}
	if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
		t.Fatalf("delivered %v, want each record once in order", got)
	}
	var cps []string
	for _, e := range log.all(EventCheckpoint) {
		cps = append(cps, e.Checkpoint)
	}
	if want := []string{puts[9].seq, puts[19].seq, puts[24].seq}; !slices.Equal(cps, want) {
		t.Fatalf("checkpoints %v, want %v", cps, want)
	}
	if got := m.Checkpoints()[puts[0].shard]; !slices.Equal(got, []string{puts[24].seq}) {
		t.Fatalf("Checkpoints() = %v", got)
	}
}

func TestBatchingWindow(t *testing.T) {
	t.Parallel()
	t.Run("waits within the window to fill the batch", func(t *testing.T) {
		s := newStream(t, 1)
		first := s.putN(t, 3)
		cfg := baseConfig(s)
		cfg.BatchSize = 6
		// The first three records may not be sent before the window ends (5 minutes, beyond
		// the test's bound) unless the batch fills up.
		cfg.BatchingWindow = MaxBatchingWindow
		r := newRecorder(t, nil)
		m, err := New(s.kin, nil, r.lanes, cfg, append(fastOpts, WithStopWhenDrained())...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		second := s.putN(t, 3)
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if got := batchSizes(r); !slices.Equal(got, []int{6}) {
			t.Fatalf("batch sizes %v, want one batch of 6", got)
		}
		if got, want := r.delivered(), append(seqsOf(first), seqsOf(second)...); !slices.Equal(got, want) {
			t.Fatalf("delivered %v, want %v", got, want)
		}
	})

	t.Run("the end of the window sends a partial batch", func(t *testing.T) {
		s := newStream(t, 1)
		puts := s.putN(t, 3)
		cfg := baseConfig(s)
		cfg.BatchingWindow = time.Second
		r := newRecorder(t, nil)
		drain(t, s, nil, r, cfg)
		if got := batchSizes(r); !slices.Equal(got, []int{3}) {
			t.Fatalf("batch sizes %v, want [3]", got)
		}
		if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
			t.Fatalf("delivered %v", got)
		}
	})

	t.Run("a full batch does not wait for the window", func(t *testing.T) {
		s := newStream(t, 1)
		puts := s.putN(t, 8)
		cfg := baseConfig(s)
		cfg.BatchSize = 4
		cfg.BatchingWindow = MaxBatchingWindow // the 1-minute bound of drain fails if it waited
		r := newRecorder(t, nil)
		drain(t, s, nil, r, cfg)
		if got := batchSizes(r); !slices.Equal(got, []int{4, 4}) {
			t.Fatalf("batch sizes %v, want [4 4]", got)
		}
		if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
			t.Fatalf("delivered %v", got)
		}
	})
}

// The 6 MB payload limit with real 1 MB Kinesis records: base64 makes each ~1.33 MB, so four fit
// in a payload and the fifth starts the next batch, although BatchSize would allow all five.
func TestPayloadLimitSixMB(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	var puts []putResult
	for i := range 5 {
		puts = append(puts, s.put(t, "big", bytes.Repeat([]byte{byte('a' + i)}, 1000*1000)))
	}
	r := newRecorder(t, nil)
	cfg := baseConfig(s)
	// Decoding 6 MB under -race on a loaded 2-core machine can take seconds: a timeout here would
	// retry the batch and hide what this test is about.
	cfg.FunctionTimeout = time.Minute
	drain(t, s, nil, r, cfg)
	if got := batchSizes(r); !slices.Equal(got, []int{4, 1}) {
		t.Fatalf("batch sizes %v, want [4 1]", got)
	}
	for _, c := range r.invocations() {
		if len(c.payload) > MaxPayloadBytes {
			t.Fatalf("payload of %d bytes exceeds %d", len(c.payload), MaxPayloadBytes)
		}
	}
	if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
		t.Fatalf("delivered %v", got)
	}
}

// With a small limit, every batch is as large as the limit allows and never larger.
func TestPayloadLimitCutsBatches(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	var puts []putResult
	for i := range 12 {
		puts = append(puts, s.put(t, "k", bytes.Repeat([]byte{'x'}, 100+40*i)))
	}
	cfg := baseConfig(s)
	cfg.MaxPayloadBytes = 4000
	r := newRecorder(t, nil)
	drain(t, s, nil, r, cfg)
	calls := r.invocations()
	if len(calls) < 3 {
		t.Fatalf("%d invocations: the limit did not cut batches", len(calls))
	}
	for i, c := range calls {
		if len(c.payload) > cfg.MaxPayloadBytes {
			t.Fatalf("invocation %d: payload %d bytes > %d", i, len(c.payload), cfg.MaxPayloadBytes)
		}
		if i+1 < len(calls) {
			// Maximal: adding the next batch's first record would have crossed the limit.
			next := calls[i+1].event.Records[0]
			grown := append(slices.Clone(c.event.Records), next)
			c2 := c.event
			c2.Records = grown
			if b := mustJSON(t, c2); len(b) <= cfg.MaxPayloadBytes {
				t.Fatalf("invocation %d was cut early: %d bytes with the next record", i, len(b))
			}
		}
	}
	if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
		t.Fatalf("delivered %v", got)
	}
}

// A record that alone exceeds the limit is never sent: the invocation fails as Lambda's would
// (request too large) and the record ends up on the OnFailure queue.
func TestOversizeRecordIsNeverSent(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	small := s.put(t, "k", []byte("small"))
	big := s.put(t, "k", bytes.Repeat([]byte{'x'}, 3000))
	after := s.put(t, "k", []byte("after"))
	q := newFailureQueue(t)
	cfg := baseConfig(s)
	cfg.MaxPayloadBytes = 2000
	cfg.MaximumRetryAttempts = 1
	cfg.OnFailureQueueURL = q.url
	r := newRecorder(t, nil)
	_, log := drain(t, s, q.sqs, r, cfg)
	if got := r.delivered(); !slices.Equal(got, []string{small.seq, after.seq}) {
		t.Fatalf("delivered %v, want only the records that fit", got)
	}
	errs := log.all(EventFunctionError)
	if len(errs) != 2 || !errors.Is(errs[0].Err, ErrPayloadTooLarge) {
		t.Fatalf("function errors %v, want two ErrPayloadTooLarge", errs)
	}
	msgs := q.receive(t, 1)
	if bi := msgs[0].KinesisBatchInfo; bi.StartSequenceNumber != big.seq || bi.EndSequenceNumber != big.seq {
		t.Fatalf("OnFailure names %s..%s, want the oversize record %s", bi.StartSequenceNumber, bi.EndSequenceNumber, big.seq)
	}
}
