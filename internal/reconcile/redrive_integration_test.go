package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
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
		// A short visibility: the messages of a receive whose response was lost (the SDK
		// retried it) are waited for; each one received is deleted before the next receive.
		o, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ReceiveMayHaveLost(o) {
			time.Sleep(2 * time.Second)
			empty = 0
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

// TestRedriveOnFIFOParkedQueueKeepsTheRecord proves that a record parked on a FIFO
// queue, redriven while its cause is still there, is parked again within SQS's 5-minute
// deduplication window. When both parks carried the same MessageDeduplicationId (the record id),
// SQS accepted the second send and dropped it, and redrive then deleted the original: the parked
// queue ended empty, the record parked nowhere. Every park is now a distinct message, and redrive
// deletes the old one only after the new one was accepted: exactly one message remains, the new
// one, with the payload.
func TestRedriveOnFIFOParkedQueueKeepsTheRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := stacktest.SQS(t)
	url := stacktest.Queue(t, "parked", true)
	parker := park.New(client, url)
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	id := recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(7)}
	data := []byte(`{"order":"still-broken"}`)
	ledger := &pipelinetest.Ledger{}
	parkRecorded(t, parker, ledger, park.Record{ID: id, Shard: shard, PartitionKey: "k", ArrivalTime: time.Now(), Data: data,
		Attempts: 5, LastError: "downstream rejects it", Source: pipeline.SourceConsumer})

	fail := func(context.Context, pipeline.Record) error { return errors.New("downstream still rejects it") }
	p, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, fail,
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

// TestRedriveLargeRecordsAfterTheStreamLostThem proves that records of ~200 KB, ~1 MiB
// and a few MiB (a stream whose maximum record size was raised takes up to 10 MiB) fail their
// budget and are parked; then the stream no longer holds them (retention, modelled by a stream
// without records). Redrive must still run each with its exact payload. When large records were
// parked by reference (the message without data) redrive had nothing left to read: they stayed
// in the parked queue for ever, their payload gone.
func TestRedriveLargeRecordsAfterTheStreamLostThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, objects := stacktest.SQS(t), stacktest.S3(t)
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			url := stacktest.Queue(t, "parked", fifo)
			bucket := stacktest.Bucket(t)
			parker := park.New(client, url, park.WithPayloadBucket(objects, bucket))
			shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
			ledger := &pipelinetest.Ledger{}
			b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer}
			want := map[recordid.ID][]byte{}
			for i, n := range []int{200 * 1000, 1 << 20, 3 << 20} {
				data := make([]byte, n)
				for j := range data {
					data[j] = byte(i*7 + j*31)
				}
				r := pipeline.Record{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(i)}, PartitionKey: fmt.Sprint("k", i), Data: data, ArrivalTime: time.Now()}
				b.Records = append(b.Records, r)
				want[r.ID] = data
			}
			broken := func(context.Context, pipeline.Record) error { return errors.New("downstream rejects it") }
			consumer, err := pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, broken, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 3})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := consumer.Run(ctx, b); err != nil || res.Parked != 3 {
				t.Fatalf("parking: %+v %v", res, err)
			}

			got := map[recordid.ID][]byte{}
			var mu sync.Mutex
			fixed := func(_ context.Context, r pipeline.Record) error {
				mu.Lock()
				defer mu.Unlock()
				got[r.ID] = r.Data
				return nil
			}
			p, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, fixed, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			d, err := NewRedriver(client, url, newMemKinesis(&memShard{id: shard.ShardID}), p,
				RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1, Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second},
				WithRedriveLogger(discard()), WithRedrivePayloads(objects), WithRedrivePayloadBucket(bucket))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := d.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Processed != 3 || rep.Left != 0 {
				t.Errorf("report %+v, want the 3 records processed", rep)
			}
			for id, data := range want {
				if !bytes.Equal(got[id], data) {
					t.Errorf("record %s: redriven with %d bytes, parked with %d", id, len(got[id]), len(data))
				}
			}
			if left := drainParked(t, client, url); len(left) != 0 {
				t.Errorf("parked queue still holds %d messages", len(left))
			}
		})
	}
}
