package reconcile

import (
	"context"
	"errors"
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

// parkedMessages receives every message of a parked queue without deleting it (each stays
// hidden for the visibility timeout given).
func parkedMessages(t *testing.T, client *sqs.Client, url string, hide time.Duration) []park.Message {
	t.Helper()
	var out []park.Message
	for empty := 0; empty < 2; {
		o, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: int32(hide / time.Second)})
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
		}
	}
	return out
}

// receiptsOf reads the ledger's recorded parks of id.
func receiptsOf(t *testing.T, ledger pipeline.Ledger, shard recordid.Shard, id recordid.ID) []park.Receipt {
	t.Helper()
	v, err := ledger.Lookup(context.Background(), shard, id.Seq, id.Seq)
	if err != nil {
		t.Fatal(err)
	}
	pv, ok := v.(pipeline.ParkView)
	if !ok {
		t.Fatalf("the ledger's view %T does not tell parks", v)
	}
	return pv.ParkReceipts(id)
}

// TestParkIsRecordedInTheLedger: every park the pipeline makes (a failed record inline, a
// large one through the payload bucket, one parked behind its held key) is recorded in the
// ledger entry that counts the record done, and the recorded park confirms exactly the message
// in the parked queue. Before, the ledger knew only that the id was parked: nothing a redrive
// could check a message against.
func TestParkIsRecordedInTheLedger(t *testing.T) {
	ctx := context.Background()
	hs := newHoldStack(t)
	objects, bucket := stacktest.S3(t), stacktest.Bucket(t)
	parker := park.New(hs.sqs, hs.url, park.WithPayloadBucket(objects, bucket), park.WithMaxMessageBytes(4096))
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	fail := func(context.Context, pipeline.Record) error { return errors.New("downstream rejects it") }
	p, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, parker, fail, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2},
		pipeline.WithHoldKey(pipeline.HoldStore{H: hs.holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 10_000)
	for i := range big {
		big[i] = byte(i)
	}
	recs := []pipeline.Record{
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(1)}, PartitionKey: "K", Data: []byte("head of K"), ArrivalTime: time.Now()},
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(2)}, PartitionKey: "K", Data: []byte("behind the head"), ArrivalTime: time.Now()},
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(3)}, PartitionKey: "L", Data: big, ArrivalTime: time.Now()},
	}
	res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if res.Parked != 3 || res.HeldParked != 1 {
		t.Fatalf("result %+v, want 3 parked, 1 behind its held key", res)
	}
	msgs := parkedMessages(t, hs.sqs, hs.url, 30*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("%d parked messages, want 3", len(msgs))
	}
	inS3 := 0
	for _, m := range msgs {
		id, _ := m.ID()
		rs := receiptsOf(t, hs.ledger, shard, id)
		if len(rs) != 1 {
			t.Fatalf("record %s: the ledger records %d parks, want 1", id, len(rs))
		}
		if err := rs[0].Confirms(m); err != nil {
			t.Errorf("record %s: the recorded park does not confirm its message: %v", id, err)
		}
		if m.PayloadS3 != nil {
			inS3++
			if rs[0].PayloadS3 == nil || rs[0].PayloadS3.Bucket != bucket {
				t.Errorf("record %s: recorded payload location %+v", id, rs[0].PayloadS3)
			}
		}
	}
	if inS3 != 1 {
		t.Fatalf("%d payloads in S3, want 1", inS3)
	}
}
