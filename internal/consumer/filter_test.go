package consumer

import (
	"testing"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestFilteredRecordsAreNotProcessed: a record the record filter drops that reaches the
// function anyway (a mapping without the FilterCriteria) is not processed and not failed; the
// others are processed as usual.
func TestFilteredRecordsAreNotProcessed(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "filtered")
	em := metrics.New(r.metrics, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: r.group}})
	f := filter.MustParse(`{"data": {"id": [{"anything-but": ["order-0004", "order-0010"]}]}}`)
	r.h = NewHandler(r.h.pipeline, r.group, r.h.log, WithMetrics(em), WithFilter(f))

	resp, err := r.invoke(t, fixture(t, fixtures.Clean))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != "" {
		t.Fatalf("reported failure %q, want none", got)
	}
	for i := range 10 {
		want := 1
		if i == 3 || i == 9 {
			want = 0
		}
		if got := r.proc.count(ids(fixtures.Seq(i))[0]); got != want {
			t.Errorf("record %d processed %d times, want %d", i, got, want)
		}
	}
	var filtered, processed float64
	for _, ln := range r.metrics.jsonLines(t) {
		if v, ok := ln[MetricRecordsFiltered].(float64); ok {
			filtered += v
		}
		if v, ok := ln[MetricRecordsProcessed].(float64); ok {
			processed += v
		}
	}
	if filtered != 2 || processed != 8 {
		t.Errorf("metrics: %v filtered, %v processed; want 2 and 8", filtered, processed)
	}
}

// TestFilterJudgesUserRecordsOfAnAggregate: like the reconciler, the consumer judges the user
// records inside a KPL aggregate one by one; the aggregate itself is not JSON and would be
// dropped whole, with the user records the pattern keeps.
func TestFilterJudgesUserRecordsOfAnAggregate(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "filtered-kpl")
	f := filter.MustParse(`{"data": {"id": ["order-0021", "order-0023", "order-0027"]}}`)
	r.h = NewHandler(r.h.pipeline, r.group, r.h.log, WithFilter(f))
	resp, err := r.invoke(t, fixture(t, fixtures.KPL))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != "" {
		t.Fatalf("reported failure %q, want none", got)
	}
	shard := fixtures.Shard
	want := map[recordid.ID]bool{
		{ShardID: shard, Seq: fixtures.Seq(20)}:         true, // order 21, plain
		{ShardID: shard, Seq: fixtures.Seq(21), Sub: 1}: true, // order 23, in the aggregate
		{ShardID: shard, Seq: fixtures.Seq(22)}:         true, // order 27, plain
	}
	if got := r.proc.total(); got != len(want) {
		t.Errorf("%d records processed, want %d", got, len(want))
	}
	for id := range want {
		if r.proc.count(id) != 1 {
			t.Errorf("%v processed %d times, want once", id, r.proc.count(id))
		}
	}
}
