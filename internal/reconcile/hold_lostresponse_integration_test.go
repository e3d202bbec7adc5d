package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// noRetry makes a lost response the caller's error (the SDK's retries exhausted).
func noRetry() aws.Retryer { return retry.AddWithMaxAttempts(retry.NewStandard(), 1) }

// TestHoldWalkLostResponses: a held key K (head H, then R1 and R2 parked behind it) is redriven
// with the cause fixed while the fault proxy drops the response of one write of the walk, after
// the service applied it: the redrive's ledger entry, the hold's applied count, the message
// delete, the release, for each record of the walk in turn. A second session then runs without
// faults. Every time, H, R1 and R2 are applied exactly once each, in order, K is released and
// the parked queue is empty. Before, a lost delete (or applied-count) response left an applied
// record's message in the queue; once K was released it was redriven again, after K's later
// records, and a lost ledger response made the next session run the record again.
func TestHoldWalkLostResponses(t *testing.T) {
	t.Parallel()
	writes := []struct {
		name  string
		sqs   bool // the write goes to SQS (else DynamoDB)
		match func(*faultproxy.Request) bool
		max   int // occurrences in a clean walk of three records
	}{
		{"ledger entry", false, func(r *faultproxy.Request) bool {
			return r.Action() == "PutItem" && bytes.Contains(r.Body, []byte("#B#"))
		}, 3},
		{"applied count", false, func(r *faultproxy.Request) bool { return r.Action() == "UpdateItem" }, 3},
		{"message delete", true, func(r *faultproxy.Request) bool { return r.Action() == "DeleteMessage" }, 3},
		{"release", false, func(r *faultproxy.Request) bool {
			return r.Action() == "DeleteItem" && bytes.Contains(r.Body, []byte("H|"))
		}, 1},
	}
	for _, w := range writes {
		for n := 1; n <= w.max; n++ {
			t.Run(fmt.Sprintf("%s %d", w.name, n), func(t *testing.T) {
				t.Parallel() // each case has proxies of its own
				ddbProxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
				if err != nil {
					t.Fatal(err)
				}
				defer ddbProxy.Close()
				sqsProxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_SQS"))
				if err != nil {
					t.Fatal(err)
				}
				defer sqsProxy.Close()
				faulty := ddbProxy
				if w.sqs {
					faulty = sqsProxy
				}
				var seen atomic.Int32
				match := func(r *faultproxy.Request) bool { return w.match(r) && seen.Add(1) == int32(n) }
				holdWalkLostResponse(t, ddbProxy.URL(), sqsProxy.URL(), func(on bool) {
					ddbProxy.SetRules()
					sqsProxy.SetRules()
					if on {
						faulty.SetRules(faultproxy.Rule{Match: match, Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1})
					}
				}, func() int { return int(seen.Load()) })
			})
		}
	}
}

func holdWalkLostResponse(t *testing.T, ddbURL, sqsURL string, faults func(on bool), seen func() int) {
	ctx := context.Background()
	table, url := stacktest.LedgerTable(t), stacktest.Queue(t, "parked", false)
	direct := stacktest.DynamoDB(t)
	lossyDDB := dynamodb.NewFromConfig(stacktest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint, o.DisableValidateResponseChecksum, o.Retryer = aws.String(ddbURL), true, noRetry()
	})
	lossySQS := sqs.NewFromConfig(stacktest.Config(t), func(o *sqs.Options) { o.BaseEndpoint, o.Retryer = aws.String(sqsURL), noRetry() })
	ledger, holds := pipeline.DedupeLedger{L: dedupe.New(direct, table)}, dedupe.NewHolds(direct, table)
	parker := park.New(stacktest.SQS(t), url)
	sh := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	rec := func(i int) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh.ShardID, Seq: fakeSeq(i)}, PartitionKey: "K", Data: []byte(fmt.Sprint("K", i)), ArrivalTime: time.Now()}
	}
	h, r1, r2 := rec(1), rec(2), rec(3)
	var mu sync.Mutex
	fixed := false
	var applied []recordid.ID
	proc := func(_ context.Context, x pipeline.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed && x.ID == h.ID {
			return errors.New("poison")
		}
		applied = append(applied, x.ID)
		return nil
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2}
	consumer, err := pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := consumer.Run(ctx, pipeline.Batch{Shard: sh, Source: pipeline.SourceConsumer, Records: []pipeline.Record{h, r1, r2}}); err != nil || res.Parked != 3 {
		t.Fatalf("consumer: %+v %v", res, err)
	}
	mu.Lock()
	fixed = true
	mu.Unlock()
	session := func() RedriveReport {
		t.Helper()
		lossyLedger := pipeline.DedupeLedger{L: dedupe.New(lossyDDB, table)}
		rp, err := pipeline.New(NewRedriveLedger(lossyLedger), &pipelinetest.Checkpoint{}, parker, proc, cfg, pipeline.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewRedriver(lossySQS, url, newMemKinesis(), rp, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1,
			Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second}, WithRedriveLogger(discard()),
			WithRedriveHolds(dedupe.NewHolds(lossyDDB, table)), WithRedriveLedger(ledger))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := d.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	faults(true)
	rep1 := session()
	faults(false)
	if seen() == 0 {
		t.Fatal("the write to lose was never made: the test does not exercise it")
	}
	rep2 := session()
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	if want := []recordid.ID{h.ID, r1.ID, r2.ID}; !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v exactly once each, in order (sessions %+v then %+v)", got, want, rep1, rep2)
	}
	if _, held, err := holds.Get(ctx, ugroup, "K"); held || err != nil {
		t.Fatalf("K still held (%v; sessions %+v then %+v)", err, rep1, rep2)
	}
	if left := drainParked(t, stacktest.SQS(t), url); len(left) != 0 {
		t.Fatalf("%d messages left in the parked queue (sessions %+v then %+v)", len(left), rep1, rep2)
	}
}
