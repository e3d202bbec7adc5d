package esm

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestStartingPosition(t *testing.T) {
	t.Parallel()
	t.Run("TRIM_HORIZON reads from the oldest record", func(t *testing.T) {
		s := newStream(t, 1)
		puts := s.putN(t, 5)
		r := newRecorder(t, nil)
		drain(t, s, nil, r, baseConfig(s))
		if got := r.delivered(); !slices.Equal(got, seqsOf(puts)) {
			t.Fatalf("delivered %v, want %v", got, seqsOf(puts))
		}
	})

	t.Run("AT_TIMESTAMP reads from the first record arriving at or after the time", func(t *testing.T) {
		s := newStream(t, 1)
		s.putN(t, 3)
		// Arrival times have millisecond precision: leave a gap so the cut is unambiguous.
		time.Sleep(50 * time.Millisecond)
		from := time.Now()
		time.Sleep(50 * time.Millisecond)
		later := s.putN(t, 3)
		cfg := baseConfig(s)
		cfg.StartingPosition = AtTimestamp
		cfg.StartingTimestamp = from
		r := newRecorder(t, nil)
		drain(t, s, nil, r, cfg)
		if got := r.delivered(); !slices.Equal(got, seqsOf(later)) {
			t.Fatalf("delivered %v, want only the records after the timestamp %v", got, seqsOf(later))
		}
	})

	t.Run("LATEST skips what is already in the stream", func(t *testing.T) {
		s := newStream(t, 1)
		old := seqsOf(s.putN(t, 3))
		cfg := baseConfig(s)
		cfg.StartingPosition = Latest
		got := make(chan string, 100)
		r := newRecorder(t, func(_ context.Context, inv invocation, _ int) ([]byte, error) {
			for _, q := range inv.seqs() {
				got <- q
			}
			return nil, nil
		})
		m, err := New(s.kin, nil, r.lanes, cfg, fastOpts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		// The mapping takes its LATEST iterator at some point after Run starts: keep writing
		// (bounded) until a new record comes through.
		var fresh []string
		var first string
	writing:
		for i := range 100 {
			fresh = append(fresh, s.put(t, "k", []byte{byte(i)}).seq)
			select {
			case first = <-got:
				break writing
			case <-time.After(200 * time.Millisecond):
			}
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if first == "" {
			t.Fatal("no record written after the mapping started was delivered")
		}
		for _, q := range r.delivered() {
			if slices.Contains(old, q) {
				t.Fatalf("LATEST delivered %s, written before the mapping started", q)
			}
			if !slices.Contains(fresh, q) {
				t.Fatalf("delivered unknown record %s", q)
			}
		}
	})
}
