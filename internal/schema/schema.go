// Package schema is the one place that defines gapless's DynamoDB tables, SQS queues, the
// payload bucket and the Kinesis stream as the code expects them. template.yaml declares the
// same resources for AWS (a test in the repository root checks the two agree); the local stack,
// tests and the demo create them from here. Production code never creates tables at runtime.
package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Key attribute names shared by both tables; both are strings.
const (
	PartitionKey = "pk"
	SortKey      = "sk"
	// TTLAttribute holds an epoch-seconds expiry on ledger items. DynamoDB deletes expired
	// items lazily, so readers must also treat expiresAt < now as absent.
	TTLAttribute = "expiresAt"
)

// Table describes one DynamoDB table of gapless.
type Table struct {
	Name         string
	TTLAttribute string // empty when the table has no TTL
	// Keys is the key schema of a table that is not one of gapless's (a service's own, as its
	// template declares it); empty for gapless's pk/sk tables.
	Keys []Key
}

// Key is one key attribute of a table: its name, its type (S, N or B) and HASH or RANGE.
type Key struct {
	Name, AttributeType, KeyType string
}

// CheckpointTable and LedgerTable return the definitions for the given physical names.
func CheckpointTable(name string) Table { return Table{Name: name} }

// LedgerTable is the dedupe/ledger table, with TTL on expiresAt.
func LedgerTable(name string) Table { return Table{Name: name, TTLAttribute: TTLAttribute} }

// CreateTableInput is the exact CreateTable request for t: pk (HASH, S), sk (RANGE, S), or
// t.Keys when set; on-demand billing.
func (t Table) CreateTableInput() *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName: aws.String(t.Name),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String(PartitionKey), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String(SortKey), AttributeType: ddbtypes.ScalarAttributeTypeS},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String(PartitionKey), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String(SortKey), KeyType: ddbtypes.KeyTypeRange},
		},
		BillingMode: ddbtypes.BillingModePayPerRequest,
	}
	if len(t.Keys) == 0 {
		return in
	}
	in.AttributeDefinitions, in.KeySchema = nil, nil
	for _, k := range t.Keys {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{AttributeName: aws.String(k.Name), AttributeType: ddbtypes.ScalarAttributeType(k.AttributeType)})
		in.KeySchema = append(in.KeySchema, ddbtypes.KeySchemaElement{AttributeName: aws.String(k.Name), KeyType: ddbtypes.KeyType(k.KeyType)})
	}
	return in
}

// DynamoDBAPI is the subset of *dynamodb.Client used to create tables.
type DynamoDBAPI interface {
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// EnsureTables creates the tables that do not exist yet and waits until they are ACTIVE.
// TTL is enabled where the endpoint supports it (dynalite has no TTL API; readers never
// depend on TTL deletion anyway).
func EnsureTables(ctx context.Context, client DynamoDBAPI, tables ...Table) error {
	for _, t := range tables {
		_, err := client.CreateTable(ctx, t.CreateTableInput())
		var inUse *ddbtypes.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("schema: create table %s: %w", t.Name, err)
		}
		w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = 20*time.Millisecond, 500*time.Millisecond
		})
		if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.Name)}, 2*time.Minute); err != nil {
			return fmt.Errorf("schema: wait for table %s: %w", t.Name, err)
		}
		if t.TTLAttribute != "" {
			_, _ = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName: aws.String(t.Name),
				TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
					AttributeName: aws.String(t.TTLAttribute), Enabled: aws.Bool(true),
				},
			})
		}
	}
	return nil
}

// KinesisAPI is the subset of *kinesis.Client used to create a stream.
type KinesisAPI interface {
	CreateStream(context.Context, *kinesis.CreateStreamInput, ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error)
	DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// EnsureStream creates a provisioned stream with the given shard count unless it exists, and
// waits until it is ACTIVE. It returns the stream ARN.
func EnsureStream(ctx context.Context, client KinesisAPI, name string, shards int32) (string, error) {
	_, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)})
	var inUse *kintypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return "", fmt.Errorf("schema: create stream %s: %w", name, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			return "", fmt.Errorf("schema: describe stream %s: %w", name, err)
		}
		if out.StreamDescriptionSummary.StreamStatus == kintypes.StreamStatusActive {
			return aws.ToString(out.StreamDescriptionSummary.StreamARN), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("schema: stream %s not ACTIVE after a minute", name)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Queue describes one SQS queue of gapless.
type Queue struct {
	Name string
	FIFO bool
	// RetentionSeconds is MessageRetentionPeriod; 0 keeps the SQS default (4 days).
	RetentionSeconds int
}

// ParkedRetentionSeconds is the parked queue's retention: the SQS maximum, 14 days, so a parked
// record outlives any stream retention while someone fixes the cause.
const ParkedRetentionSeconds = 14 * 24 * 3600

// SQSAPI is the subset of *sqs.Client used to create queues.
type SQSAPI interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
}

// EnsureQueue creates the queue (idempotent in SQS) and returns its URL.
func EnsureQueue(ctx context.Context, client SQSAPI, q Queue) (string, error) {
	attrs := map[string]string{}
	if q.FIFO {
		attrs[string(sqstypes.QueueAttributeNameFifoQueue)] = "true"
	}
	if q.RetentionSeconds > 0 {
		attrs[string(sqstypes.QueueAttributeNameMessageRetentionPeriod)] = fmt.Sprint(q.RetentionSeconds)
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.Name), Attributes: attrs})
	if err != nil {
		return "", fmt.Errorf("schema: create queue %s: %w", q.Name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// PayloadBucket is the local name of the payload bucket (PAYLOAD_BUCKET): the S3 bucket holding
// payloads too large for an SQS message, claim-check style — parked records (internal/park) and
// records the default Process forwards (package process). template.yaml declares it for AWS (its
// name chosen by CloudFormation); the local stack, tests and the demo create it from here.
const PayloadBucket = "gapless-payloads"

// PayloadRetentionDays is the payload bucket's lifecycle expiration. It must exceed every queue
// retention whose messages name an object in it (ParkedRetentionSeconds, 14 days, and the target
// queue's 14 days), so an object outlives any message that points at it; S3 rounds expiration up
// to the next midnight UTC, which only lengthens it. deploy/template_test.go checks the template.
const PayloadRetentionDays = 15

// S3API is the subset of *s3.Client used to create a bucket.
type S3API interface {
	CreateBucket(context.Context, *s3.CreateBucketInput, ...func(*s3.Options)) (*s3.CreateBucketOutput, error)
}

// EnsureBucket creates the bucket unless this account already owns it. Locally only: in AWS the
// bucket (encryption, public-access block, lifecycle) is template.yaml's PayloadBucket.
func EnsureBucket(ctx context.Context, client S3API, name string) error {
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	var owned *s3types.BucketAlreadyOwnedByYou
	var exists *s3types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		return fmt.Errorf("schema: create bucket %s: %w", name, err)
	}
	return nil
}
