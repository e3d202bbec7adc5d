package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestHungProcessAbandoned: a Process that ignores its context and never returns costs one
// failed attempt per invocation, not a function timeout: Run returns before the deadline with
// the other keys' records done, and the MaxRecordAttempts-th invocation parks the record with
// its payload. On the code before in-flight markers Run waited for the call forever.
func TestHungProcessAbandoned(t *testing.T) {
	// In a synctest bubble: the deadlines are virtual, so a loaded machine cannot make Run
	// look late (the writes after the abandoned call take no virtual time).
	synctest.Test(t, func(t *testing.T) {
		e := newEnv()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) }) // let the hung goroutines end with the test
		const hung = 3
		rec := &recorder{}
		process := func(ctx context.Context, r pipeline.Record) error {
			if r.ID.Seq == seq(hung) {
				<-release // ignores ctx
				return nil
			}
			return rec.process(ctx, r)
		}
		c := cfg()
		c.DeadlineMargin = 400 * time.Millisecond
		p := e.pipeline(t, process, c)
		b := batch(8, func(i int) string { return fmt.Sprint("k", i%4) }) // record 3 and 7 share a key

		for run := 1; run <= c.MaxRecordAttempts; run++ {
			ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
			type out struct {
				res pipeline.Result
				err error
				ctx error
			}
			done := make(chan out, 1)
			go func() {
				res, err := p.Run(ctx, b)
				done <- out{res, err, ctx.Err()}
			}()
			var o out
			select {
			case o = <-done:
			case <-time.After(10 * time.Second):
				cancel()
				t.Fatalf("run %d: Run did not return: it waits for a Process that ignores its context", run)
			}
			cancel()
			if o.err != nil {
				t.Fatalf("run %d: %v", run, o.err)
			}
			if o.ctx != nil {
				t.Errorf("run %d: Run returned after its deadline (%v): a Lambda would have timed out", run, o.ctx)
			}
			res := o.res
			if run < c.MaxRecordAttempts {
				// 3 hung (attempt), 7 blocked behind it (same key, not attempted); 1, 2, 4, 5, 6, 8 done.
				if res.Abandoned != 1 || res.FailedAttempts != 1 || res.Failed != 2 || res.LowestFailedSeq != seq(hung) {
					t.Errorf("run %d: result = %+v", run, res)
				}
				if f := res.Failures[0]; !errors.Is(f.Err, pipeline.ErrAbandoned) || !f.Attempted || f.Attempts != run {
					t.Errorf("run %d: failure = %+v, want an abandoned attempt number %d", run, f, run)
				}
				continue
			}
			// Parked with the abandoned attempt; 7 was behind it in its key and not started.
			if res.Parked != 1 || res.Abandoned != 1 || res.Failed != 1 || res.LowestFailedSeq != seq(7) {
				t.Errorf("last run: result = %+v, want the hung record parked", res)
			}
		}
		// The retry from 7 finds 3 parked (done) and processes 7.
		res, err := p.Run(context.Background(), b)
		if err != nil || res.Processed != 1 || res.DuplicatesSkipped != 7 {
			t.Errorf("retry after parking: %+v %v", res, err)
		}
		for i := 1; i <= 8; i++ {
			if i != hung && !rec.called(seq(i)) {
				t.Errorf("record %d never processed", i)
			}
		}
		parked := e.parker.Records()
		if len(parked) != 1 || parked[0].ID != id(hung) || string(parked[0].Data) != fmt.Sprintf(`{"n":%d}`, hung) ||
			parked[0].LastError != pipeline.ErrAbandoned.Error() || parked[0].Attempts != c.MaxRecordAttempts {
			t.Errorf("parked = %+v, want record %d with its payload after %d attempts", parked, hung, c.MaxRecordAttempts)
		}
	})
}

var errKilled = errors.New("invocation killed")

// crashSim drives invocations of one pipeline the way Lambda's mapping would, where Process of
// the killer record kills the invocation: nothing after the marker is written (the ledger
// refuses the entry and the marker's release, like a runtime that exited). A fake clock moves
// ten minutes per invocation, past the previous invocation's deadline.
type crashSim struct {
	t       *testing.T
	e       *env
	p       *pipeline.Pipeline
	rec     *recorder
	killer  map[string]bool
	clock   atomic.Int64 // unix nanos
	crashed atomic.Bool
	deaths  int
	runs    int
	// step is how far the clock moves before each invocation (default ten minutes: past any
	// lease); timeout is each invocation's deadline (default five minutes). A hang killer
	// moves the clock to the invocation's deadline and dies there, as a timed-out runtime.
	step, timeout time.Duration
	hang          map[string]bool
	ctxDeadline   atomic.Int64 // unix nanos: the running invocation's deadline
}

func newCrashSim(t *testing.T, c pipeline.Config, killers ...int) *crashSim {
	s := &crashSim{t: t, e: newEnv(), rec: &recorder{}, killer: map[string]bool{}, hang: map[string]bool{},
		step: 10 * time.Minute, timeout: 5 * time.Minute}
	for _, k := range killers {
		s.killer[seq(k)] = true
	}
	s.clock.Store(time.Now().UnixNano())
	s.e.ledger.Fail = func(op string) error {
		if s.crashed.Load() && (op == "record" || op == "unmark") {
			return errKilled
		}
		return nil
	}
	s.e.parker.Fail = func(park.Record) error {
		if s.crashed.Load() {
			return errKilled // a dead runtime sends nothing
		}
		return nil
	}
	process := func(ctx context.Context, r pipeline.Record) error {
		if s.hang[r.ID.Seq] {
			s.clock.Store(s.ctxDeadline.Load())
			s.crashed.Store(true)
			return errKilled
		}
		if s.killer[r.ID.Seq] {
			s.crashed.Store(true)
			return errKilled
		}
		return s.rec.process(ctx, r)
	}
	// No wait before the lane rule: the sim's mapping never races a second one.
	s.p = s.e.pipeline(t, process, c, pipeline.WithClock(func() time.Time { return time.Unix(0, s.clock.Load()) }),
		pipeline.WithEndedConfirm(0))
	return s
}

// invoke runs b as one invocation; crashed reports that it died.
func (s *crashSim) invoke(b pipeline.Batch) (pipeline.Result, bool) {
	now := time.Unix(0, s.clock.Add(int64(s.step)))
	s.ctxDeadline.Store(now.Add(s.timeout).UnixNano())
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(s.timeout))
	defer cancel()
	s.runs++
	res, err := s.p.Run(ctx, b)
	if s.crashed.Swap(false) {
		s.deaths++
		return res, true
	}
	if err != nil {
		s.t.Fatalf("run %d: %v", s.runs, err)
	}
	return res, false
}

// drive feeds b like the mapping: a dead invocation is retried (halved first when bisect is
// on), a partial failure is retried from the lowest failed record. It stops when all is done
// or after limit invocations.
func (s *crashSim) drive(b pipeline.Batch, bisect bool, limit int) bool {
	pending := []pipeline.Batch{b}
	for len(pending) > 0 {
		if s.runs >= limit {
			return false
		}
		cur := pending[0]
		pending = pending[1:]
		res, crashed := s.invoke(cur)
		switch {
		case crashed && bisect && len(cur.Records) > 1:
			h := len(cur.Records) / 2
			a, z := cur, cur
			a.Records, z.Records = cur.Records[:h], cur.Records[h:]
			pending = append([]pipeline.Batch{a, z}, pending...)
		case crashed:
			pending = append([]pipeline.Batch{cur}, pending...)
		case res.LowestFailedSeq != "":
			i := slices.IndexFunc(cur.Records, func(r pipeline.Record) bool { return r.ID.Seq == res.LowestFailedSeq })
			rest := cur
			rest.Records = cur.Records[i:]
			pending = append([]pipeline.Batch{rest}, pending...)
		}
	}
	return true
}

// TestDeadInvocationsIsolateAndParkTheKiller: a record that kills every invocation running it
// is counted through the dead invocations' markers, isolated by halving, and parked with its
// payload and "invocation died: timeout/crash", while every innocent record of the batch is
// processed and none is parked — within MaxRecordAttempts × (ceil(log2 BatchSize) + 1) dead
// invocations (the tighter ceil(log2 BatchSize) + MaxRecordAttempts is what the design gives),
// with BisectBatchOnFunctionError on or off. On the code before markers the killer was never
// counted and the lane never moved.
func TestDeadInvocationsIsolateAndParkTheKiller(t *testing.T) {
	const n = 16
	c := cfg()
	bound := c.MaxRecordAttempts * (int(math.Ceil(math.Log2(n))) + 1)
	tight := int(math.Ceil(math.Log2(n))) + c.MaxRecordAttempts
	for _, killer := range []int{1, 6, 11, 16} {
		for _, bisect := range []bool{false, true} {
			t.Run(fmt.Sprintf("killer=%d/bisect=%v", killer, bisect), func(t *testing.T) {
				s := newCrashSim(t, c, killer)
				b := batch(n, func(i int) string { return fmt.Sprint("k", i%5) })
				if !s.drive(b, bisect, 4*bound) {
					t.Fatalf("lane still blocked after %d invocations (%d dead)", s.runs, s.deaths)
				}
				if s.deaths > bound || s.deaths > tight {
					t.Errorf("%d dead invocations, bound %d (tight %d)", s.deaths, bound, tight)
				}
				parked := s.e.parker.Records()
				if len(parked) != 1 || parked[0].ID != id(killer) || parked[0].LastError != pipeline.ErrDied.Error() ||
					string(parked[0].Data) != fmt.Sprintf(`{"n":%d}`, killer) || parked[0].Attempts < c.MaxRecordAttempts {
					t.Fatalf("parked = %+v, want only record %d with its payload and %q", parked, killer, pipeline.ErrDied)
				}
				for i := 1; i <= n; i++ {
					if i != killer && !s.rec.called(seq(i)) {
						t.Errorf("innocent record %d never processed", i)
					}
				}
				t.Logf("%d invocations, %d dead (bound %d, tight %d)", s.runs, s.deaths, bound, tight)
			})
		}
	}
}

// TestSingleRecordKilledMaxTimes: a batch of one killer: every death is that record's alone, so
// it is parked after exactly MaxRecordAttempts deaths, without running a further time.
func TestSingleRecordKilledMaxTimes(t *testing.T) {
	c := cfg()
	s := newCrashSim(t, c, 1)
	if !s.drive(batch(1, oneKey), false, 10) {
		t.Fatal("not parked")
	}
	if s.deaths != c.MaxRecordAttempts || s.runs != c.MaxRecordAttempts+1 {
		t.Errorf("%d deaths in %d runs, want %d deaths then one run that parks", s.deaths, s.runs, c.MaxRecordAttempts)
	}
	if p := s.e.parker.Records(); len(p) != 1 || p[0].Attempts != c.MaxRecordAttempts || p[0].LastError != pipeline.ErrDied.Error() {
		t.Errorf("parked = %+v", p)
	}
}

// TestDeathsAndFailuresAddUp: a record that failed in-process once and then killed invocations
// is parked when the two kinds of attempts together reach MaxRecordAttempts.
func TestDeathsAndFailuresAddUp(t *testing.T) {
	c := cfg()
	s := newCrashSim(t, c)
	s.rec.fail = map[string]error{seq(1): errors.New("transient")}
	if _, crashed := s.invoke(batch(1, oneKey)); crashed {
		t.Fatal("crashed")
	}
	s.rec.fail = nil
	s.killer[seq(1)] = true
	if !s.drive(batch(1, oneKey), false, 10) {
		t.Fatal("not parked")
	}
	if s.deaths != c.MaxRecordAttempts-1 {
		t.Errorf("%d deaths, want %d (one in-process failure + deaths = %d attempts)", s.deaths, c.MaxRecordAttempts-1, c.MaxRecordAttempts)
	}
}

// TestMarkerOfAnotherLane: with ParallelizationFactor > 1 two lanes' batches interleave in
// sequence space. A dead (and a live) marker of lane A never counts an attempt for, isolates or
// holds back lane B's records, although the ranges overlap.
func TestMarkerOfAnotherLane(t *testing.T) {
	c := cfg()
	s := newCrashSim(t, c)
	lane := func(odd bool) pipeline.Batch {
		b := batch(8, func(i int) string { return fmt.Sprint("k", i) })
		var keep []pipeline.Record
		for i, r := range b.Records {
			if (i%2 == 0) == odd {
				keep = append(keep, r)
			}
		}
		b.Records = keep
		return b
	}
	s.killer[seq(3)] = true // lane A holds 1, 3, 5, 7
	if _, crashed := s.invoke(lane(true)); !crashed {
		t.Fatal("lane A did not die")
	}
	res, crashed := s.invoke(lane(false)) // lane B: 2, 4, 6, 8, after A's deadline
	if crashed || res.Processed != 4 || res.Failed != 0 || res.IsolationWindow != 0 || res.DeadMarkers != 1 {
		t.Errorf("lane B after A's death: %+v", res)
	}
	// A live marker of lane A (deadline in the future) does not hold lane B either.
	live := pipeline.Marker{Nonce: "livea", First: seq(1), Last: seq(7), IDs: []recordid.ID{id(1), id(3), id(5), id(7)},
		Started: time.Unix(0, s.clock.Load()), Deadline: time.Unix(0, s.clock.Load()).Add(time.Hour), Source: "consumer"}
	if err := s.e.ledger.Mark(context.Background(), shard, live); err != nil {
		t.Fatal(err)
	}
	res, _ = s.invoke(lane(false))
	if res.InFlightSkipped != 0 || res.Failed != 0 {
		t.Errorf("lane B held back by lane A's live marker: %+v", res)
	}
}

// TestRacingInvocations: invocation A of the mapping is running a batch; B, a replay of the
// same records (the reconciler), skips what A holds in flight (failed, not attempted, no
// attempt counted) instead of processing it twice. A then dies; once its marker is past its
// deadline a third invocation processes everything: nothing is lost. (Another invocation of
// the mapping cannot run A's records while A runs: it takes A's marker for a death, see
// TestKillerParkedBeforeTheMappingGivesUp.)
func TestRacingInvocations(t *testing.T) {
	e := newEnv()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var killed atomic.Bool
	e.ledger.Fail = func(op string) error {
		if killed.Load() && (op == "record" || op == "unmark") {
			return errKilled
		}
		return nil
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var calls sync.Map // seq -> count
	count := func(seq string) int { v, _ := calls.Load(seq); n, _ := v.(int); return n }
	var mu sync.Mutex
	process := func(ctx context.Context, r pipeline.Record) error {
		mu.Lock()
		calls.Store(r.ID.Seq, count(r.ID.Seq)+1)
		mu.Unlock()
		if r.ID.Seq == seq(1) && !killed.Load() {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}
	c := cfg()
	c.MaxConcurrency = 1
	p := e.pipeline(t, process, c, pipeline.WithClock(now))
	b := batch(6, oneKey)

	ctxA, cancelA := context.WithDeadline(context.Background(), now().Add(time.Minute))
	defer cancelA()
	aDone := make(chan error, 1)
	go func() {
		_, err := p.Run(ctxA, b)
		aDone <- err
	}()
	<-entered // A's marker is written and A is inside Process

	clock.Add(int64(time.Second)) // B starts later
	ctxB, cancelB := context.WithDeadline(context.Background(), now().Add(time.Minute))
	defer cancelB()
	replay := b
	replay.Source, replay.AdvanceCheckpoint = pipeline.SourceReconciler, false
	resB, err := p.Run(ctxB, replay)
	if err != nil {
		t.Fatal(err)
	}
	if resB.InFlightSkipped != 6 || resB.Processed != 0 || resB.FailedAttempts != 0 || resB.LowestFailedSeq != seq(1) || resB.LiveMarkers != 1 {
		t.Errorf("B: %+v, want all 6 skipped as in flight, none attempted", resB)
	}
	for i := 2; i <= 6; i++ {
		if count(seq(i)) != 0 {
			t.Errorf("record %d processed by B while A held it", i)
		}
	}

	killed.Store(true) // A dies: nothing after its marker is written
	close(release)
	if err := <-aDone; !errors.Is(err, pipeline.ErrLedger) {
		t.Fatalf("A: %v", err)
	}
	killed.Store(false)

	// C runs after A's deadline: A's marker is dead; C (and the retries after it) process all.
	clock.Add(int64(2 * time.Minute))
	pending := b
	for run := 0; len(pending.Records) > 0; run++ {
		if run > 4 {
			t.Fatalf("records left after %d runs: %v", run, pending.Records)
		}
		ctx, cancel := context.WithDeadline(context.Background(), now().Add(time.Minute))
		res, err := p.Run(ctx, pending)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.FailedAttempts != 0 || res.Parked != 0 {
			t.Errorf("run %d: %+v", run, res)
		}
		i := slices.IndexFunc(pending.Records, func(r pipeline.Record) bool { return r.ID.Seq == res.LowestFailedSeq })
		if res.LowestFailedSeq == "" {
			i = len(pending.Records)
		}
		pending.Records = pending.Records[i:]
	}
	v, err := e.ledger.Lookup(context.Background(), shard, seq(1), seq(6))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		if !v.Done(id(i)) {
			t.Errorf("record %d lost", i)
		}
	}
}

// TestTieBreakBetweenLiveMarkers: two invocations whose markers each see the other skip only
// when the other started first (or, at the same instant, has the lower nonce): never both.
func TestTieBreakBetweenLiveMarkers(t *testing.T) {
	e := newEnv()
	at := time.Now()
	p := e.pipeline(t, (&recorder{}).process, cfg(), pipeline.WithClock(func() time.Time { return at }))
	// A marker of a later invocation on the same records: ours runs.
	later := pipeline.Marker{Nonce: "zzzz", First: seq(1), Last: seq(2), IDs: []recordid.ID{id(1), id(2)},
		Started: at.Add(time.Second), Deadline: at.Add(time.Hour), Source: "consumer"}
	if err := e.ledger.Mark(context.Background(), shard, later); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), at.Add(time.Minute))
	defer cancel()
	res, err := p.Run(ctx, batch(2, oneKey))
	if err != nil || res.Processed != 2 || res.InFlightSkipped != 0 {
		t.Errorf("with a later live marker: %+v %v, want both processed", res, err)
	}
}

// TestMarkerLifecycle: the happy path writes one marker beside the lookup and the entry
// completes it (same nonce, nothing deleted); a run with nothing to record and a failed ledger
// write release it, so neither reads as a death later.
func TestMarkerLifecycle(t *testing.T) {
	ctx := context.Background()
	t.Run("happy path", func(t *testing.T) {
		e := newEnv()
		if _, err := e.pipeline(t, (&recorder{}).process, cfg()).Run(ctx, batch(5, oneKey)); err != nil {
			t.Fatal(err)
		}
		ms, es := e.ledger.Markers(shard), e.ledger.Entries(shard)
		if e.ledger.Marks != 1 || e.ledger.Unmarks != 0 || len(ms) != 1 || len(es) != 1 || es[0].Nonce != ms[0].Nonce || len(ms[0].IDs) != 5 {
			t.Errorf("marks %d unmarks %d markers %+v entries %+v", e.ledger.Marks, e.ledger.Unmarks, ms, es)
		}
	})
	t.Run("nothing to record", func(t *testing.T) {
		e := newEnv()
		p := e.pipeline(t, (&recorder{}).process, cfg())
		for range 2 { // the second run finds everything done
			if _, err := p.Run(ctx, batch(3, oneKey)); err != nil {
				t.Fatal(err)
			}
		}
		if e.ledger.Unmarks != 1 || len(e.ledger.Markers(shard)) != 1 {
			t.Errorf("unmarks %d, markers %+v: the second run's marker should be released", e.ledger.Unmarks, e.ledger.Markers(shard))
		}
	})
	t.Run("ledger write fails", func(t *testing.T) {
		e := newEnv()
		e.ledger.Fail = func(op string) error {
			if op == "record" {
				return errors.New("throttled")
			}
			return nil
		}
		if _, err := e.pipeline(t, (&recorder{}).process, cfg()).Run(ctx, batch(3, oneKey)); !errors.Is(err, pipeline.ErrLedger) {
			t.Fatal(err)
		}
		if len(e.ledger.Markers(shard)) != 0 {
			t.Error("marker of a run whose ledger write failed left behind: it would count as a death")
		}
	})
	t.Run("marker write fails", func(t *testing.T) {
		e := newEnv()
		e.ledger.Fail = func(op string) error {
			if op == "mark" {
				return errors.New("throttled")
			}
			return nil
		}
		res, err := e.pipeline(t, (&recorder{}).process, cfg()).Run(ctx, batch(3, oneKey))
		if err != nil || res.Processed != 3 || res.MarkerWriteFailures != 1 {
			t.Errorf("%+v %v: a failed marker write is counted, the batch still runs", res, err)
		}
	})
}

// TestMarkerLease: a marker holds its records for a lease, not for the whole function timeout.
// A run longer than half a lease renews it while Process runs; a run that dies is taken for
// dead a lease after its last renewal, though its function timeout is far away.
func TestMarkerLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	t.Run("renewed while running", func(t *testing.T) {
		e := newEnv()
		start := time.Now()
		var seen time.Time
		process := func(ctx context.Context, r pipeline.Record) error {
			if r.ID.Seq != seq(1) {
				return nil
			}
			// Wait until a renewal pushed the marker past its first lease.
			for {
				ms := e.ledger.Markers(shard)
				if len(ms) == 1 && ms[0].Deadline.After(start.Add(lease+lease/4)) {
					seen = ms[0].Deadline
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := e.pipeline(t, process, cfg(), pipeline.WithMarkerLease(lease)).Run(ctx, batch(2, oneKey))
		if err != nil || res.Processed != 2 {
			t.Fatalf("%+v %v (renewed deadline seen: %v)", res, err, seen)
		}
		dl, _ := ctx.Deadline()
		if ms := e.ledger.Markers(shard); len(ms) != 1 || !ms[0].Deadline.Before(dl) {
			t.Errorf("marker %+v: the lease must stay short of the function deadline %v", ms, dl)
		}
	})
	t.Run("dead a lease after the crash", func(t *testing.T) {
		c := cfg()
		s := newCrashSim(t, c, 1)
		s.p = s.e.pipeline(t, func(ctx context.Context, r pipeline.Record) error {
			if s.killer[r.ID.Seq] {
				s.crashed.Store(true)
				return errKilled
			}
			return nil
		}, c, pipeline.WithMarkerLease(lease), pipeline.WithClock(func() time.Time { return time.Unix(0, s.clock.Load()) }))
		// The crashed run had an hour left; the next run comes a lease plus DeadGrace later.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if _, err := s.p.Run(ctx, batch(1, oneKey)); err == nil || !s.crashed.Swap(false) {
			t.Fatalf("first run did not die: %v", err)
		}
		s.clock.Add(int64(lease + pipeline.DeadGrace + time.Millisecond))
		s.killer = map[string]bool{}
		res, err := s.p.Run(ctx, batch(1, oneKey))
		if err != nil || res.DeadMarkers != 1 || res.LiveMarkers != 0 || res.InFlightSkipped != 0 || res.Processed != 1 {
			t.Errorf("after the lease: %+v %v, want the dead run counted and the record run", res, err)
		}
	})
}

// TestReplayYieldsToTheMapping: a replay (the reconciler) leaves to the mapping a record that a
// mapping run attempted and failed, until Batch.MappingSettled is past that run's last sign of
// life (here its start: a short run renews nothing): the mapping is still retrying it, and a
// replay running it would hold the mapping's next retries, each of which costs one of the
// mapping's MaximumRetryAttempts. The record is
// held (not attempted, no attempt counted); once the window is over the replay runs it. With
// MappingSettled zero the replay runs it at once.
func TestReplayYieldsToTheMapping(t *testing.T) {
	const lease, yield = 10 * time.Second, 5 * time.Second
	tests := []struct {
		name  string
		yield time.Duration
		after time.Duration // replay start after the mapping run's start
		held  bool
	}{
		{"inside the window", yield, yield - time.Second, true},
		{"after the window", yield, yield + time.Second, false},
		{"no window", 0, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			var clock atomic.Int64
			clock.Store(time.Now().UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			var failing atomic.Bool
			failing.Store(true)
			var calls atomic.Int64
			process := func(ctx context.Context, r pipeline.Record) error {
				if r.ID.Seq != seq(2) {
					return nil
				}
				calls.Add(1)
				if failing.Load() {
					return errors.New("transient")
				}
				return nil
			}
			p := e.pipeline(t, process, cfg(), pipeline.WithClock(now), pipeline.WithMarkerLease(lease))
			b := batch(4, func(i int) string { return fmt.Sprint("k", i) })
			ctx, cancel := context.WithDeadline(context.Background(), now().Add(time.Minute))
			defer cancel()
			res, err := p.Run(ctx, b) // the mapping: 1, 3, 4 done, 2 failed once
			if err != nil || res.LowestFailedSeq != seq(2) || res.FailedAttempts != 1 {
				t.Fatalf("mapping run: %+v, %v", res, err)
			}

			failing.Store(false)
			clock.Add(int64(tt.after))
			replay := b
			replay.Source, replay.AdvanceCheckpoint = pipeline.SourceReconciler, false
			if tt.yield > 0 {
				replay.MappingSettled = now().Add(-tt.yield)
			}
			ctx2, cancel2 := context.WithDeadline(context.Background(), now().Add(time.Minute))
			defer cancel2()
			res, err = p.Run(ctx2, replay)
			if err != nil {
				t.Fatal(err)
			}
			if tt.held {
				if calls.Load() != 1 || res.InFlightSkipped != 1 || res.FailedAttempts != 0 || res.LowestFailedSeq != seq(2) {
					t.Errorf("replay ran a record the mapping is retrying: %d calls, %+v", calls.Load(), res)
				}
				if len(res.Failures) != 1 || !errors.Is(res.Failures[0].Err, pipeline.ErrInFlight) {
					t.Errorf("failures %+v, want record 2 held in flight", res.Failures)
				}
				return
			}
			if calls.Load() != 2 || res.Processed != 1 || res.LowestFailedSeq != "" {
				t.Errorf("replay did not run record 2: %d calls, %+v", calls.Load(), res)
			}
		})
	}
}

// TestMappingRunWaitsForAnEarlierRun: a second mapping (a mapping being replaced) runs the same
// records while the first is inside Process, in a batch reaching further (so the lane rule does
// not take the first run for dead). The second run waits inside its invocation for the
// first run's marker instead of failing the held records at once (which costs the mapping one
// of its MaximumRetryAttempts per retry, milliseconds apart), finds them done and skips them:
// nothing fails, nothing runs twice. With WithHeldWait(0) it fails them held, as before.
func TestMappingRunWaitsForAnEarlierRun(t *testing.T) {
	for _, tt := range []struct {
		name string
		wait time.Duration
		held bool
	}{
		{"waits", pipeline.DefaultHeldWait, false},
		{"no wait", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var calls atomic.Int64
			process := func(ctx context.Context, r pipeline.Record) error {
				calls.Add(1)
				if r.ID.Seq == seq(1) {
					once.Do(func() { close(entered) })
					<-release
				}
				return nil
			}
			c := cfg()
			c.MaxConcurrency = 1
			p := e.pipeline(t, process, c, pipeline.WithHeldWait(tt.wait))
			a, b := batch(4, oneKey), batch(6, oneKey) // B's batch is not inside A's range: the lane rule does not apply
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			aDone := make(chan error, 1)
			go func() {
				_, err := p.Run(ctx, a)
				aDone <- err
			}()
			<-entered
			time.Sleep(5 * time.Millisecond) // B starts after A (markers compare milliseconds)
			go func() {
				time.Sleep(300 * time.Millisecond) // A finishes while B runs
				close(release)
			}()
			res, err := p.Run(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-aDone; err != nil {
				t.Fatal(err)
			}
			if tt.held {
				if res.InFlightSkipped != 6 || res.LowestFailedSeq != seq(1) {
					t.Errorf("B without a wait: %+v, want A's 4 records and the 2 of their key after them held", res)
				}
				return
			}
			if res.LowestFailedSeq != "" || res.Failed != 0 || res.DuplicatesSkipped != 4 || res.Processed != 2 || calls.Load() != 6 {
				t.Errorf("B: %+v, %d Process calls; want A's 4 records skipped as done, 5 and 6 processed, each run once", res, calls.Load())
			}
		})
	}
}

// TestReplayYieldsToTheWholeMappingBatch: a mapping run names in its marker only the records it
// attempts; the rest of its batch (here record 3, not started) is retried by the mapping too,
// so a replay leaves the marker's whole range to it, not only the ids it names.
func TestReplayYieldsToTheWholeMappingBatch(t *testing.T) {
	e := newEnv()
	now := time.Now()
	var calls atomic.Int64
	p := e.pipeline(t, func(context.Context, pipeline.Record) error { calls.Add(1); return nil }, cfg(),
		pipeline.WithClock(func() time.Time { return now }))
	m := pipeline.Marker{Nonce: "mapping", First: seq(1), Last: seq(4), IDs: []recordid.ID{id(1)},
		Started: now.Add(-time.Second), Deadline: now.Add(9 * time.Second), Source: pipeline.SourceConsumer}
	if err := e.ledger.Mark(context.Background(), shard, m); err != nil {
		t.Fatal(err)
	}
	res := runReplay(t, p, 6, now.Add(-5*time.Second))
	if res.InFlightSkipped != 4 || res.Processed != 2 || calls.Load() != 2 || res.LowestFailedSeq != seq(1) {
		t.Errorf("replay: %+v, %d calls; want 1..4 (the mapping batch's range) held, 5 and 6 processed", res, calls.Load())
	}
}

// TestReplayYieldsToADeadMappingRun: a mapping run that hung until its function timeout leaves
// a marker whose deadline is the invocation's own (the lease was capped by it), so the deadline
// less the lease is the run's start although the run lived until the deadline. The mapping
// retries the batch only once the invocation has timed out and a new sandbox has started: a
// replay inside that gap that runs the records holds the mapping's retry (which then fails
// held and costs one of its MaximumRetryAttempts) and parks the killer the mapping was
// isolating. A replay yields until MappingSettled is past the dead run's deadline plus
// DeadGrace, and runs the records after it.
func TestReplayYieldsToADeadMappingRun(t *testing.T) {
	const lease, settle = 10 * time.Second, 5 * time.Second
	for _, tt := range []struct {
		name  string
		after time.Duration // replay start after the dead run's deadline
		held  bool
	}{
		{"just after the deadline", 500 * time.Millisecond, true},
		{"inside grace and settle", pipeline.DeadGrace + settle - time.Second, true},
		{"after grace and settle", pipeline.DeadGrace + settle + time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			now := time.Now()
			var calls atomic.Int64
			p := e.pipeline(t, func(context.Context, pipeline.Record) error { calls.Add(1); return nil }, cfg(),
				pipeline.WithClock(func() time.Time { return now }), pipeline.WithMarkerLease(lease))
			deadline := now.Add(-tt.after)
			m := pipeline.Marker{Nonce: "hung", First: seq(1), Last: seq(4), IDs: []recordid.ID{id(1), id(2), id(3), id(4)},
				Started: deadline.Add(-lease), Deadline: deadline, Source: pipeline.SourceConsumer}
			if err := e.ledger.Mark(context.Background(), shard, m); err != nil {
				t.Fatal(err)
			}
			res := runReplay(t, p, 4, now.Add(-settle))
			if tt.held {
				if calls.Load() != 0 || res.InFlightSkipped != 4 || res.FailedAttempts != 0 {
					t.Errorf("replay ran the records of a run the mapping has yet to retry: %d calls, %+v", calls.Load(), res)
				}
				return
			}
			if res.InFlightSkipped != 0 || res.DeadMarkers != 1 {
				t.Errorf("after the window: %+v, want the dead run counted, nothing held", res)
			}
		})
	}
}

// TestReplayYieldsUntilTheMappingRunEnded: a mapping run of a 10 s invocation (its marker's
// deadline is the invocation's, so the deadline less the lease is its start) spends 8 s on a
// record that fails (a hang abandoned at the deadline, here the clock moved by Process). The
// mapping retries the batch once the run has answered, at its end, not at its start: a replay
// inside the settle window after that end holds the retry, so the replay measures the window
// from the run's entry (MarkerState.CompletedAt), not from the deadline less the lease.
func TestReplayYieldsUntilTheMappingRunEnded(t *testing.T) {
	const lease, settle, ran = 10 * time.Second, 5 * time.Second, 8 * time.Second
	for _, tt := range []struct {
		name  string
		after time.Duration // replay start after the mapping run's end
		held  bool
	}{
		{"just after the run", 500 * time.Millisecond, true},
		{"inside the window", settle - time.Second, true},
		{"after the window", settle + time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			var clock atomic.Int64
			clock.Store(time.Now().UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			e.ledger.Now = now
			var failing atomic.Bool
			failing.Store(true)
			var calls atomic.Int64
			process := func(ctx context.Context, r pipeline.Record) error {
				if r.ID.Seq != seq(2) {
					return nil
				}
				calls.Add(1)
				if failing.Load() {
					clock.Add(int64(ran))
					return errors.New("hung until the deadline")
				}
				return nil
			}
			p := e.pipeline(t, process, cfg(), pipeline.WithClock(now), pipeline.WithMarkerLease(lease))
			b := batch(4, func(i int) string { return fmt.Sprint("k", i) })
			ctx, cancel := context.WithDeadline(context.Background(), now().Add(lease)) // the invocation's 10 s
			defer cancel()
			res, err := p.Run(ctx, b)
			if err != nil || res.LowestFailedSeq != seq(2) {
				t.Fatalf("mapping run: %+v, %v", res, err)
			}
			failing.Store(false)
			clock.Add(int64(tt.after))
			replay := b
			replay.Source, replay.AdvanceCheckpoint, replay.MappingSettled = pipeline.SourceReconciler, false, now().Add(-settle)
			ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
			defer cancel2()
			res, err = p.Run(ctx2, replay)
			if err != nil {
				t.Fatal(err)
			}
			if tt.held {
				if calls.Load() != 1 || res.InFlightSkipped != 1 || res.FailedAttempts != 0 {
					t.Errorf("replay ran a record the mapping is about to retry: %d calls, %+v", calls.Load(), res)
				}
				return
			}
			if calls.Load() != 2 || res.Processed != 1 || res.LowestFailedSeq != "" {
				t.Errorf("after the window the replay did not run record 2: %d calls, %+v", calls.Load(), res)
			}
		})
	}
}

// TestReplayYieldNeverOutlastsTheDeadline: the end a completed marker's entry claims is a
// claim: a run ends by its deadline, so an entry stamped an hour ahead (a writer's clock far
// off, or a time written by someone else) holds a replay no longer than the marker's deadline
// plus DeadGrace and the settle window.
func TestReplayYieldNeverOutlastsTheDeadline(t *testing.T) {
	const settle = 5 * time.Second
	e := newEnv()
	now := time.Now()
	e.ledger.Now = func() time.Time { return now.Add(time.Hour) }
	var calls atomic.Int64
	p := e.pipeline(t, func(context.Context, pipeline.Record) error { calls.Add(1); return nil }, cfg(),
		pipeline.WithClock(func() time.Time { return now }))
	m := pipeline.Marker{Nonce: "skewed", First: seq(1), Last: seq(4), IDs: []recordid.ID{id(1)},
		Started: now.Add(-20 * time.Second), Deadline: now.Add(-10 * time.Second), Source: pipeline.SourceConsumer}
	if err := e.ledger.Mark(context.Background(), shard, m); err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.Record(context.Background(), shard, pipeline.Entry{First: seq(1), Last: seq(4), Failed: []recordid.ID{id(1)},
		Source: pipeline.SourceConsumer, Nonce: "skewed"}); err != nil {
		t.Fatal(err)
	}
	res := runReplay(t, p, 4, now.Add(-settle))
	if res.InFlightSkipped != 0 || calls.Load() != 4 || res.Processed != 4 {
		t.Errorf("replay: %+v, %d calls; want the records run: the run's deadline is 10 s past, beyond grace and settle", res, calls.Load())
	}
}

// runReplay runs a reconciler replay of records 1..n (one key each) with the given
// MappingSettled and returns its result.
func runReplay(t *testing.T, p *pipeline.Pipeline, n int, settled time.Time) pipeline.Result {
	t.Helper()
	replay := batch(n, func(i int) string { return fmt.Sprint("k", i) })
	replay.Source, replay.AdvanceCheckpoint, replay.MappingSettled = pipeline.SourceReconciler, false, settled
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := p.Run(ctx, replay)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestReplayYieldNeverEndsBeforeTheLastRenewal: an entry stamped an hour early (a writer's
// clock behind, or a time written by someone else) releases no record earlier than the
// marker's deadline less the lease (its last renewal) would: the run renewed its marker 3 s
// ago, inside the settle window, so the replay still leaves its records to the mapping.
func TestReplayYieldNeverEndsBeforeTheLastRenewal(t *testing.T) {
	const lease, settle = 10 * time.Second, 5 * time.Second
	e := newEnv()
	now := time.Now()
	e.ledger.Now = func() time.Time { return now.Add(-time.Hour) }
	var calls atomic.Int64
	p := e.pipeline(t, func(context.Context, pipeline.Record) error { calls.Add(1); return nil }, cfg(),
		pipeline.WithClock(func() time.Time { return now }), pipeline.WithMarkerLease(lease))
	m := pipeline.Marker{Nonce: "behind", First: seq(1), Last: seq(4), IDs: []recordid.ID{id(1)},
		Started: now.Add(-20 * time.Second), Deadline: now.Add(-3*time.Second + lease), Source: pipeline.SourceConsumer}
	if err := e.ledger.Mark(context.Background(), shard, m); err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.Record(context.Background(), shard, pipeline.Entry{First: seq(1), Last: seq(4), Failed: []recordid.ID{id(1)},
		Source: pipeline.SourceConsumer, Nonce: "behind"}); err != nil {
		t.Fatal(err)
	}
	res := runReplay(t, p, 4, now.Add(-settle))
	if res.InFlightSkipped != 4 || calls.Load() != 0 {
		t.Errorf("replay: %+v, %d calls; want 1..4 held: the run renewed its marker 3 s ago, inside the settle window", res, calls.Load())
	}
}
