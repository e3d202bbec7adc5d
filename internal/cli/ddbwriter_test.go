package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

// TestRedriveDDBWriter: examples/ddbwriter, a service of its own, end to end on the local
// stack. Its consumer (its own main, under the runtime emulator) cannot write a record (its
// output table is missing) and parks it after MAX_RECORD_ATTEMPTS; after the fix (the table is
// created), `gapless redrive` runs ddbwriter's own reconciler main, which writes the record
// into ddbwriter's table and deletes the parked message.
func TestRedriveDDBWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example's two functions")
	}
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	example := filepath.Join(root, "examples", "ddbwriter")
	s := newOpsStack(t)
	output := stacktest.Name(t, "orders")
	env := map[string]string{
		"GAPLESS_GROUP": "ddbwriter", "STREAM_NAME": s.stream, "CHECKPOINT_TABLE": s.cpTable, "DEDUPE_TABLE": s.ledgerTable,
		"PARKED_QUEUE_URL": s.parkedURL, "PAYLOAD_BUCKET": s.bucket, "OUTPUT_TABLE": output, "MAX_RECORD_ATTEMPTS": "2",
		"AWS_LAMBDA_FUNCTION_NAME": "ConsumerFunction",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The consumer, as `sam build` builds it, gets the record twice (the mapping's retry).
	boot := filepath.Join(t.TempDir(), "bootstrap")
	if err := rie.Build(ctx, example, "./functions/consumer", boot); err != nil {
		t.Fatalf("build ddbwriter's consumer: %v", err)
	}
	var logs syncbuf.Buffer
	inst, err := rie.Start(ctx, rie.Options{Bootstrap: boot, Env: env, Timeout: 60 * time.Second, LogWriter: &logs})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	data := []byte(`{"order":"order-1","amount":42}`)
	put, err := s.kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.stream), PartitionKey: aws.String("customer-1"), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	shard, seq := aws.ToString(put.ShardId), aws.ToString(put.SequenceNumber)
	ev, err := json.Marshal(events.KinesisEvent{Records: []events.KinesisEventRecord{{
		EventSource: "aws:kinesis", EventName: "aws:kinesis:record", EventVersion: "1.0", AwsRegion: "us-east-1",
		EventID: shard + ":" + seq, EventSourceArn: "arn:aws:kinesis:us-east-1:000000000000:stream/" + s.stream,
		Kinesis: events.KinesisRecord{Data: data, PartitionKey: "customer-1", SequenceNumber: seq, KinesisSchemaVersion: "1.0",
			ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Now()}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if _, err := inst.Invoke(ctx, ev); err != nil {
			t.Fatalf("consumer attempt %d: %v\n%s", attempt, err, logs.String())
		}
	}
	msgs := s.parked()
	if len(msgs) != 1 || msgs[0].RecordID != shard+":"+seq+":0" {
		t.Fatalf("parked %+v, want the record parked after 2 attempts\n%s", msgs, logs.String())
	}
	s.requeue(msgs[0])

	// The fix: the table the Process writes to exists now.
	if _, err := s.ddb.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(output), BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(s.ddb, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay, o.MaxDelay = 100*time.Millisecond, time.Second }).
		Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(output)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), "env.json")
	sections, err := json.Marshal(map[string]map[string]string{"ReconcilerFunction": env})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envFile, sections, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := gapless(t, "redrive", "--json", "--function-dir", filepath.Join(example, "functions", "reconciler"), "--env", envFile,
		"--timeout", "60s")
	if code != 0 {
		t.Fatalf("redrive: exit %d\n%s%s", code, stdout, stderr)
	}
	if r := decodeJSON[redriveJSON](t, stdout); r.Received != 1 || r.Processed != 1 {
		t.Errorf("redrive %+v, want the record processed", r)
	}
	item, err := s.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(output), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: shard + ":" + seq + ":0"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := item.Item["data"].(*ddbtypes.AttributeValueMemberB); !ok || string(got.Value) != string(data) {
		t.Errorf("ddbwriter's table holds %v for the record, want its data %s\n%s", item.Item, data, stderr)
	}
	if left := s.parked(); len(left) != 0 {
		t.Errorf("%d parked messages left", len(left))
	}
}
