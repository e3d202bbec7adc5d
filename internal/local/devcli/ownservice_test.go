package devcli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestOwnServiceOutsideTheRepo: a service of its own (a copy of examples/ddbwriter in a
// directory outside the checkout, its go.mod's replace pointing at the checkout) is brought up
// from its template (its output table with the template's key, the failure queues and the
// payload bucket by their env-file or logical-id names), and both its functions are built by
// its makefile and invoked, the consumer with an event generate-event printed, whose records
// land in the output table.
func TestOwnServiceOutsideTheRepo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a stack and builds a module")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if strings.HasPrefix(dir, root) {
		t.Fatalf("temp dir %s is inside the checkout", dir)
	}
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples", "ddbwriter"))); err != nil {
		t.Fatal(err)
	}
	gomod := filepath.Join(dir, "go.mod")
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`(?m)^replace github.com/gapless-dev/gapless => .*$`).ReplaceAll(b, []byte("replace github.com/gapless-dev/gapless => "+root))
	if err := os.WriteFile(gomod, b, 0o644); err != nil {
		t.Fatal(err)
	}
	suffix := strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	common := map[string]string{
		"GAPLESS_GROUP": "svc", "CHECKPOINT_TABLE": "svc-checkpoint-" + suffix, "DEDUPE_TABLE": "svc-ledger-" + suffix,
		"PARKED_QUEUE_URL": "http://127.0.0.1:1/000000000000/svc-parked-" + suffix, "PAYLOAD_BUCKET": "svc-payloads-" + suffix,
		"STREAM_NAME": "svc-stream-" + suffix, "OUTPUT_TABLE": "svc-output-" + suffix,
	}
	reconciler := map[string]string{"STREAM_ARN": "", "MAXIMUM_RECORD_AGE_SECONDS": "", "CONSUMER_FUNCTION_ARN": ""}
	for k, v := range common {
		reconciler[k] = v
	}
	envJSON, _ := json.Marshal(map[string]map[string]string{"ConsumerFunction": common, "ReconcilerFunction": reconciler})
	if err := os.MkdirAll(filepath.Join(dir, "events"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "events", "env.json"), envJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	payloads := filepath.Join(dir, "payloads.jsonl")
	if err := os.WriteFile(payloads, []byte("{\"id\":\"a-1\"}\n{\"id\":\"a-2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv(localstack.RootEnvVar, root) // the test binary is not in the checkout's bin/
	gd := func(args ...string) (string, string) {
		t.Helper()
		var o, e bytes.Buffer
		if code := run(ctx, args, &o, &e); code != 0 {
			t.Fatalf("gapless-dev %s: exit %d\n%s", strings.Join(args, " "), code, e.String())
		}
		return o.String(), e.String()
	}
	t.Cleanup(func() { run(context.Background(), []string{"down"}, &bytes.Buffer{}, &bytes.Buffer{}) })

	gd("up", "--template", "template.yaml", "--free-ports")
	rec, ok, err := localstack.ReadState(filepath.Join(dir, ".local"))
	if err != nil || !ok {
		t.Fatalf("up wrote no .local/stack.env next to the template: %v", err)
	}
	if rec.Env["CHECKPOINT_TABLE"] != common["CHECKPOINT_TABLE"] || rec.Env["STREAM_NAME"] != common["STREAM_NAME"] {
		t.Errorf("stack.env: CHECKPOINT_TABLE=%q STREAM_NAME=%q, want the env file's", rec.Env["CHECKPOINT_TABLE"], rec.Env["STREAM_NAME"])
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(rec.Env["AWS_ENDPOINT_URL_DYNAMODB"]) })
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(common["OUTPUT_TABLE"])})
	if err != nil {
		t.Fatalf("the template's OutputTable under the env file's OUTPUT_TABLE: %v", err)
	}
	if ks := out.Table.KeySchema; len(ks) != 1 || aws.ToString(ks[0].AttributeName) != "id" {
		t.Errorf("OutputTable's key schema %+v, want the template's id", ks)
	}
	sc := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(rec.Env["AWS_ENDPOINT_URL_SQS"]) })
	for _, q := range []string{"FailureQueue", "FailureDeadLetterQueue", "svc-parked-" + suffix} {
		if _, err := sc.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q)}); err != nil {
			t.Errorf("queue %s: %v", q, err)
		}
	}
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint, o.UsePathStyle = aws.String(rec.Env["AWS_ENDPOINT_URL_SQS"]), true
	})
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(common["PAYLOAD_BUCKET"])}); err != nil {
		t.Errorf("bucket %s: %v", common["PAYLOAD_BUCKET"], err)
	}
	// up again keeps the stack.
	if _, stderr := gd("up", "--free-ports"); !strings.Contains(stderr, "already up: kept it") {
		t.Errorf("second up:\n%s", stderr)
	}

	event, _ := gd("generate-event", "kinesis", "--stream", common["STREAM_NAME"], "payloads.jsonl")
	if err := os.WriteFile("event.json", []byte(event), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr := gd("invoke", "ConsumerFunction", "-e", "event.json")
	if got := strings.TrimSpace(stdout); got != `{"batchItemFailures":null}` {
		t.Errorf("consumer response %q, want complete success\n%s", got, stderr)
	}
	if !strings.Contains(stderr, "make build-ConsumerFunction") {
		t.Errorf("the consumer was not built by its makefile:\n%s", stderr)
	}
	items, err := ddb.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(common["OUTPUT_TABLE"])})
	if err != nil || items.Count != 2 {
		t.Errorf("output table after the invoke: %v, %d items, want the 2 records", err, items.Count)
	}

	// A scheduled pass: any JSON object without Records (docs/reconciler.md).
	if err := os.WriteFile("schedule.json", []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = gd("invoke", "ReconcilerFunction", "-e", "schedule.json")
	if !json.Valid([]byte(stdout)) || strings.TrimSpace(stdout) == "" {
		t.Errorf("reconciler response %q is not JSON\n%s", stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(".local", "build", "ReconcilerFunction", "bootstrap")); err != nil {
		t.Errorf("bootstrap not under .local/build next to the template: %v", err)
	}
}
