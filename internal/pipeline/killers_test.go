package pipeline_test

import (
	"fmt"
	"math"
	"testing"
)

// TestTwoKillersInOneBatch: docs/consumer.md proves the isolation bound per killer and leaves
// interleaved killers unproven. Two records that kill every invocation running them, at every
// pair of positions of an 8-record batch, bisection off and on: both are parked, no innocent
// record is parked, every innocent record is processed, and the lane gets through within twice
// the single-killer bound.
func TestTwoKillersInOneBatch(t *testing.T) {
	const n = 8
	c := cfg()
	bound := c.MaxRecordAttempts * (int(math.Ceil(math.Log2(n))) + 1)
	for k1 := 1; k1 <= n; k1++ {
		for k2 := k1 + 1; k2 <= n; k2++ {
			for _, bisect := range []bool{false, true} {
				t.Run(fmt.Sprintf("killers=%d,%d/bisect=%v", k1, k2, bisect), func(t *testing.T) {
					s := newCrashSim(t, c, k1, k2)
					b := batch(n, func(i int) string { return fmt.Sprint("k", i%3) })
					if !s.drive(b, bisect, 8*bound) {
						t.Fatalf("lane still blocked after %d invocations (%d dead)", s.runs, s.deaths)
					}
					if s.deaths > 2*bound {
						t.Errorf("%d dead invocations, more than twice the single-killer bound %d", s.deaths, bound)
					}
					parked := map[string]bool{}
					for _, p := range s.e.parker.Records() {
						parked[p.ID.Seq] = true
					}
					for i := 1; i <= n; i++ {
						killer := i == k1 || i == k2
						switch {
						case killer && !parked[seq(i)]:
							t.Errorf("killer %d not parked", i)
						case !killer && parked[seq(i)]:
							t.Errorf("innocent record %d parked", i)
						case !killer && !s.rec.called(seq(i)):
							t.Errorf("innocent record %d never processed", i)
						}
					}
				})
			}
		}
	}
}
