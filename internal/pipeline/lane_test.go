package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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

// TestIsolationKeepsWhatItProcessed: the batch sink (waves, as the consumer runs it) and a crash
// killer that the mapping isolates by halving: every invocation of a half holding the killer
// dies, but the records it processed in the rounds before the killer's wave are in the ledger
// already, so the next half skips them. An innocent record reaches the sink at most twice: in
// the first invocation, which knew of no death and dies with what it did, and once more.
func TestIsolationKeepsWhatItProcessed(t *testing.T) {
	const n = 32
	c := cfg()
	c.MaxRecordAttempts = 5
	for _, killer := range []int{9, 32} {
		t.Run(fmt.Sprintf("killer=%d", killer), func(t *testing.T) {
			s := newCrashSim(t, c)
			s.step, s.timeout = 100*time.Millisecond, 6*time.Second
			sink := func(ctx context.Context, recs []pipeline.Record) []error {
				errs := make([]error, len(recs))
				for _, r := range recs {
					if r.ID.Seq == seq(killer) {
						s.crashed.Store(true) // the runtime exits before the wave is sent
						for i := range errs {
							errs[i] = errKilled
						}
						return errs
					}
				}
				for i, r := range recs {
					errs[i] = s.rec.process(ctx, r)
				}
				return errs
			}
			s.p = s.e.pipeline(t, s.rec.process, c, pipeline.WithClock(func() time.Time { return time.Unix(0, s.clock.Load()) }),
				pipeline.WithBatchSink(sink, 10), pipeline.WithEndedConfirm(0))
			given, ok := s.driveMapping(batch(n, func(i int) string { return fmt.Sprint("k", i%4) }), 10, 200)
			if !ok || len(given) > 0 {
				t.Fatalf("blocked %v, given up %d", !ok, len(given))
			}
			counts := map[string]int{}
			s.rec.mu.Lock()
			for _, id := range s.rec.calls {
				counts[id.Seq]++
			}
			s.rec.mu.Unlock()
			for i := 1; i <= n; i++ {
				if i != killer && (counts[seq(i)] < 1 || counts[seq(i)] > 2) {
					t.Errorf("innocent record %d reached the sink %d times, want once, or twice when the first invocation (which knew of no death) sent it", i, counts[seq(i)])
				}
			}
			if p := s.e.parker.Records(); len(p) != 1 || p[0].ID != id(killer) {
				t.Errorf("parked %+v, want only the killer", p)
			}
		})
	}
}

// TestRacingMappingCompletesWithinTheConfirmWait: B, an invocation of a second mapping on the
// same stream, gets the batch A (the first mapping's invocation) is still running. The lane
// rule would take A's marker for a death; B first waits DefaultEndedConfirm-like, A completes
// meanwhile, and B skips every record as done: no death counted, nothing processed twice.
func TestRacingMappingCompletesWithinTheConfirmWait(t *testing.T) {
	e := newEnv()
	release := make(chan struct{})
	var lookups atomic.Int32
	e.ledger.Fail = func(op string) error {
		if op == "lookup" && lookups.Add(1) == 2 { // B's first lookup: let A finish during B's wait
			close(release)
		}
		return nil
	}
	rec := &recorder{}
	entered := make(chan struct{})
	var once sync.Once
	process := func(ctx context.Context, r pipeline.Record) error {
		once.Do(func() { close(entered); <-release })
		return rec.process(ctx, r)
	}
	c := cfg()
	p := e.pipeline(t, process, c, pipeline.WithEndedConfirm(time.Second))
	b := batch(6, oneKey)
	aDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := p.Run(ctx, b)
		aDone <- err
	}()
	<-entered
	time.Sleep(5 * time.Millisecond) // B starts strictly later than A
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resB, err := p.Run(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if resB.DuplicatesSkipped != 6 || resB.Processed != 0 || resB.DeadMarkers != 0 || resB.Failed != 0 {
		t.Errorf("B: %+v, want all 6 skipped as done by A, no death", resB)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 6 {
		t.Errorf("%d Process calls, want 6 (each record once)", len(rec.calls))
	}
}
