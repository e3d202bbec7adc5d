package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// mappingUnit is a batch or a part of one with the retries its lineage has used, as the local
// mapping keeps them (internal/local/esm, lane.process).
type mappingUnit struct {
	b       pipeline.Batch
	retries int
}

// driveMapping feeds b like the local mapping with BisectBatchOnFunctionError on: a dead
// invocation of more than one record is halved without spending a retry; a dead single record
// and a partial failure each spend one; a unit whose retries reach maxRetries is given up (its
// records are returned). It stops when the batch is through or after limit invocations (ok
// false).
func (s *crashSim) driveMapping(b pipeline.Batch, maxRetries, limit int) (givenUp []string, ok bool) {
	work := []mappingUnit{{b: b}}
	for len(work) > 0 {
		if s.runs >= limit {
			return givenUp, false
		}
		u := work[0]
		work = work[1:]
		res, crashed := s.invoke(u.b)
		switch {
		case crashed && len(u.b.Records) > 1:
			h := len(u.b.Records) / 2
			l, r := u, u
			l.b.Records, r.b.Records = u.b.Records[:h], u.b.Records[h:]
			work = append([]mappingUnit{l, r}, work...)
			continue
		case crashed:
		case res.LowestFailedSeq != "":
			i := slices.IndexFunc(u.b.Records, func(r pipeline.Record) bool { return r.ID.Seq == res.LowestFailedSeq })
			u.b.Records = u.b.Records[i:]
		default:
			continue
		}
		if u.retries >= maxRetries {
			for _, r := range u.b.Records {
				givenUp = append(givenUp, r.ID.Seq)
			}
			continue
		}
		u.retries++
		work = append([]mappingUnit{u}, work...)
	}
	return givenUp, true
}

// TestKillerParkedBeforeTheMappingGivesUp: with the local mapping's timing (a retry 100 ms after
// a failure, a 6 s function timeout, so a dead invocation's marker reads live for 8 s by its
// lease) and the template's MaximumRetryAttempts 10, a crash killer and a hang killer (the
// invocation dies at its timeout) are each isolated and parked by the consumer: the retry that
// meets its lane's previous invocation's marker takes it for a death at once, so no retry is
// spent waiting out a lease, and the mapping gives up nothing. Within
// ceil(log2 BatchSize) + MaxRecordAttempts dead invocations.
func TestKillerParkedBeforeTheMappingGivesUp(t *testing.T) {
	const n, maxRetries = 16, 10
	c := cfg()
	c.MaxRecordAttempts = 5
	for _, kind := range []string{"crash", "hang"} {
		for _, killer := range []int{1, 7, 16} {
			t.Run(fmt.Sprintf("%s/killer=%d", kind, killer), func(t *testing.T) {
				s := newCrashSim(t, c)
				s.step, s.timeout = 100*time.Millisecond, 6*time.Second
				if kind == "hang" {
					s.hang[seq(killer)] = true
				} else {
					s.killer[seq(killer)] = true
				}
				given, ok := s.driveMapping(batch(n, func(i int) string { return fmt.Sprint("k", i%5) }), maxRetries, 200)
				if !ok {
					t.Fatalf("lane still blocked after %d invocations (%d dead)", s.runs, s.deaths)
				}
				if len(given) > 0 {
					t.Fatalf("the mapping gave up %d records (killer %d) after %d invocations, %d dead: the consumer did not isolate the killer in time",
						len(given), killer, s.runs, s.deaths)
				}
				parked := s.e.parker.Records()
				if len(parked) != 1 || parked[0].ID != id(killer) || parked[0].LastError != pipeline.ErrDied.Error() {
					t.Fatalf("parked = %+v, want only record %d, parked for its deaths", parked, killer)
				}
				for i := 1; i <= n; i++ {
					if i != killer && !s.rec.called(seq(i)) {
						t.Errorf("innocent record %d never processed", i)
					}
				}
				if bound := 4 + c.MaxRecordAttempts; s.deaths > bound {
					t.Errorf("%d dead invocations, bound ceil(log2 %d) + %d = %d", s.deaths, n, c.MaxRecordAttempts, bound)
				}
			})
		}
	}
}
