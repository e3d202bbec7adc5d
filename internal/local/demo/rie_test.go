package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestMainsApplyChaos: the repository's function mains link internal/local/chaos, so the demo can
// inject faults into the real bootstraps (runtime auto picks the emulator).
func TestMainsApplyChaos(t *testing.T) {
	t.Parallel()
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	ok, missing, why := mainsApplyChaos(context.Background(), root)
	if !ok || missing {
		t.Fatalf("mainsApplyChaos = %v (missing %v): %s", ok, missing, why)
	}
	ok, missing, why = mainsApplyChaos(context.Background(), t.TempDir())
	if ok || !missing || !strings.Contains(why, "functions/consumer/main.go is missing") {
		t.Fatalf("empty directory: ok %v, missing %v, %q", ok, missing, why)
	}
}

func TestFunctionEnvironment(t *testing.T) {
	t.Parallel()
	fe := functionEnv{group: "demo", stream: "s", checkpointTable: "cp", ledgerTable: "lg", targetURL: "t", parkedURL: "p",
		kinesisURL: "http://127.0.0.1:1", consumerDDB: "http://127.0.0.1:2", consumerSQS: "http://127.0.0.1:3",
		reconcilerDDB: "http://127.0.0.1:4", reconcilerSQS: "http://127.0.0.1:5", s3URL: "http://127.0.0.1:6", maxRecordAttempts: 5,
		deadlineMargin: consumerDeadlineMargin(DefaultConfig().FunctionTimeout), settleAfter: DefaultConfig().SettleAfter,
		chaos: DefaultConfig().withDefaults().chaosConfig("/tmp/state")}
	fe.awsCfg.Region = "us-east-1"
	c, r := consumerEnv(fe), reconcilerEnv(fe)
	for k, want := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:2", "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:3",
		"AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:1", "DEADLINE_MARGIN": "2s", "MAX_RECORD_ATTEMPTS": "5",
		"GAPLESS_CHAOS":     "seed=1,transient=0.03,panic=0.005,slow=0.002,slowfor=12s,crash=0.001,hang=0.001,hangfor=12s,poison=true,state=/tmp/state",
		"AWS_ACCESS_KEY_ID": "local",
		"PAYLOAD_BUCKET":    "gapless-payloads", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:6",
	} {
		if c[k] != want {
			t.Errorf("consumer %s = %q, want %q", k, c[k], want)
		}
	}
	for k, want := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:4", "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:5",
		"STREAM_NAME": "s", "SETTLE_AFTER": "5s", "MAXIMUM_RECORD_AGE_SECONDS": "-1",
	} {
		if r[k] != want {
			t.Errorf("reconciler %s = %q, want %q", k, r[k], want)
		}
	}
}

// TestMaxRecordAgeSeconds: the demo's mapping age as the reconciler's MAXIMUM_RECORD_AGE_SECONDS,
// which takes only what Lambda takes (-1, or 60-604800 seconds).
func TestMaxRecordAgeSeconds(t *testing.T) {
	t.Parallel()
	for age, want := range map[time.Duration]string{0: "-1", 30 * time.Second: "60", 90*time.Second + time.Millisecond: "91", time.Hour: "3600"} {
		if got := maxRecordAgeSeconds(age); got != want {
			t.Errorf("maxRecordAgeSeconds(%s) = %s, want %s", age, got, want)
		}
	}
}
