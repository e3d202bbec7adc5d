package reconcile

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestRedriveKeyHeldDuringSession: a redrive session (WithRedriveHolds) first receives a message
// of key K that no hold lists (parked before hold-key was on) while K is not held, and redrives
// it at once. While the session runs, the consumer (ON_PARK=hold-key) parks K's record H
// (poison), which holds K, and parks R behind H. The session then receives H's and R's
// messages: they must go to the ordered walk (K is held now), so R is not applied while H is
// parked again. Against the local stack (DynamoDB holds and ledger, SQS parked queue); the
// consumer's batch runs inside the session, from the redriven record's Process. Failed before
// the fix: the session remembered K as not held from its first message and redrove R at once.
func TestRedriveKeyHeldDuringSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	client, url, ledger, holds, parker := hs.sqs, hs.url, hs.ledger, hs.holds, hs.parker

	sh := "shardId-000000000000"
	rec := func(i int) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh, Seq: fakeSeq(i)}, PartitionKey: "K", Data: []byte("K-" + fakeSeq(i)), ArrivalTime: time.Now()}
	}
	legacy, head, behind := rec(5), rec(10), rec(11)
	var mu sync.Mutex
	var applied []recordid.ID
	var consumerRan sync.Once
	var consumer *pipeline.Pipeline
	proc := func(ctx context.Context, r pipeline.Record) error {
		if r.ID == head.ID {
			return errors.New("poison: downstream rejects it")
		}
		if r.ID == legacy.ID { // meanwhile the consumer parks H (holding K) and R behind it
			consumerRan.Do(func() {
				if _, err := consumer.Run(ctx, pipeline.Batch{Shard: recordid.Shard{Group: ugroup, Stream: ustream, ShardID: sh},
					Source: pipeline.SourceConsumer, Records: []pipeline.Record{head, behind}}); err != nil {
					t.Error(err)
				}
			})
		}
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, r.ID)
		return nil
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 4}
	var err error
	consumer, err = pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	// The legacy message: parked with K not held (as ON_PARK=continue parks).
	parkRecorded(t, parker, ledger, park.Record{ID: legacy.ID, Shard: recordid.Shard{Group: ugroup, Stream: ustream, ShardID: sh},
		PartitionKey: "K", ArrivalTime: legacy.ArrivalTime, Data: legacy.Data, Attempts: 1, LastError: "old failure", Source: pipeline.SourceConsumer})

	rep := runHoldRedrive(t, ledger, parker, proc, cfg, client, url, holds)
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	if slices.Contains(got, behind.ID) {
		t.Fatalf("%v applied while %v, before it on key K, is parked (applied %v; report %+v)", behind.ID, head.ID, got, rep)
	}
	if !slices.Equal(got, []recordid.ID{legacy.ID}) {
		t.Fatalf("applied %v, want only the legacy record %v (report %+v)", got, legacy.ID, rep)
	}
	st, ok, err := holds.Get(ctx, ugroup, "K")
	if err != nil || !ok || st.Head != head.ID || st.Applied != 0 {
		t.Fatalf("hold %+v %v %v: want K held by %v, nothing applied", st, ok, err, head.ID)
	}
}
