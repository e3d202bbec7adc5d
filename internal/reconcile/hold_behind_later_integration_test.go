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

// TestRedriveParkedBehindALaterRecord: ON_PARK=hold-key. The consumer parks H (it fails), which
// holds key K. Then a reconciler replays E, a record of K earlier in the shard than H that the
// mapping went past unparked; K is held, so E is parked behind H: the hold lists H, then E. Once
// the cause is fixed, the redrive walk must apply E before H (the key's order is the stream's,
// not the park order), and release K with both applied and both messages deleted. Against the
// local stack (DynamoDB holds and ledger, SQS parked queue). Failed before the fix: applied
// [H E].
func TestRedriveParkedBehindALaterRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	sh := "shardId-000000000000"
	rec := func(i int) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh, Seq: fakeSeq(i)}, PartitionKey: "K", Data: []byte("K-" + fakeSeq(i)), ArrivalTime: time.Now()}
	}
	early, head := rec(5), rec(10)
	var mu sync.Mutex
	fixed := false
	var applied []recordid.ID
	proc := func(ctx context.Context, r pipeline.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return errors.New("downstream rejects it")
		}
		applied = append(applied, r.ID)
		return nil
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 4}
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: sh}
	for _, run := range []struct {
		source string
		r      pipeline.Record
	}{{pipeline.SourceConsumer, head}, {pipeline.SourceReconciler, early}} {
		p, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, hs.parker, proc, cfg,
			pipeline.WithHoldKey(pipeline.HoldStore{H: hs.holds}), pipeline.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: run.source, Records: []pipeline.Record{run.r}}); err != nil || res.Parked != 1 {
			t.Fatalf("%s run of %v: %+v %v, want it parked", run.source, run.r.ID, res, err)
		}
	}
	st, ok, err := hs.holds.Get(ctx, ugroup, "K")
	if err != nil || !ok || !slices.Equal(st.Held, []recordid.ID{head.ID, early.ID}) {
		t.Fatalf("hold %+v %v %v: want K held by %v with %v parked behind it", st, ok, err, head.ID, early.ID)
	}

	mu.Lock()
	fixed = true
	mu.Unlock()
	rep := runHoldRedrive(t, hs.ledger, hs.parker, proc, cfg, hs.sqs, hs.url, hs.holds)
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	if !slices.Equal(got, []recordid.ID{early.ID, head.ID}) {
		t.Fatalf("redrive applied %v, want %v then %v (stream order; report %+v)", got, early.ID, head.ID, rep)
	}
	if _, ok, err := hs.holds.Get(ctx, ugroup, "K"); err != nil || ok {
		t.Fatalf("K still held (%v, %v) after every held record was applied (report %+v)", ok, err, rep)
	}
	if rep.Released != 1 {
		t.Fatalf("report %+v: want K released once", rep)
	}
	if n := len(drainParked(t, hs.sqs, hs.url)); n != 0 {
		t.Fatalf("%d parked messages left after the redrive applied every record (report %+v)", n, rep)
	}
}
