package reconcile

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestHoldKeyBatchSink: ON_PARK=hold-key with a batch sink (pipeline.WithBatchSink), which is
// how the functions run by default (the batched gapless-sqs bridge, internal/wire). Key K has
// records n (poison), n+1, n+2 in one consumer batch, J one record; MaxRecordAttempts 1. n is
// parked in the first wave and holds K: n+1 and n+2 must be parked behind it, not handed to
// the sink in the next waves; in the next batch K's record must be parked behind n too (its
// key read as held), while J goes on. Against the local stack: DynamoDB ledger and holds, SQS
// parked queue. Failed before the fix: the waves knew nothing of holds, so n+1, n+2 (same
// batch) and n+3 (next batch) were applied while n was parked.
func TestHoldKeyBatchSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	client, url, ledger, holds, parker := hs.sqs, hs.url, hs.ledger, hs.holds, hs.parker

	sh := "shardId-000000000000"
	rec := func(i int, key string) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh, Seq: fakeSeq(i)}, PartitionKey: key, Data: []byte(key + "-" + fakeSeq(i)), ArrivalTime: time.Now()}
	}
	head := rec(10, "K").ID
	var mu sync.Mutex
	var appliedK []recordid.ID
	appliedJ := 0
	sink := func(_ context.Context, recs []pipeline.Record) []error {
		mu.Lock()
		defer mu.Unlock()
		errs := make([]error, len(recs))
		for j, r := range recs {
			switch {
			case r.ID == head:
				errs[j] = errors.New("poison: downstream rejects it")
			case r.PartitionKey == "K":
				appliedK = append(appliedK, r.ID)
			default:
				appliedJ++
			}
		}
		return errs
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 4}
	p, err := pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, nil, cfg,
		pipeline.WithBatchSink(sink, 10), pipeline.WithHoldKey(pipeline.HoldStore{H: holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	run := func(recs ...pipeline.Record) pipeline.Result {
		t.Helper()
		res, err := p.Run(ctx, pipeline.Batch{Shard: recordid.Shard{Group: ugroup, Stream: ustream, ShardID: sh}, Source: pipeline.SourceConsumer, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	kApplied := func() []recordid.ID { mu.Lock(); defer mu.Unlock(); return slices.Clone(appliedK) }

	if r := run(rec(10, "K"), rec(11, "J"), rec(12, "K"), rec(13, "K")); r.Parked != 3 || r.HeldParked != 2 || r.Processed != 1 {
		t.Errorf("first batch: %+v, want 3 parked (2 held behind the head), 1 processed", r)
	}
	if got := kApplied(); len(got) != 0 {
		t.Fatalf("same batch: K applied %v while %v is parked", got, head)
	}
	if r := run(rec(14, "K"), rec(15, "J")); r.HeldParked != 1 || r.Processed != 1 {
		t.Errorf("next batch: %+v, want 1 held parked, 1 processed", r)
	}
	if got := kApplied(); len(got) != 0 {
		t.Fatalf("next batch: K applied %v while %v is parked", got, head)
	}
	if appliedJ != 2 {
		t.Fatalf("J applied %d records, want 2: other keys go on", appliedJ)
	}
	st, ok, err := holds.Get(ctx, ugroup, "K")
	want := []recordid.ID{head, rec(12, "K").ID, rec(13, "K").ID, rec(14, "K").ID}
	if err != nil || !ok || st.Head != head || !slices.Equal(st.Held, want) {
		t.Fatalf("hold %+v %v %v, want %v", st, ok, err, want)
	}
	if msgs := drainParked(t, client, url); len(msgs) != 4 {
		t.Fatalf("%d messages in the parked queue, want 4 (the head and the 3 held behind it)", len(msgs))
	}
}
