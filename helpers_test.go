package gapless_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/schema"
)

// The examples and tests run against the local stack (started here unless make test's
// scripts/with-stack.sh exported its endpoints).
func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

// stack is a fresh set of the resources the functions name, for the examples (which have no
// testing.TB to hand stacktest): it panics on error.
type stack struct {
	aws    aws.Config
	stream string
	env    map[string]string
}

func newStack() *stack {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	must(err)
	name := func(p string) string {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		return p + "-" + hex.EncodeToString(b)
	}
	s := &stack{aws: cfg, stream: name("stream")}
	cp, ledger, bucket := name("checkpoint"), name("ledger"), name("payloads")
	must(schema.EnsureTables(ctx, dynamodb.NewFromConfig(cfg), schema.CheckpointTable(cp), schema.LedgerTable(ledger)))
	parked, err := schema.EnsureQueue(ctx, sqs.NewFromConfig(cfg), schema.Queue{Name: name("parked")})
	must(err)
	must(schema.EnsureBucket(ctx, s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = true }), bucket))
	_, err = schema.EnsureStream(ctx, kinesis.NewFromConfig(cfg), s.stream, 1)
	must(err)
	s.env = map[string]string{
		"GAPLESS_GROUP": "example", "CHECKPOINT_TABLE": cp, "DEDUPE_TABLE": ledger, "PARKED_QUEUE_URL": parked,
		"PAYLOAD_BUCKET": bucket, "STREAM_NAME": s.stream, "SETTLE_AFTER": "1ms",
	}
	return s
}

func (s *stack) getenv(k string) string {
	if v, ok := s.env[k]; ok {
		return v
	}
	return os.Getenv(k)
}

// put writes records (partition key "k") to the stream and returns them as the event-source
// mapping would deliver them.
func (s *stack) put(payloads ...string) events.KinesisEvent {
	ctx := context.Background()
	kin := kinesis.NewFromConfig(s.aws)
	var ev events.KinesisEvent
	for _, p := range payloads {
		out, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.stream), PartitionKey: aws.String("k"), Data: []byte(p)})
		must(err)
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			EventSource: "aws:kinesis", EventName: "aws:kinesis:record", EventVersion: "1.0", AwsRegion: s.aws.Region,
			EventID:        aws.ToString(out.ShardId) + ":" + aws.ToString(out.SequenceNumber),
			EventSourceArn: fmt.Sprintf("arn:aws:kinesis:%s:000000000000:stream/%s", s.aws.Region, s.stream),
			Kinesis: events.KinesisRecord{Data: []byte(p), PartitionKey: "k", SequenceNumber: aws.ToString(out.SequenceNumber),
				KinesisSchemaVersion: "1.0", ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Now()}},
		})
	}
	return ev
}

func raw(ev events.KinesisEvent) json.RawMessage {
	b, err := json.Marshal(ev)
	must(err)
	return b
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
