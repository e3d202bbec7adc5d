package reconcile

import (
	"context"
	"testing"
	"time"
)

// TestLatestScopeOfADrainedParent: StartingPosition LATEST, a shard the mapping never
// checkpointed that is drained (a child has a checkpoint: the mapping moved past it). B was
// written to the original shard before the group's scope start (the first pass records it);
// G arrived after it on the same shard and the mapping gave it up (no checkpoint); then the
// shard was split and the mapping consumed the children (checkpoints). A drained shard is walked
// whole, but under LATEST only from the scope start: G is replayed once, B, never the mapping's,
// never (on the old code the drained parent was read from its StartingSequenceNumber and B was
// replayed: records the user never asked for).
func TestLatestScopeOfADrainedParent(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	parent := s.shardIDs()[0]
	b := s.putN(6, "B", keyMod(3), nil)
	lastB := s.lastArrival(parent, b)
	rec := newRecorder()
	clk := &clock{t: lastB.Add(time.Millisecond)}
	cfg := Config{MaxRecordAge: 10 * time.Minute, StartingPosition: StartLatest}
	r := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	scope := s.state(parent).ScopeFrom
	if scope.IsZero() {
		t.Fatal("the first pass recorded no scope start")
	}

	g := s.putN(4, "G", keyMod(3), nil) // given up by the mapping: never consumed
	arr := s.arrivals(parent)
	for _, p := range g {
		if !arr[p.seq].After(scope) {
			t.Fatalf("record G %s arrived %v, not after the scope start %v: the setup did not happen", p.seq, arr[p.seq], scope)
		}
	}
	c1, c2 := s.splitInHalves(parent, 16, "C")
	cons := s.pipeline(newRecorder().process, 3)
	for _, kid := range [][]put{c1, c2} {
		s.consume(cons, kid) // the mapping consumed each child: checkpoints
	}
	if st := s.state(parent); st.Checkpoint != "" {
		t.Fatalf("parent checkpoint %q, want none", st.Checkpoint)
	}

	// Fresh reconciler an hour later: everything is past settle and TailAfter (10m + 30m).
	clk.set(time.Now().Add(time.Hour))
	r2 := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	for range 3 {
		if _, err := r2.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	counts := rec.counts()
	for _, p := range b {
		if n := counts[p.id()]; n != 0 {
			t.Errorf("record B %s (before the scope start) processed %d times, want never", p.seq, n)
		}
	}
	checkOnce(t, "reconciler", counts, idsOf(g))
	st := s.state(parent)
	if !st.Closed {
		t.Errorf("parent not marked closed after the passes")
	}
	if !st.ScopeFrom.Equal(scope) {
		t.Errorf("scope start moved from %v to %v", scope, st.ScopeFrom)
	}
}
