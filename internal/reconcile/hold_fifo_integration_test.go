package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestHoldKeyOnFIFOParkedQueue (ON_PARK=hold-key, FIFO parked queue). Key K's head H is poison,
// R is parked behind it; key J's record is parked too, all in one shard. A first redrive with H
// still failing parks H again; a second with H fixed applies H then R and releases K. Before,
// every message of a shard shared one message group, so the re-parked H landed behind R: R was
// received (and held, waiting for H), H never was, and K stayed held for ever. And a record of
// key A whose payload object is gone, parked first, holds only A (reported), while every other
// key drains.
func TestHoldKeyOnFIFOParkedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ddb, client, objects := stacktest.DynamoDB(t), stacktest.SQS(t), stacktest.S3(t)
	table, url, bucket := stacktest.LedgerTable(t), stacktest.Queue(t, "parked", true), stacktest.Bucket(t)
	ledger, holds := pipeline.DedupeLedger{L: dedupe.New(ddb, table)}, dedupe.NewHolds(ddb, table)
	parker := park.New(client, url, park.WithPayloadBucket(objects, bucket), park.WithMaxMessageBytes(4096))
	sh := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	rec := func(i int, key string, data []byte) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh.ShardID, Seq: fakeSeq(i)}, PartitionKey: key, Data: data, ArrivalTime: time.Now()}
	}
	large := make([]byte, 8000) // parked in the payload bucket
	a, h, j, r := rec(1, "A", large), rec(2, "K", []byte("H")), rec(3, "J", []byte("J")), rec(4, "K", []byte("R"))
	var mu sync.Mutex
	fixed := false
	var applied []string
	proc := func(_ context.Context, x pipeline.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return errors.New("poison")
		}
		applied = append(applied, x.PartitionKey+"="+fmt.Sprint(x.ID.Seq == h.ID.Seq, x.ID.Seq == r.ID.Seq))
		return nil
	}
	hFails := true
	procH := func(ctx context.Context, x pipeline.Record) error {
		mu.Lock()
		still := hFails && x.ID == h.ID
		mu.Unlock()
		if still {
			return errors.New("H still poison")
		}
		return proc(ctx, x)
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 4}
	consumer, err := pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := consumer.Run(ctx, pipeline.Batch{Shard: sh, Source: pipeline.SourceConsumer, Records: []pipeline.Record{a, h, j, r}}); err != nil || res.Parked != 4 {
		t.Fatalf("consumer: %+v %v", res, err)
	}
	// A's payload object is gone (deleted by hand, say): A cannot be redriven.
	key := park.ObjectKey(park.Message{Group: ugroup, Stream: ustream, ShardID: sh.ShardID, Seq: a.ID.Seq, ParkID: aParkID(t, ledger, sh, a.ID)})
	if _, err := objects.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fixed = true
	mu.Unlock()

	session := func() RedriveReport {
		t.Helper()
		rp, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, procH, cfg, pipeline.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewRedriver(client, url, newMemKinesis(), rp, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1,
			Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second}, WithRedriveLogger(discard()), WithRedriveHolds(holds),
			WithRedrivePayloads(objects), WithRedrivePayloadBucket(bucket))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := d.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// H still fails: parked again; J drains; A is left (payload gone) and holds only A.
	if rep := session(); rep.ParkedAgain != 1 || rep.Released != 1 {
		t.Fatalf("first redrive: %+v, want H parked again and J released", rep)
	}
	mu.Lock()
	hFails = false
	mu.Unlock()
	rep := session()
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	want := []string{"J=false false", "K=true false", "K=false true"}
	if !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v (second redrive %+v)", got, want, rep)
	}
	for _, k := range []string{"K", "J"} {
		if _, held, err := holds.Get(ctx, ugroup, k); held || err != nil {
			t.Fatalf("key %s still held after its records were applied (%v; report %+v)", k, err, rep)
		}
	}
	if _, held, _ := holds.Get(ctx, ugroup, "A"); !held {
		t.Fatal("A released although its head was never applied")
	}
	if rep.Held+rep.Left == 0 {
		t.Fatalf("the unredrivable record of A is not reported: %+v", rep)
	}
}

func aParkID(t *testing.T, ledger pipeline.Ledger, sh recordid.Shard, id recordid.ID) string {
	rs := receiptsOf(t, ledger, sh, id)
	if len(rs) != 1 || rs[0].PayloadS3 == nil {
		t.Fatalf("record %s: receipts %+v, want one with a payload object", id, rs)
	}
	return rs[0].ParkID
}
