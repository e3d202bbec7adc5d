package ddbwriter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless"

	"example.com/ddbwriter"
)

type putFunc func(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)

func (f putFunc) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return f(ctx, in, o...)
}

// TestProcessIsIdempotent: the write is conditional on the record's id; a failed condition (the
// item is there) is success, any other error fails the record.
func TestProcessIsIdempotent(t *testing.T) {
	r := gapless.Record{ShardID: "shardId-000000000000", SequenceNumber: "49590338271490256608559692538361571095921575989136588818",
		PartitionKey: "k", Data: []byte("order-1")}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"first write", nil, false},
		{"already written", &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}, false},
		{"throttled", &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *dynamodb.PutItemInput
			w := ddbwriter.New(putFunc(func(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
				got = in
				return &dynamodb.PutItemOutput{}, tc.err
			}), "orders")
			if err := w.Process(context.Background(), r); (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if aws.ToString(got.ConditionExpression) != "attribute_not_exists(#id)" || got.ExpressionAttributeNames["#id"] != ddbwriter.AttrID {
				t.Errorf("unconditional put: %+v", got)
			}
			if id, ok := got.Item[ddbwriter.AttrID].(*types.AttributeValueMemberS); !ok || id.Value != r.ID() {
				t.Errorf("item key %#v, want %s", got.Item[ddbwriter.AttrID], r.ID())
			}
		})
	}
}

// localStack returns an SDK configuration for the local stack whose endpoints scripts/with-stack.sh
// exports (make test), or skips the test when none is set.
func localStack(t *testing.T) aws.Config {
	t.Helper()
	for _, v := range []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3"} {
		if os.Getenv(v) == "" {
			t.Skipf("no local stack: %s is not set. `make test` runs this test against the stack scripts/with-stack.sh starts; "+
				"by hand: `make up && . .local/stack.env` in the repository root, then go test here", v)
		}
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// createTable creates a table keyed as template.yaml declares it (hash key, range key or none).
func createTable(t *testing.T, ddb *dynamodb.Client, name string, keys ...string) {
	t.Helper()
	in := &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: types.BillingModePayPerRequest}
	for i, k := range keys {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(k), AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(k), KeyType: []types.KeyType{types.KeyTypeHash, types.KeyTypeRange}[i]})
	}
	if _, err := ddb.CreateTable(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, time.Second // the emulators are quick; the default polls every 20s
	}).Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestWritesEveryRecordOnce runs the service's two functions, built as its mains build them,
// against the local stack: the consumer writes the records it is given (a redelivered batch
// writes nothing twice), a record it never saw is written by the reconciler's pass, and the
// output table ends with every record of the stream exactly once.
func TestWritesEveryRecordOnce(t *testing.T) {
	cfg := localStack(t)
	ctx := context.Background()
	ddb, kin := dynamodb.NewFromConfig(cfg), kinesis.NewFromConfig(cfg)
	// What template.yaml creates: the checkpoint and ledger tables (pk, sk), the output table (id),
	// the parked queue, the payload bucket and the stream.
	cp, ledger, output := unique("checkpoint"), unique("ledger"), unique("orders")
	createTable(t, ddb, cp, "pk", "sk")
	createTable(t, ddb, ledger, "pk", "sk")
	createTable(t, ddb, output, ddbwriter.AttrID)
	parked, err := sqs.NewFromConfig(cfg).CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(unique("parked"))})
	if err != nil {
		t.Fatal(err)
	}
	bucket := unique("payloads")
	if _, err := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	stream := unique("stream")
	if _, err := kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = kin.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(stream)})
	})
	if err := kinesis.NewStreamExistsWaiter(kin, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, time.Second
	}).Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(stream)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GAPLESS_GROUP": "ddbwriter", "CHECKPOINT_TABLE": cp, "DEDUPE_TABLE": ledger, "PARKED_QUEUE_URL": aws.ToString(parked.QueueUrl),
		"PAYLOAD_BUCKET": bucket, "STREAM_NAME": stream, "SETTLE_AFTER": "1ms",
	}
	opts := []gapless.Option{gapless.WithAWSConfig(cfg), gapless.WithOutput(io.Discard),
		gapless.WithGetenv(func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return os.Getenv(k)
		})}
	process := ddbwriter.New(ddb, output).Process
	consumer, err := gapless.NewConsumer(ctx, process, opts...)
	if err != nil {
		t.Fatal(err)
	}
	reconciler, err := gapless.NewReconciler(ctx, process, opts...)
	if err != nil {
		t.Fatal(err)
	}

	var ev events.KinesisEvent
	want := map[string]string{} // record id -> data
	for i := range 6 {
		data := fmt.Sprintf(`{"order":"order-%d"}`, i)
		out, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String(fmt.Sprint("customer-", i%2)), Data: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		shard, seq := aws.ToString(out.ShardId), aws.ToString(out.SequenceNumber)
		want[gapless.Record{ShardID: shard, SequenceNumber: seq}.ID()] = data
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			EventSource: "aws:kinesis", EventName: "aws:kinesis:record", EventVersion: "1.0", AwsRegion: cfg.Region,
			EventID: shard + ":" + seq, EventSourceArn: "arn:aws:kinesis:" + cfg.Region + ":123456789012:stream/" + stream,
			Kinesis: events.KinesisRecord{Data: []byte(data), PartitionKey: fmt.Sprint("customer-", i%2), SequenceNumber: seq, KinesisSchemaVersion: "1.0",
				ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Now()}},
		})
	}
	// The consumer never sees record 2 (a skipped batch); the mapping delivers the rest twice.
	seen := events.KinesisEvent{Records: append(append([]events.KinesisEventRecord{}, ev.Records[:2]...), ev.Records[3:]...)}
	for range 2 {
		resp, err := consumer.Handle(ctx, seen)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("consumer: %+v, %v", resp, err)
		}
	}
	if got := scan(t, ddb, output); len(got) != 5 {
		t.Fatalf("after the consumer: %d items, want 5", len(got))
	}
	if _, err := reconciler.Handle(ctx, []byte(`{}`)); err != nil {
		t.Fatalf("reconciler: %v", err)
	}
	got := scan(t, ddb, output)
	if len(got) != len(want) {
		t.Errorf("after the reconciler: %d items, want %d", len(got), len(want))
	}
	for id, data := range want {
		if got[id] != data {
			t.Errorf("record %s: item data %q, want %q", id, got[id], data)
		}
	}
	// A record processed again (a retry after a lost ledger write, a redrive) is no error and
	// changes nothing: the first write stands.
	again := gapless.Record{ShardID: shardOf(ev.Records[0]), SequenceNumber: ev.Records[0].Kinesis.SequenceNumber, Data: []byte("again")}
	if err := process(ctx, again); err != nil {
		t.Fatalf("processing record 0 again: %v", err)
	}
	if got := scan(t, ddb, output); got[again.ID()] != want[again.ID()] || len(got) != len(want) {
		t.Errorf("after processing record 0 again: %d items, its data %q, want %q", len(got), got[again.ID()], want[again.ID()])
	}
}

func shardOf(r events.KinesisEventRecord) string {
	shard, _, _ := strings.Cut(r.EventID, ":")
	return shard
}

// scan reads the output table: record id -> data.
func scan(t *testing.T, ddb *dynamodb.Client, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			id, ok1 := item[ddbwriter.AttrID].(*types.AttributeValueMemberS)
			data, ok2 := item[ddbwriter.AttrData].(*types.AttributeValueMemberB)
			if !ok1 || !ok2 {
				t.Fatalf("item %v", item)
			}
			out[id.Value] = string(data.Value)
		}
	}
	return out
}
