package loadgen

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.SQS))
}

func TestRecordsDeterministic(t *testing.T) {
	s := Spec{Records: 1000, Keys: 10, PoisonRate: 0.05, Seed: 7}
	a, b := Records(s), Records(s)
	poison := 0
	ids := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("record %d differs between runs with one seed", i)
		}
		if ids[a[i].ID] {
			t.Fatalf("duplicate id %s", a[i].ID)
		}
		ids[a[i].ID] = true
		if a[i].Poison {
			poison++
		}
	}
	if poison < 20 || poison > 90 {
		t.Fatalf("%d poison records at rate 0.05 of 1000", poison)
	}
	if c := Records(Spec{Records: 1000, Keys: 10, PoisonRate: 0.05, Seed: 8}); c[0] == a[0] && c[1] == a[1] && c[2] == a[2] {
		t.Fatal("another seed gave the same workload")
	}
}

func TestProduceWritesEveryRecordOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kin := stacktest.Kinesis(t)
	stream, _ := stacktest.Stream(t, 2)
	recs := Records(Spec{Records: 1200, Keys: 50, Seed: 1})
	var last int
	if err := Produce(ctx, kin, stream, recs, 0, func(n int) { last = n }); err != nil {
		t.Fatal(err)
	}
	if last != len(recs) {
		t.Fatalf("progress ended at %d, want %d", last, len(recs))
	}
	seen := map[string]int{}
	shards, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards.Shards {
		it, err := kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				var p Payload
				if err := json.Unmarshal(r.Data, &p); err != nil {
					t.Fatal(err)
				}
				seen[p.ID]++
			}
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	if len(seen) != len(recs) {
		t.Fatalf("stream holds %d distinct records, want %d", len(seen), len(recs))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s written %d times", id, n)
		}
	}
}

func TestDrainCountsDuplicatesAndUndecodable(t *testing.T) {
	ctx := context.Background()
	client := stacktest.SQS(t)
	url := stacktest.Queue(t, "drain", false)
	for _, body := range []string{`{"id":"a"}`, `{"id":"b"}`, `{"id":"a"}`, `not json`} {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	tally := NewTally()
	bad, err := Drain(ctx, client, url, 2*time.Second, tally, PayloadID)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Unique() != 2 || tally.Duplicates() != 1 || bad != 1 || !tally.Has("a") || string(tally.Body("b")) != `{"id":"b"}` {
		t.Fatalf("unique=%d dups=%d bad=%d", tally.Unique(), tally.Duplicates(), bad)
	}
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("queue not drained: %v %d", err, len(out.Messages))
	}
}
