package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// drainParked receives and deletes every message of a parked queue (FIFO: a group's next
// message is released only once the previous one is deleted).
func drainParked(t *testing.T, client *sqs.Client, url string) []park.Message {
	t.Helper()
	var out []park.Message
	for empty := 0; empty < 2; {
		o, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range o.Messages {
			pm, err := park.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("parked message: %v", err)
			}
			out = append(out, pm)
			if _, err := client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestRedriveOnFIFOParkedQueueKeepsTheRecord is issue 11 item 8. A record parked on a FIFO
// queue, redriven while its cause is still there, is parked again within SQS's 5-minute
// deduplication window. When both parks carried the same MessageDeduplicationId (the record id),
// SQS accepted the second send and dropped it, and redrive then deleted the original: the parked
// queue ended empty, the record parked nowhere. Every park is now a distinct message, and redrive
// deletes the old one only after the new one was accepted: exactly one message remains, the new
// one, with the payload.
func TestRedriveOnFIFOParkedQueueKeepsTheRecord(t *testing.T) {
	ctx := context.Background()
	client := stacktest.SQS(t)
	url := stacktest.Queue(t, "parked", true)
	parker := park.New(client, url)
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	id := recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(7)}
	data := []byte(`{"order":"still-broken"}`)
	if _, err := parker.Park(ctx, park.Record{ID: id, Shard: shard, PartitionKey: "k", ArrivalTime: time.Now(), Data: data,
		Attempts: 5, LastError: "downstream rejects it", Source: pipeline.SourceConsumer}); err != nil {
		t.Fatal(err)
	}

	fail := func(context.Context, pipeline.Record) error { return errors.New("downstream still rejects it") }
	p, err := pipeline.New(NewRedriveLedger(&pipelinetest.Ledger{}), &pipelinetest.Checkpoint{}, parker, fail,
		pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewRedriver(client, url, newMemKinesis(), p, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1,
		Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second}, WithRedriveLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ParkedAgain != 1 || rep.DeleteFailures != 0 {
		t.Fatalf("report %+v, want the record parked again", rep)
	}
	msgs := drainParked(t, client, url)
	if len(msgs) != 1 {
		t.Fatalf("parked queue holds %d messages after the redrive, want 1 (the record parked anew): a send SQS deduplicated away was taken for a park", len(msgs))
	}
	if m := msgs[0]; m.RecordID != id.String() || m.Source != pipeline.SourceRedrive || string(m.Data) != string(data) {
		t.Errorf("parked message %+v, want record %s parked by redrive with its payload", m, id)
	}
}
