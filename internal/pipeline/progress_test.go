package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// TestBatchSinkSavesProgressOfASlowRun: a batch-sink run whose rounds take longer than
// WithProgressEvery saves what it has sent before the next round, so an invocation that dies in
// a later round (a killer nothing knew of yet, an out-of-memory kill) leaves those records done
// and the mapping's retry does not send them again. A run whose rounds are quick, or whose last
// round follows, writes nothing more than its final entry: the saving costs a ledger write only
// where a death would cost at least that much sink time again.
//
// Six records of two keys go in three rounds of two; the sink takes `round` per call on the
// run's clock. With a death in the third round, the records the ledger shows done are what a
// retry skips.
func TestBatchSinkSavesProgressOfASlowRun(t *testing.T) {
	const every = 250 * time.Millisecond
	tests := map[string]struct {
		every     time.Duration
		round     time.Duration
		die       bool
		wantDone  int    // records the ledger shows done after the run
		wantSaves int    // ledger writes before the final entry
		fail      string // a record the sink always fails
		wantCalls int    // sink calls (0: 3)
	}{
		"slow rounds, death in the third":    {every: every, round: 300 * time.Millisecond, die: true, wantDone: 4, wantSaves: 2},
		"slow rounds, no death":              {every: every, round: 300 * time.Millisecond, wantDone: 6, wantSaves: 2},
		"rounds that add up to the interval": {every: every, round: 130 * time.Millisecond, die: true, wantDone: 4, wantSaves: 1},
		"quick rounds, death in the third":   {every: every, round: 10 * time.Millisecond, die: true, wantDone: 0, wantSaves: 0},
		"quick rounds, no death":             {every: every, round: 10 * time.Millisecond, wantDone: 6, wantSaves: 0},
		"saving off, death in the third":     {every: 0, round: time.Second, die: true, wantDone: 0, wantSaves: 0},
		// Records 1 (key k1), 2 and 3 (key k0): record 2 fails in the first round, so k0 is
		// blocked and record 3 will not be sent. That round is the last that sends: nothing is
		// saved after it, however long it took.
		"slow rounds, the last key left blocked": {every: every, round: 300 * time.Millisecond, fail: seq(2), wantCalls: 1, wantDone: 1, wantSaves: 0},
	}
	errKilled := errors.New("the runtime died")
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv()
			var clock atomic.Int64
			clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
			var dead atomic.Bool
			var calls, writes atomic.Int32
			e.ledger.Fail = func(op string) error {
				if op != "record" {
					return nil
				}
				if dead.Load() {
					return errKilled // a dead runtime writes nothing
				}
				writes.Add(1)
				return nil
			}
			s := &sink{fail: map[string]int{tc.fail: -1}, before: func([]pipeline.Record) {
				clock.Add(int64(tc.round))
				if calls.Add(1) == 3 && tc.die {
					dead.Store(true)
				}
			}}
			p := e.batchPipeline(t, s, cfg(), 10,
				pipeline.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }),
				pipeline.WithProgressEvery(tc.every))
			n, key := 6, func(i int) string { return fmt.Sprint("k", i%2) }
			if tc.fail != "" {
				n, key = 3, func(i int) string { return fmt.Sprint("k", min(i, 2)%2) }
			}
			b := batch(n, key)
			_, err := p.Run(context.Background(), b)
			if !tc.die && err != nil {
				t.Fatal(err)
			}
			if tc.wantCalls == 0 {
				tc.wantCalls = 3
			}
			if got := s.calls(); got != tc.wantCalls {
				t.Fatalf("%d sink calls, want %d rounds", got, tc.wantCalls)
			}
			saves := int(writes.Load())
			if !tc.die {
				saves-- // the final entry
			}
			if saves != tc.wantSaves {
				t.Errorf("%d savings of progress, want %d", saves, tc.wantSaves)
			}
			dead.Store(false)
			v, err := e.ledger.Lookup(context.Background(), shard, seq(1), seq(n))
			if err != nil {
				t.Fatal(err)
			}
			done := 0
			for i := 1; i <= n; i++ {
				if v.Done(id(i)) {
					done++
					if tc.die && i > 4 {
						t.Errorf("record %d done, but its round died", i)
					}
				}
			}
			if done != tc.wantDone {
				t.Errorf("%d records done after the run, want %d", done, tc.wantDone)
			}
		})
	}
}
