// Package stacktest gives integration tests a local AWS stack: it reuses endpoints already
// named by AWS_ENDPOINT_URL_KINESIS / _DYNAMODB / _SQS / _S3 (as `make test` and `make test-moto`
// set them; S3 is the SQS emulator's port, fauxqs and moto_server both serve it) and starts a private emulator on a free loopback port for each one that is not, so
// `go test ./...` works from a clean clone. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.DynamoDB)) }
package stacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/schema"
)

var envName = map[localstack.Service]string{
	localstack.Kinesis:  "AWS_ENDPOINT_URL_KINESIS",
	localstack.DynamoDB: "AWS_ENDPOINT_URL_DYNAMODB",
	localstack.SQS:      "AWS_ENDPOINT_URL_SQS",
}

// Run makes the services available, runs the tests and stops what it started.
func Run(m *testing.M, services ...localstack.Service) int {
	var missing []localstack.Service
	for _, s := range services {
		if os.Getenv(envName[s]) == "" {
			missing = append(missing, s)
		}
	}
	var procs []*localstack.Process
	if len(missing) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var err error
		procs, err = localstack.Start(ctx, localstack.Options{StateDir: stateDir()}, missing...)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "stacktest:", err)
			return 1
		}
	}
	for k, v := range localstack.Env(procs) {
		if os.Getenv(k) == "" || strings.HasPrefix(k, "AWS_ENDPOINT_URL_") {
			os.Setenv(k, v)
		}
	}
	if os.Getenv("AWS_ENDPOINT_URL_S3") == "" && os.Getenv("AWS_ENDPOINT_URL_SQS") != "" {
		os.Setenv("AWS_ENDPOINT_URL_S3", os.Getenv("AWS_ENDPOINT_URL_SQS")) // a stack.env written before S3 was named
	}
	for k, v := range map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	code := m.Run()
	localstack.Stop(procs)
	return code
}

func stateDir() string {
	root, err := localstack.FindRoot()
	if err != nil {
		return os.TempDir()
	}
	return root + "/.local/test"
}

// Config loads an SDK config for the stack (endpoints from AWS_ENDPOINT_URL_*), with short
// retry backoff so fault tests do not crawl.
func Config(tb testing.TB) aws.Config {
	tb.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = 200 * time.Millisecond })
		}))
	if err != nil {
		tb.Fatalf("stacktest: load config: %v", err)
	}
	return cfg
}

// DynamoDB, Kinesis and SQS return clients for the stack.
func DynamoDB(tb testing.TB) *dynamodb.Client { return dynamodb.NewFromConfig(Config(tb)) }

// Kinesis returns a Kinesis client for the stack.
func Kinesis(tb testing.TB) *kinesis.Client { return kinesis.NewFromConfig(Config(tb)) }

// SQS returns an SQS client for the stack.
func SQS(tb testing.TB) *sqs.Client { return sqs.NewFromConfig(Config(tb)) }

// S3 returns an S3 client for the stack (path-style, as the emulators serve it).
func S3(tb testing.TB) *s3.Client {
	return s3.NewFromConfig(Config(tb), func(o *s3.Options) { o.UsePathStyle, o.DisableLogOutputChecksumValidationSkipped = true, true })
}

// Bucket creates a fresh payload bucket and returns its name.
func Bucket(tb testing.TB) string {
	tb.Helper()
	name := Name(tb, "payloads")
	if err := schema.EnsureBucket(context.Background(), S3(tb), name); err != nil {
		tb.Fatalf("stacktest: %v", err)
	}
	return name
}

// Name returns a name unique to this test run, safe for tables, queues and streams.
func Name(tb testing.TB, prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// CheckpointTable creates a fresh checkpoint table and returns its name.
func CheckpointTable(tb testing.TB) string {
	tb.Helper()
	return createTable(tb, schema.CheckpointTable(Name(tb, "checkpoint")))
}

// LedgerTable creates a fresh ledger table and returns its name.
func LedgerTable(tb testing.TB) string {
	tb.Helper()
	return createTable(tb, schema.LedgerTable(Name(tb, "ledger")))
}

func createTable(tb testing.TB, t schema.Table) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := schema.EnsureTables(ctx, DynamoDB(tb), t); err != nil {
		tb.Fatalf("stacktest: %v", err)
	}
	return t.Name
}

// Queue creates a fresh queue and returns its URL.
func Queue(tb testing.TB, prefix string, fifo bool) string {
	tb.Helper()
	name := Name(tb, prefix)
	if fifo {
		name += ".fifo"
	}
	url, err := schema.EnsureQueue(context.Background(), SQS(tb), schema.Queue{Name: name, FIFO: fifo})
	if err != nil {
		tb.Fatalf("stacktest: %v", err)
	}
	return url
}

// Stream creates a fresh stream with the given shard count and returns its name and ARN.
func Stream(tb testing.TB, shards int32) (name, arn string) {
	tb.Helper()
	name = Name(tb, "stream")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := Kinesis(tb)
	arn, err := schema.EnsureStream(ctx, client, name, shards)
	if err != nil {
		tb.Fatalf("stacktest: %v", err)
	}
	// Free the stream's shards for the other packages sharing the stack.
	tb.Cleanup(func() {
		_, _ = client.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{
			StreamName: aws.String(name), EnforceConsumerDeletion: aws.Bool(true),
		})
	})
	return name, arn
}
