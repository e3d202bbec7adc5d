package checkpoint_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestCountLoss: the count of a lost span is written with the watermark advance that passes it,
// exactly once, whatever happens to the response.
func TestCountLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	direct := checkpoint.New(stacktest.DynamoDB(t), table)

	cases := []struct {
		name         string
		rules        []faultproxy.Rule
		stored       string // watermark already stored before the call ("" none)
		after        string // the watermark the span follows, as the caller read it (default stored)
		wantAdvanced bool
		wantLost     int64
		wantErr      bool
	}{
		{name: "fresh item", wantAdvanced: true, wantLost: 1},
		{name: "behind the offered value", stored: seq56a, wantAdvanced: true, wantLost: 1},
		{name: "lost race: another writer passed it", stored: seq56a, after: "-", wantLost: 0},
		// The update is applied, its response is lost, the SDK's retry
		// fails the condition. The write is this caller's: Advanced, counted once.
		{name: "response dropped once", rules: []faultproxy.Rule{{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1}},
			wantAdvanced: true, wantLost: 1},
		{name: "response dropped twice", rules: []faultproxy.Rule{{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 2}},
			wantAdvanced: true, wantLost: 1},
		// Applied by the first attempt, no attempt answered: the store reads its token back.
		{name: "every response dropped", rules: []faultproxy.Rule{{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropAfterForward, Rate: 1}},
			wantAdvanced: true, wantLost: 1},
		// Never forwarded: nothing happened, the caller sees an error and counts nothing.
		{name: "never reached the table", rules: []faultproxy.Rule{{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropBeforeForward, Rate: 1}},
			wantErr: true, wantLost: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, p := proxiedStore(t, table, 3, 1)
			shard := newShard(t)
			if tc.stored != "" {
				if _, err := direct.AdvanceWatermark(ctx, shard, tc.stored); err != nil {
					t.Fatal(err)
				}
			}
			p.SetRules(tc.rules...)
			after := tc.stored
			if tc.after == "-" {
				after = ""
			}
			res, err := store.CountLoss(ctx, shard, checkpoint.Loss{After: after, To: seq56b})
			if (err != nil) != tc.wantErr || res.Advanced != tc.wantAdvanced {
				t.Fatalf("res %+v err %v; want advanced %v, error %v", res, err, tc.wantAdvanced, tc.wantErr)
			}
			st, err := direct.Get(ctx, shard)
			if tc.wantErr && tc.stored == "" {
				if err == nil {
					t.Fatalf("state %+v after a write that never reached the table", st)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.LostToRetention != tc.wantLost {
				t.Errorf("lostToRetention %d, want %d", st.LostToRetention, tc.wantLost)
			}
			if tc.wantAdvanced && st.Watermark != seq56b {
				t.Errorf("watermark %s, want %s", st.Watermark, seq56b)
			}
		})
	}
}

// TestCountLossRace: many writers count the same span, after the same watermark, some passing it
// to different records and some counting it in place; exactly one counts it.
func TestCountLossRace(t *testing.T) {
	t.Parallel()
	requireAtomicItemWrites(t)
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	advanced := 0
	for i := range 9 {
		to := []string{"", seq56a, seq56b}[i%3]
		wg.Go(func() {
			res, err := store.CountLoss(ctx, shard, checkpoint.Loss{To: to})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Advanced {
				mu.Lock()
				advanced++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if advanced != 1 || st.LostToRetention != 1 {
		t.Errorf("%d callers reported the advance, lostToRetention %d; want 1 and 1", advanced, st.LostToRetention)
	}
}

// TestCountLossInPlaceThenPassed: a span counted in place (nothing held after it) is not counted
// again, in place or by the advance that later passes it, and that advance is left to
// AdvanceWatermark.
func TestCountLossInPlaceThenPassed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	if _, err := store.AdvanceWatermark(ctx, shard, seq56a); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		l    checkpoint.Loss
		want bool
	}{
		{checkpoint.Loss{After: seq56a}, true},
		{checkpoint.Loss{After: seq56a}, false},
		{checkpoint.Loss{After: seq56a, To: seq56b}, false},
	}
	for i, st := range steps {
		res, err := store.CountLoss(ctx, shard, st.l)
		if err != nil || res.Advanced != st.want {
			t.Fatalf("step %d %+v: %+v %v, want advanced %v", i, st.l, res, err, st.want)
		}
	}
	got, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if got.LostToRetention != 1 || got.Watermark != seq56a {
		t.Errorf("lostToRetention %d watermark %s; want 1 and %s (unmoved)", got.LostToRetention, got.Watermark, seq56a)
	}
	if _, err := store.CountLoss(ctx, shard, checkpoint.Loss{After: seq56b, To: seq56a}); err == nil {
		t.Error("a move to or below the span's start was accepted")
	}
}

// TestSetEmptyThrough: progress through empty pages is kept only for the stored watermark and
// only forward.
func TestSetEmptyThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		name string
		e    checkpoint.EmptyThrough
		want bool
	}{
		{"no watermark yet", checkpoint.EmptyThrough{Through: t0}, true},
		{"backwards", checkpoint.EmptyThrough{Through: t0.Add(-time.Second)}, false},
		{"forward", checkpoint.EmptyThrough{Through: t0.Add(time.Minute)}, true},
		{"after a watermark not stored", checkpoint.EmptyThrough{After: seq56a, Through: t0.Add(time.Hour)}, false},
	}
	for _, st := range steps {
		ok, err := store.SetEmptyThrough(ctx, shard, st.e)
		if err != nil || ok != st.want {
			t.Fatalf("%s: %v %v, want %v", st.name, ok, err, st.want)
		}
	}
	got, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := got.EmptyThroughFor(); !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("kept %v %v, want %v", at, ok, t0.Add(time.Minute))
	}
	if _, err := store.AdvanceWatermark(ctx, shard, seq56a); err != nil {
		t.Fatal(err)
	}
	if got, err = store.Get(ctx, shard); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.EmptyThroughFor(); ok {
		t.Error("progress kept for an earlier watermark still applies after the watermark moved")
	}
	if ok, err := store.SetEmptyThrough(ctx, shard, checkpoint.EmptyThrough{After: seq56a, Through: t0}); err != nil || !ok {
		t.Errorf("new watermark, earlier time: %v %v, want written", ok, err)
	}
}

// TestCountLossDone: a span proven done is counted in expiredUnverified, not lostToRetention,
// with the same watermark move and the same once-only identity: a later count of the span, as
// a loss or as done, is not applied.
func TestCountLossDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	if _, err := store.AdvanceWatermark(ctx, shard, seq56a); err != nil {
		t.Fatal(err)
	}
	res, err := store.CountLoss(ctx, shard, checkpoint.Loss{After: seq56a, To: seq56b, Done: true})
	if err != nil || !res.Advanced {
		t.Fatalf("res %+v err %v; want advanced", res, err)
	}
	for _, done := range []bool{true, false} {
		if res, err := store.CountLoss(ctx, shard, checkpoint.Loss{After: seq56a, Done: done}); err != nil || res.Advanced {
			t.Errorf("second count (done %v): res %+v err %v; want not applied", done, res, err)
		}
	}
	st, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExpiredUnverified != 1 || st.LostToRetention != 0 || st.Watermark != seq56b {
		t.Errorf("expiredUnverified %d lostToRetention %d watermark %s; want 1, 0, %s", st.ExpiredUnverified, st.LostToRetention, st.Watermark, seq56b)
	}
}
