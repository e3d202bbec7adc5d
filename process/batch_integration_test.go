package process_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/process"
)

// TestBatchBridgeOnSQS runs a batch through the pipeline with the batched bridge against a real
// queue (fauxqs or moto), through a fault proxy that fails, drops before and drops after
// forwarding some SendMessageBatch requests, re-running the batch as Lambda would until nothing
// fails; then reads the queue back. Every record arrives: on a FIFO queue exactly once and in
// sequence order per partition key (message group); on a standard queue at least once (a
// request whose response was lost is sent again, and only FIFO deduplicates).
func TestBatchBridgeOnSQS(t *testing.T) {
	const n, keys = 70, 7
	shard := recordid.Shard{Group: "g", Stream: "s", ShardID: "shardId-000000000001"}
	b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer}
	for i := range n {
		b.Records = append(b.Records, pipeline.Record{
			ID:           recordid.ID{ShardID: shard.ShardID, Seq: fmt.Sprintf("4959%052d", i+1)},
			PartitionKey: fmt.Sprint("key-", i%keys), Data: fmt.Appendf(nil, `{"n":%d}`, i+1),
		})
	}
	batchOps := faultproxy.Ops("AmazonSQS.SendMessageBatch")
	faults := []faultproxy.Rule{
		{Match: batchOps, Fault: faultproxy.ServerError, Rate: 0.15},
		{Match: batchOps, Fault: faultproxy.DropAfterForward, Rate: 0.15},
		{Match: batchOps, Fault: faultproxy.DropBeforeForward, Rate: 0.1},
	}
	for _, tc := range []struct {
		name   string
		fifo   bool
		faults bool
	}{
		{"standard", false, false},
		{"fifo", true, false},
		{"standard with faults", false, true},
		{"fifo with faults", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := stacktest.Queue(t, "bridge", tc.fifo)
			proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_SQS"), faultproxy.WithSeed(7))
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			if tc.faults {
				proxy.SetRules(faults...)
			}
			client := sqs.NewFromConfig(stacktest.Config(t), func(o *sqs.Options) {
				o.BaseEndpoint = aws.String(proxy.URL())
				o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.MaxAttempts = 2; so.MaxBackoff = 20 * time.Millisecond })
			})
			c := pipeline.DefaultConfig()
			c.MaxRecordAttempts = 1000 // nothing parks: every record must reach the queue
			p, err := pipeline.New(&pipelinetest.Ledger{}, &pipelinetest.Checkpoint{}, &pipelinetest.Parker{}, nil, c,
				pipeline.WithBatchSink(process.NewBatch(client, url), process.MaxBatchEntries))
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			for ; runs < 50; runs++ {
				res, err := p.Run(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				if res.Failed == 0 {
					break
				}
			}
			st := proxy.Stats().Op("AmazonSQS.SendMessageBatch")
			t.Logf("%d runs; SendMessageBatch: %d requests, %d faults", runs+1, st.Requests, st.Faults())
			if tc.faults && st.Faults() == 0 {
				t.Fatal("no fault injected: the test proves nothing")
			}

			got := map[string][]string{} // key -> record ids in receive order
			count := map[string]int{}
			// Until every record arrived (then two empty receives, for duplicates), or 30 s: a
			// receive whose answer was lost on the connection (the SDK retried it) hides its
			// messages for the visibility timeout, kept short so that they come back in time.
			for idle, deadline := 0, time.Now().Add(30*time.Second); idle < 2 && time.Now().Before(deadline); {
				out, err := stacktest.SQS(t).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 3,
					MessageAttributeNames: []string{"All"},
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Messages) == 0 {
					if len(count) >= len(b.Records) {
						idle++
					}
					continue
				}
				idle = 0
				for _, m := range out.Messages {
					rid := attr(m, process.AttrRecordID)
					count[rid]++
					if count[rid] == 1 {
						k := attr(m, process.AttrPartitionKey)
						got[k] = append(got[k], rid)
					}
					if _, err := stacktest.SQS(t).DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						t.Fatal(err)
					}
				}
			}
			dups := 0
			for _, r := range b.Records {
				switch c := count[r.ID.String()]; {
				case c == 0:
					t.Errorf("record %s lost", r.ID)
				case c > 1:
					dups += c - 1
				}
			}
			if tc.fifo && dups > 0 {
				t.Errorf("%d duplicates on a FIFO queue", dups)
			}
			if !tc.faults && dups > 0 {
				t.Errorf("%d duplicates without faults", dups)
			}
			t.Logf("%d duplicates", dups)
			if tc.fifo {
				for k, ids := range got {
					for j := 1; j < len(ids); j++ {
						if ids[j] < ids[j-1] {
							t.Errorf("key %s: received out of order: %v", k, ids)
							break
						}
					}
				}
			}
		})
	}
}
