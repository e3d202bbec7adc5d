package reconcile

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestRedriveLostReceiveResponse: SQS hands out the parked messages but the response of that
// ReceiveMessage never reaches the redriver (the fault proxy resets the connection after the
// queue answered; on AWS the SDK retries such a read error). The messages are in flight,
// invisible until the visibility timeout, so the SDK's retry receives nothing. Before, the
// session ended at that empty receive having redriven none of them, and they waited for a
// later session. Now the session sees that a receive attempt may have been answered and lost,
// waits for the visibility timeout to pass and redrives every message.
func TestRedriveLostReceiveResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_SQS"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg := stacktest.Config(t)
	direct := sqs.NewFromConfig(cfg)
	viaProxy := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = &[]string{proxy.URL()}[0] })
	url := stacktest.Queue(t, "parked", false)
	parker := park.New(direct, url)
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	ledger := &pipelinetest.Ledger{}
	const n = 3
	for i := range n {
		parkRecorded(t, parker, ledger, park.Record{Shard: shard, ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(i)},
			PartitionKey: fmt.Sprint("k", i), Data: []byte(fmt.Sprint("payload ", i)), LastError: "downstream rejects it", Attempts: 1,
			Source: pipeline.SourceConsumer})
	}
	var mu sync.Mutex
	applied := map[recordid.ID]int{}
	fixed := func(_ context.Context, r pipeline.Record) error {
		mu.Lock()
		defer mu.Unlock()
		applied[r.ID]++
		return nil
	}
	p, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, fixed, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	const visibility = 3 * time.Second
	d, err := NewRedriver(viaProxy, url, newMemKinesis(), p,
		RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1, Backoff: time.Millisecond, VisibilityTimeout: visibility},
		WithRedriveLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetRules(faultproxy.Rule{Match: faultproxy.Ops("AmazonSQS.ReceiveMessage"), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1})
	start := time.Now()
	rep, err := d.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := proxy.Stats().Op("AmazonSQS.ReceiveMessage").Faults(); got != 1 {
		t.Fatalf("the proxy lost %d receive responses, want 1: the test did not create the fault", got)
	}
	if rep.Received != n || rep.Processed != n {
		t.Fatalf("report %+v after %v, want the %d parked records received and processed in this session", rep, time.Since(start).Round(time.Millisecond), n)
	}
	for i := range n {
		if id := (recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(i)}); applied[id] != 1 {
			t.Errorf("record %v applied %d times, want once", id, applied[id])
		}
	}
	if left := drainParked(t, direct, url); len(left) != 0 {
		t.Errorf("parked queue still holds %d messages", len(left))
	}
}
