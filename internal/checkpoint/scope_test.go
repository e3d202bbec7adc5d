package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestScopeFromIsWrittenOnce: SetScopeFrom creates the item, the first value stays (a later
// or earlier one does not move it), and it reads back through Get and List beside a checkpoint.
func TestScopeFromIsWrittenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	first := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for _, at := range []time.Time{first, first.Add(time.Hour), first.Add(-time.Hour)} {
		if err := store.SetScopeFrom(ctx, shard, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Advance(ctx, shard, seq56a); err != nil {
		t.Fatal(err)
	}
	st, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if !st.ScopeFrom.Equal(first) || st.Checkpoint != seq56a {
		t.Errorf("Get: scope %v checkpoint %q, want %v and %s", st.ScopeFrom, st.Checkpoint, first, seq56a)
	}
	all, err := store.List(ctx, shard.Group, shard.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || !all[0].ScopeFrom.Equal(first) {
		t.Errorf("List: %+v, want one shard with scope %v", all, first)
	}
	if err := store.SetScopeFrom(ctx, shard, time.Time{}); err == nil {
		t.Error("a zero time was accepted")
	}
}
