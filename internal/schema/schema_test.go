package schema_test

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/schema"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

func TestEnsureTablesIsIdempotentAndMatchesKeySchema(t *testing.T) {
	ctx := context.Background()
	ddb := stacktest.DynamoDB(t)
	tbl := schema.LedgerTable(stacktest.Name(t, "ledger"))
	for i := 0; i < 2; i++ {
		if err := schema.EnsureTables(ctx, ddb, tbl); err != nil {
			t.Fatalf("EnsureTables (call %d): %v", i+1, err)
		}
	}
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(tbl.Name)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, k := range out.Table.KeySchema {
		got[aws.ToString(k.AttributeName)] = string(k.KeyType)
	}
	if got[schema.PartitionKey] != "HASH" || got[schema.SortKey] != "RANGE" || len(got) != 2 {
		t.Fatalf("key schema = %v", got)
	}
}

func TestEnsureStreamAndQueue(t *testing.T) {
	ctx := context.Background()
	name := stacktest.Name(t, "stream")
	arn, err := schema.EnsureStream(ctx, stacktest.Kinesis(t), name, 2)
	if err != nil {
		t.Fatal(err)
	}
	if arn == "" {
		t.Fatal("empty stream ARN")
	}
	shards, err := stacktest.Kinesis(t).ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(shards.Shards) != 2 {
		t.Fatalf("got %d shards, want 2", len(shards.Shards))
	}
	for _, fifo := range []bool{false, true} {
		url := stacktest.Queue(t, "q", fifo)
		if _, err := stacktest.SQS(t).SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String("hello"),
			MessageGroupId: groupID(fifo), MessageDeduplicationId: groupID(fifo),
		}); err != nil {
			t.Fatalf("send to fifo=%v queue: %v", fifo, err)
		}
	}
}

func groupID(fifo bool) *string {
	if fifo {
		return aws.String("g")
	}
	return nil
}

// TestEnsureBucketIsIdempotent: the payload bucket on the SQS emulator's S3 (fauxqs or moto).
func TestEnsureBucketIsIdempotent(t *testing.T) {
	ctx := context.Background()
	client := stacktest.S3(t)
	name := stacktest.Name(t, "payloads")
	for i := 0; i < 2; i++ {
		if err := schema.EnsureBucket(ctx, client, name); err != nil {
			t.Fatalf("EnsureBucket (call %d): %v", i+1, err)
		}
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	if schema.PayloadRetentionDays*24*3600 <= schema.ParkedRetentionSeconds {
		t.Errorf("payload objects (%d days) must outlive parked messages (%ds)", schema.PayloadRetentionDays, schema.ParkedRetentionSeconds)
	}
}

// TestCreateTableInputKeys: a table with Keys (a service's own, as its template declares it) is
// created with exactly those keys; gapless's tables keep pk/sk.
func TestCreateTableInputKeys(t *testing.T) {
	own := schema.Table{Name: "out", Keys: []schema.Key{{Name: "id", AttributeType: "S", KeyType: "HASH"}, {Name: "at", AttributeType: "N", KeyType: "RANGE"}}}
	in := own.CreateTableInput()
	if len(in.KeySchema) != 2 || aws.ToString(in.KeySchema[0].AttributeName) != "id" || in.KeySchema[1].KeyType != "RANGE" ||
		len(in.AttributeDefinitions) != 2 || in.AttributeDefinitions[1].AttributeType != "N" {
		t.Errorf("own table: keys %+v, attributes %+v", in.KeySchema, in.AttributeDefinitions)
	}
	if in := schema.CheckpointTable("cp").CreateTableInput(); aws.ToString(in.KeySchema[0].AttributeName) != schema.PartitionKey || aws.ToString(in.KeySchema[1].AttributeName) != schema.SortKey {
		t.Errorf("checkpoint table keys %+v", in.KeySchema)
	}
}
