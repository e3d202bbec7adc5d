package reconcile

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/metrics"
)

// TestShardLags: a shard with an unverified record reports its age, a caught-up shard 0, a
// deferred shard with nothing behind a checkpoint 0, a deferred shard whose walk knows where it
// stopped its age from there, a deferred shard not walked its age from UnverifiedSince.
func TestShardLags(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rep := Report{Shards: []ShardReport{
		{ShardID: "shardId-000000000000", OldestUnverified: now.Add(-90 * time.Second)},
		{ShardID: "shardId-000000000001"},
		{ShardID: "shardId-000000000002", Deferred: true},
		{ShardID: "shardId-000000000003", Deferred: true, OldestUnverified: now.Add(-time.Hour)},
		{ShardID: "shardId-000000000004", Deferred: true, UnverifiedSince: now.Add(-2 * time.Hour)},
	}}
	got := shardLags(rep, now)
	want := []shardLag{{"shardId-000000000000", 90 * time.Second}, {"shardId-000000000001", 0}, {"shardId-000000000002", 0},
		{"shardId-000000000003", time.Hour}, {"shardId-000000000004", 2 * time.Hour}}
	if !slices.Equal(got, want) {
		t.Errorf("shardLags %v, want %v", got, want)
	}
}

// TestEmitShardLagsLines: one EMF line per shard, deferred ones included, dimensions Group and
// ShardId.
func TestEmitShardLagsLines(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	h := &Handler{r: &Reconciler{now: func() time.Time { return now }}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		emit: metrics.New(&buf, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: "g"}})}
	h.emitShardLags(Report{Shards: []ShardReport{
		{ShardID: "shardId-000000000000", OldestUnverified: now.Add(-time.Minute)},
		{ShardID: "shardId-000000000001", Deferred: true, UnverifiedSince: now.Add(-time.Hour)},
	}})
	sc := bufio.NewScanner(&buf)
	var lines []metrics.Line
	for sc.Scan() {
		l, err := metrics.Parse(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0].Dimensions[metrics.DimensionShard] != "shardId-000000000000" || lines[0].Dimensions[metrics.DimensionGroup] != "g" ||
		lines[0].Values[MetricVerifiedLag] != 60 || lines[1].Dimensions[metrics.DimensionShard] != "shardId-000000000001" || lines[1].Values[MetricVerifiedLag] != 3600 {
		t.Errorf("lines %+v", lines)
	}
}
