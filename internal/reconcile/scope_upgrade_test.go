package reconcile

import (
	"context"
	"crypto/md5"
	"fmt"
	"testing"
	"time"
)

// TestLatestScopeOfAGroupAlreadyRunning: StartingPosition LATEST on a group whose mapping was
// running before the reconciler first recorded a scope start (a reconciler upgraded to the
// version that records it, or a first pass late after the deployment). The mapping consumed
// the parent (its checkpoint proves the mapping was there), the stream was split, and the
// mapping gave up every batch of one child (G: no checkpoint); the first pass of the new
// reconciler comes after G arrived, while G is still young. A child whose parents the mapping
// consumed to their end was the mapping's from its start whatever the starting position, so G
// must be replayed once it is older than TailAfter. With the scope start at the first pass's
// clock the child was read from it, after G: G was never replayed, nor counted (the code before
// the scope start replayed it).
func TestLatestScopeOfAGroupAlreadyRunning(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	parent := s.shardIDs()[0]
	a := s.putN(6, "A", keyMod(3), nil)
	s.consume(s.pipeline(newRecorder().process, 3), a) // the mapping consumed the parent
	given, kept := s.splitInHalves(parent, 16, "C")
	s.consume(s.pipeline(newRecorder().process, 3), kept) // the sibling consumed; given: every batch given up

	// The new reconciler's first pass, now: G is younger than TailAfter (10m + 30m).
	rec := newRecorder()
	clk := &clock{t: time.Now()}
	cfg := Config{MaxRecordAge: 10 * time.Minute, StartingPosition: StartLatest}
	r := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.counts()); n != 0 {
		t.Fatalf("first pass processed %d records, want none (G is young)", n)
	}
	// Passes an hour later: G is due.
	clk.set(time.Now().Add(time.Hour))
	for range 3 {
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	checkOnce(t, "reconciler", rec.counts(), idsOf(given))
}

// keyOnShard returns n partition keys whose MD5 hash lands in the lower (low) or upper half of
// the hash key range: on a two-shard stream, all on one shard (Kinesis maps a record to the
// shard whose hash key range holds the MD5 of its partition key, as a 128-bit integer).
func keyOnShard(n int, low bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("k-%d", i)
		if sum := md5.Sum([]byte(k)); (sum[0] < 0x80) == low {
			out = append(out, k)
		}
	}
	return out
}

// TestLatestScopeStartsAtTheEarliestCheckpoint: StartingPosition LATEST, a group whose mapping
// has been running (shard X checkpointed) before the reconciler first records a scope start
// (an upgrade to the version that records it, or a first pass late after the deployment). The
// mapping gave up every batch of shard Y after X's checkpoint (G: no checkpoint). The
// checkpoint proves the mapping ran since then, so G is in scope and replayed once due. With
// the scope start at the first pass's clock G lay before it: never replayed nor counted, a
// window as long as the group had run, not "at most one schedule period".
func TestLatestScopeStartsAtTheEarliestCheckpoint(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2)
	s.waitActive()
	xKeys, yKeys := keyOnShard(3, true), keyOnShard(4, false)
	x := s.putN(3, "X", func(i int) string { return xKeys[i] }, nil)
	s.consume(s.pipeline(newRecorder().process, 3), x) // the mapping consumed shard X
	g := s.putN(4, "G", func(i int) string { return yKeys[i] }, nil)
	if g[0].shard == x[0].shard {
		t.Fatalf("keys landed on one shard %s: the setup did not happen", g[0].shard)
	}

	rec := newRecorder()
	clk := &clock{t: time.Now()}
	cfg := Config{MaxRecordAge: 10 * time.Minute, StartingPosition: StartLatest}
	r := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	if _, err := r.Run(context.Background()); err != nil { // the first pass: G is young
		t.Fatal(err)
	}
	scope := s.state(g[0].shard).ScopeFrom
	if cp := s.state(x[0].shard).CheckpointAt; !scope.Equal(cp) {
		t.Errorf("scope start %v, want the earliest checkpoint's time %v", scope, cp)
	}
	clk.set(time.Now().Add(time.Hour))
	for range 2 {
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	checkOnce(t, "reconciler", rec.counts(), idsOf(g))
}
