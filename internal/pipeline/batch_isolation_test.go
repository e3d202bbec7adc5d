package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// TestBatchSinkKillerDoesNotParkInnocents: a record that makes its whole wave fail on every
// attempt — a sink that hangs on it past the deadline margin (the wave is abandoned, every record
// of it a failed attempt) or panics on it (ErrPanic for every record of the wave) — must be parked
// alone: the innocent records that shared its wave are processed, none parked, nothing lost, and
// per-key order holds. Before the fix every record of the killer's wave was charged an attempt on
// every run and parked with it after MaxRecordAttempts.
func TestBatchSinkKillerDoesNotParkInnocents(t *testing.T) {
	const killer = 2 // key k2 of four; first wave 1-4
	key4 := func(i int) string { return fmt.Sprint("k", i%4) }
	isKiller := func(recs []pipeline.Record) bool {
		return slices.ContainsFunc(recs, func(r pipeline.Record) bool { return r.ID.Seq == seq(killer) })
	}
	tests := map[string]struct {
		chunk  int
		hang   bool // else panic
		margin time.Duration
	}{
		"hang, chunk 1":   {chunk: 1, hang: true, margin: 400 * time.Millisecond},
		"hang, chunk 10":  {chunk: 10, hang: true, margin: 400 * time.Millisecond},
		"panic, chunk 1":  {chunk: 1},
		"panic, chunk 10": {chunk: 10},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv()
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			s := &sink{before: func(recs []pipeline.Record) {
				if !isKiller(recs) {
					return
				}
				if tc.hang {
					<-release // ignores its context, as a stuck call does
					return
				}
				panic("sink bug on the killer")
			}}
			c := cfg()
			c.DeadlineMargin = tc.margin
			p := e.batchPipeline(t, s, c, tc.chunk)
			const n = 12
			b := batch(n, key4)
			runs := 0
			for ; runs < 4*c.MaxRecordAttempts; runs++ {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if tc.hang {
					ctx, cancel = context.WithTimeout(ctx, 2*tc.margin)
				}
				res, err := p.Run(ctx, b)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if res.Failed == 0 {
					break
				}
			}
			checkWaves(t, s)
			var parked []string
			for _, pr := range e.parker.Records() {
				parked = append(parked, pr.ID.Seq)
			}
			if !slices.Equal(parked, []string{seq(killer)}) {
				t.Errorf("parked %v, want only the killer %s (after %d runs)", parked, seq(killer), runs)
			}
			v, err := e.ledger.Lookup(context.Background(), shard, seq(1), seq(n))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				if !v.Done(id(i)) {
					t.Errorf("record %d not done after %d runs", i, runs)
				}
				if i != killer && v.Attempts(id(i)) >= c.MaxRecordAttempts {
					t.Errorf("innocent record %d charged %d attempts", i, v.Attempts(id(i)))
				}
			}
			// Per key, records reached the sink in sequence order (a retry repeats the last one).
			for k, got := range s.sent() {
				for j := 1; j < len(got); j++ {
					if got[j] < got[j-1] {
						t.Errorf("key %s: sent %v out of order", k, got)
					}
				}
			}
		})
	}
}
