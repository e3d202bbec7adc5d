package reconcile

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// runBounded runs one pass and fails the test when it does not return within a minute (a pass
// stuck behind a hanging record).
func runBounded(t *testing.T, r *Reconciler, passTime time.Duration) Report {
	t.Helper()
	type result struct {
		rep Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), passTime)
		defer cancel()
		rep, err := r.Run(ctx)
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatalf("Run: %v", res.err)
		}
		return res.rep
	case <-time.After(time.Minute):
		t.Fatal("the pass did not return: one hanging record stopped it")
		return Report{}
	}
}

// frozenReplayer freezes the whole replay of a batch holding one record, ignoring its context:
// a runtime frozen mid-call, which the pipeline's own deadline handling (it stops waiting for a
// hung Process) cannot end because the pipeline itself is what hangs.
type frozenReplayer struct {
	Replayer
	shardID, seq string
	release      chan struct{}
}

func (f frozenReplayer) Run(ctx context.Context, b pipeline.Batch) (pipeline.Result, error) {
	for _, r := range b.Records {
		if r.ID.ShardID == f.shardID && r.ID.Seq == f.seq {
			<-f.release
		}
	}
	return f.Replayer.Run(ctx, b)
}

// TestStuckShardDoesNotStopOthers: a replay that freezes on a record of the first shard,
// ignoring its context, costs that shard its time budget; the second shard is still verified in
// the same pass, and the next pass starts with the shard after the stuck one.
func TestStuckShardDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	now := time.Now()
	first := (&memShard{id: "shardId-0"}).addRecords(0, 6, now, key3)
	second := (&memShard{id: "shardId-1"}).addRecords(100, 6, now, key3)
	cfg := Config{MinShardTime: 300 * time.Millisecond, DeadlineMargin: time.Second}
	u := newUnit(t, newMemKinesis(first, second), cfg)
	u.cps.Set(ushard(first.id), fakeSeq(5), "")
	u.cps.Set(ushard(second.id), fakeSeq(105), "")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	p, err := pipeline.New(u.ledger, &pipelinetest.Checkpoint{}, u.parker, u.rec.process, pipeline.Config{MaxRecordAttempts: 2, MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Group, cfg.Stream, cfg.ReadInterval, cfg.PageLimit = ugroup, ustream, time.Microsecond, 4
	if u.r, err = New(u.kin, u.cps, frozenReplayer{Replayer: p, shardID: first.id, seq: fakeSeq(2), release: release}, cfg,
		WithClock(later), WithLogger(discard())); err != nil {
		t.Fatal(err)
	}
	u.r.setCursor(first.id) // the killer's shard comes first

	rep := runBounded(t, u.r, 4*time.Second)
	if got := u.cps.State(second.id).Watermark; got != fakeSeq(105) {
		t.Fatalf("second shard's watermark %q, want its checkpoint %s: not verified while the first hangs", got, fakeSeq(105))
	}
	var order []string
	for _, s := range rep.Shards {
		order = append(order, s.ShardID)
		if s.ShardID == first.id && !s.Stuck {
			t.Errorf("first shard reported %+v, want Stuck", s)
		}
		if s.ShardID == second.id && (s.Stuck || !s.Complete) {
			t.Errorf("second shard reported %+v, want Complete", s)
		}
	}
	if !slices.Equal(order, []string{first.id, second.id}) {
		t.Fatalf("pass order %v", order)
	}
	if got := u.cps.State(first.id).Watermark; got != "" && seqnum.Compare(got, fakeSeq(2)) >= 0 {
		t.Fatalf("first shard's watermark %s passed the hanging record", got)
	}

	// The next pass walks the shard after the stuck one first.
	second.addRecords(106, 2, now, key3)
	u.cps.Set(ushard(second.id), fakeSeq(107), fakeSeq(105))
	rep = runBounded(t, u.r, 4*time.Second)
	if len(rep.Shards) != 2 || rep.Shards[0].ShardID != second.id || !rep.Shards[1].Stuck {
		t.Fatalf("second pass %+v: want %s first and %s stuck again", rep.Shards, second.id, first.id)
	}
	if got := u.cps.State(second.id).Watermark; got != fakeSeq(107) {
		t.Fatalf("second pass: watermark %q, want %s", got, fakeSeq(107))
	}
}

// TestPassOrderKeepsParentsFirst: whatever shard a pass starts with (a cursor, or the clock on
// a cold start), every parent comes before its children and every shard appears once.
func TestPassOrderKeepsParentsFirst(t *testing.T) {
	t.Parallel()
	shards := []shardInfo{
		{id: "d", parents: []string{"b", "c"}},
		{id: "b", parents: []string{"a"}, endingSeq: "9"},
		{id: "c", parents: []string{"a"}, endingSeq: "9"},
		{id: "a", endingSeq: "9"},
		{id: "e"},
		{id: "f", parents: []string{"gone"}},
	}
	check := func(t *testing.T, order []shardInfo) {
		t.Helper()
		var ids []string
		for _, s := range order {
			ids = append(ids, s.id)
		}
		pos := func(id string) int { return slices.Index(ids, id) }
		for _, edge := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}} {
			if pos(edge[0]) > pos(edge[1]) {
				t.Errorf("order %v: %s after its child %s", ids, edge[0], edge[1])
			}
		}
		sorted := slices.Sorted(slices.Values(ids))
		if !slices.Equal(sorted, []string{"a", "b", "c", "d", "e", "f"}) {
			t.Errorf("order %v: want every shard once", ids)
		}
	}
	starts := map[string]bool{}
	for _, cursor := range []string{"a", "b", "c", "d", "e", "f", "zz", "0"} {
		r := &Reconciler{now: time.Now}
		r.setCursor(cursor)
		order := r.passOrder(shards)
		check(t, order)
		starts[order[0].id] = true
	}
	if !starts["e"] || !starts["f"] {
		t.Errorf("cursors on e and f did not start passes there: starts %v", starts)
	}
	// Cold starts: the clock picks the start; over many minutes every root shard leads once.
	cold := map[string]bool{}
	for m := range 200 {
		at := time.Unix(int64(m)*60, 0)
		r := &Reconciler{now: func() time.Time { return at }}
		order := r.passOrder(shards)
		check(t, order)
		cold[order[0].id] = true
	}
	for _, root := range []string{"a", "e", "f"} {
		if !cold[root] {
			t.Errorf("no cold start led with %s: %v", root, cold)
		}
	}
}
