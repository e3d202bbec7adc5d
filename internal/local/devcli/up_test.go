package devcli

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestUpCreatesWhatTheDocsNameAndKeepsARunningStack: `gapless up` creates the stream, tables and
// queues events/env.json names and exports them in stack.env (with AWS_DEFAULT_REGION for the
// aws CLI); a second `up` keeps the running stack and its data instead of replacing it with an
// empty one; asking for the other backend is refused, saying how to restart; a stack.env whose
// processes are gone is replaced.
func TestUpCreatesWhatTheDocsNameAndKeepsARunningStack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a stack")
	}
	state := t.TempDir()
	t.Cleanup(func() { gapless(t, "down", "--state", state) })
	_, stderr, code := gapless(t, "up", "--free-ports", "--state", state)
	if code != 0 {
		t.Fatalf("up: exit %d\n%s", code, stderr)
	}
	rec, ok, err := localstack.ReadState(state)
	if err != nil || !ok {
		t.Fatalf("stack.env: %v %v", ok, err)
	}
	env := rec.Env
	for k, want := range map[string]string{
		"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "GAPLESS_GROUP": fixtures.LocalGroup,
		"STREAM_NAME": fixtures.Stream, "CHECKPOINT_TABLE": fixtures.LocalCheckpointTable, "DEDUPE_TABLE": fixtures.LocalLedgerTable,
	} {
		if env[k] != want {
			t.Errorf("stack.env %s=%q, want %q", k, env[k], want)
		}
	}
	// env.json's queue URLs are fauxqs's on make up's default port: the same URL but the port.
	sqsURL, err := url.Parse(env["AWS_ENDPOINT_URL_SQS"])
	if err != nil {
		t.Fatal(err)
	}
	for k, fixture := range map[string]string{"PARKED_QUEUE_URL": fixtures.LocalParkedQueueURL, "TARGET_QUEUE_URL": fixtures.LocalTargetQueueURL} {
		if want := strings.Replace(fixture, ":4566/", ":"+sqsURL.Port()+"/", 1); env[k] != want {
			t.Errorf("stack.env %s=%q; env.json's URL on this port would be %q", k, env[k], want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	kc := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_KINESIS"]) })
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(fixtures.Stream)})
	if err != nil {
		t.Fatalf("the stream env.json names: %v", err)
	}
	if !hasShard(shards, fixtures.Shard) {
		t.Errorf("stream %s lacks the fixtures' %s", fixtures.Stream, fixtures.Shard)
	}
	sc := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_SQS"]) })
	if _, err := sc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(env["PARKED_QUEUE_URL"]), MessageBody: aws.String("kept")}); err != nil {
		t.Fatalf("the parked queue stack.env names: %v", err)
	}

	// up again: same processes, same data.
	_, stderr, code = gapless(t, "up", "--free-ports", "--state", state)
	if code != 0 || !strings.Contains(stderr, "already up: kept it") {
		t.Fatalf("second up: exit %d\n%s", code, stderr)
	}
	again, _, _ := localstack.ReadState(state)
	if again.Env["AWS_ENDPOINT_URL_SQS"] != env["AWS_ENDPOINT_URL_SQS"] || len(again.Procs) != len(rec.Procs) || again.Procs[0].PID != rec.Procs[0].PID {
		t.Errorf("second up replaced the stack: %+v, was %+v", again, rec)
	}
	out, err := sc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(env["PARKED_QUEUE_URL"]), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "kept" {
		t.Errorf("the message sent before the second up: %v %+v", err, out)
	}

	// The other backend is refused, saying how to restart.
	_, stderr, code = gapless(t, "up", "--backend", "moto", "--free-ports", "--state", state)
	if code != 1 || !strings.Contains(stderr, "already up") || !strings.Contains(stderr, "gapless down --state "+state) {
		t.Errorf("up --backend moto over a dynalite stack: exit %d\n%s", code, stderr)
	}

	// A stack.env whose processes are gone is replaced by a new stack.
	if _, _, code := gapless(t, "down", "--state", state); code != 0 {
		t.Fatal("down failed")
	}
	stale := "export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:1\n# pid kinesis 999999999 " + filepath.Join(state, "x.log") + "\n"
	if err := os.WriteFile(filepath.Join(state, "stack.env"), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = gapless(t, "up", "--free-ports", "--state", state)
	if code != 0 || !strings.Contains(stderr, "is not running") {
		t.Errorf("up over a dead stack: exit %d\n%s", code, stderr)
	}
}

func hasShard(out *kinesis.ListShardsOutput, id string) bool {
	for _, s := range out.Shards {
		if aws.ToString(s.ShardId) == id {
			return true
		}
	}
	return false
}

// TestStackEnvForTheAWSCLI: the aws CLI reads AWS_DEFAULT_REGION, the SDKs AWS_REGION.
func TestStackEnvForTheAWSCLI(t *testing.T) {
	t.Parallel()
	env := localstack.Env(nil)
	if env["AWS_DEFAULT_REGION"] == "" || env["AWS_DEFAULT_REGION"] != env["AWS_REGION"] {
		t.Errorf("Env: AWS_DEFAULT_REGION %q, AWS_REGION %q", env["AWS_DEFAULT_REGION"], env["AWS_REGION"])
	}
}
