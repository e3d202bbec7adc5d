package devcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/schema"
)

func TestInvokeUsage(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no function":      {[]string{"-e", "x.json"}, "which function? give the logical id of an AWS::Serverless::Function"},
		"unknown function": {[]string{"OtherFunction", "-e", "x.json"}, `unknown function "OtherFunction"`},
		"misspelt":         {[]string{"ConsumerFuntion", "-e", "x.json"}, `(did you mean "ConsumerFunction"?)`},
		"no event":         {[]string{"ConsumerFunction"}, "-e <event.json> is required"},
		"extra argument":   {[]string{"ConsumerFunction", "-e", "x.json", "more"}, `unexpected argument "more"`},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := runInvoke(context.Background(), tc.args, &bytes.Buffer{}, &stderr)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
	o, err := parseInvokeFlags([]string{"-e", "ev.json", "--env", "e.json", "ConsumerFunction"}, &bytes.Buffer{})
	if err != nil || o.function != "ConsumerFunction" || o.event != "ev.json" || o.envFile != "e.json" {
		t.Errorf("flags before the function: %+v %v", o, err)
	}
}

// TestInvokeConsumer builds the consumer, runs it under aws-lambda-rie against a local stack
// with events/kinesis-clean.json, and checks the response on stdout, the function's logs on
// stderr, and the ten records forwarded to the target queue.
func TestInvokeConsumer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the function and the emulator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	stackEnv := testStack(t, ctx, state)

	// env.json with names unique to this run, so runs never share tables or queues.
	var envs map[string]map[string]string
	b, err := os.ReadFile(filepath.Join(root, "events", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &envs); err != nil {
		t.Fatal(err)
	}
	suffix := time.Now().Format("150405.000000")
	suffix = strings.ReplaceAll(suffix, ".", "-")
	fn := envs["ConsumerFunction"]
	fn[config.EnvCheckpointTable] = "invoke-checkpoint-" + suffix
	fn[config.EnvDedupeTable] = "invoke-ledger-" + suffix
	fn[config.EnvParkedQueueURL] = "http://127.0.0.1:1/000000000000/invoke-parked-" + suffix
	fn[config.EnvTargetQueueURL] = "http://127.0.0.1:1/000000000000/invoke-target-" + suffix
	envFile := filepath.Join(t.TempDir(), "env.json")
	b, _ = json.Marshal(envs)
	if err := os.WriteFile(envFile, b, 0o644); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	args := []string{"ConsumerFunction", "-e", filepath.Join(root, "events", "kinesis-clean.json"), "--env", envFile, "--state", state, "--timeout", "30s"}
	if err := runInvoke(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("invoke: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != `{"batchItemFailures":null}` {
		t.Errorf("stdout = %q, want the complete-success response", got)
	}
	if !strings.Contains(stderr.String(), `"msg":"batch done"`) || !strings.Contains(stderr.String(), `"processed":10`) {
		t.Errorf("stderr lacks the function's logs:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(state, "build", "ConsumerFunction", "bootstrap")); err != nil {
		t.Errorf("bootstrap not in the state directory's build/<LogicalId>: %v", err)
	}

	// The default Process forwarded every record to the target queue.
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(stackEnv["AWS_ENDPOINT_URL_SQS"]) })
	url, err := schema.EnsureQueue(ctx, client, schema.Queue{Name: "invoke-target-" + suffix})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); len(seen) < 10 && time.Now().Before(deadline); {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			seen[aws.ToString(m.Body)] = true
		}
	}
	if len(seen) != 10 || !seen[`{"id":"order-0001","amount":89.19}`] {
		t.Errorf("target queue holds %d distinct records, want the 10 orders", len(seen))
	}
}

// testStack writes a stack.env into state for the endpoints the test run already has
// (make test), or starts DynamoDB and SQS emulators for this test.
func testStack(t *testing.T, ctx context.Context, state string) map[string]string {
	t.Helper()
	ddb, sq := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), os.Getenv("AWS_ENDPOINT_URL_SQS")
	if ddb != "" && sq != "" {
		env := map[string]string{
			"AWS_ENDPOINT_URL_DYNAMODB": ddb, "AWS_ENDPOINT_URL_SQS": sq, "AWS_REGION": "us-east-1",
			"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
		}
		var lines []string
		for k, v := range env {
			lines = append(lines, "export "+k+"="+v)
		}
		if err := os.WriteFile(filepath.Join(state, "stack.env"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return env
	}
	procs, err := localstack.Start(ctx, localstack.Options{StateDir: state}, localstack.DynamoDB, localstack.SQS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { localstack.Stop(procs) })
	if err := localstack.WriteState(state, procs); err != nil {
		t.Fatal(err)
	}
	return localstack.Env(procs)
}

// TestInvokeTimeoutRange: invoke's --timeout is held to Lambda's function timeout range
// (1 s to 15 min), refused with the flag's name before anything starts.
func TestInvokeTimeoutRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timeout string
		refused bool
	}{{"0", true}, {"16m", true}, {"15m", false}} {
		t.Run(tc.timeout, func(t *testing.T) {
			_, stderr, code := gapless(t, "invoke", "ConsumerFunction", "-e", "x.json", "--timeout", tc.timeout, "--no-such-flag")
			if code != 2 {
				t.Fatalf("exit %d, want 2 (usage): %s", code, stderr)
			}
			if got := strings.Contains(stderr, "for flag --timeout"); got != tc.refused {
				t.Errorf("--timeout %s: refused %v, want %v: %s", tc.timeout, got, tc.refused, stderr)
			}
		})
	}
}
