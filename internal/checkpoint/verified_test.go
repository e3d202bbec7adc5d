package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestVerifiedAsOfFollowsTheLastWalk: SetVerifiedAsOf creates the item, the last value wins
// (an earlier one too: a later walk may find an older record unverified), and it reads back
// through Get and List beside a checkpoint.
func TestVerifiedAsOfFollowsTheLastWalk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	first := time.Date(2026, 12, 2, 12, 0, 0, 123456789, time.UTC)
	last := first.Add(-time.Hour)
	for _, at := range []time.Time{first, first.Add(time.Hour), last} {
		if err := store.SetVerifiedAsOf(ctx, shard, at); err != nil {
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
	if !st.VerifiedAsOf.Equal(last) || st.Checkpoint != seq56a {
		t.Errorf("Get: verified-as-of %v checkpoint %q, want %v and %s", st.VerifiedAsOf, st.Checkpoint, last, seq56a)
	}
	all, err := store.List(ctx, shard.Group, shard.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || !all[0].VerifiedAsOf.Equal(last) {
		t.Errorf("List: %+v, want one shard verified as of %v", all, last)
	}
	if err := store.SetVerifiedAsOf(ctx, shard, time.Time{}); err == nil {
		t.Error("a zero time was accepted")
	}
}
