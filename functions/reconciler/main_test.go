package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/process"
)

// runMainEnv, set in a test binary's environment, makes that binary run the function's main
// instead of its tests: the cold-start test starts the function as Lambda would without a
// second build of the whole module.
const runMainEnv = "GAPLESS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// setup builds the handler the way main does (its fault options, then the public package) with
// the environment getenv and the output out.
func setup(ctx context.Context, getenv func(string) string, out io.Writer) (*gapless.Reconciler, error) {
	faults, err := faultOptions(getenv)
	if err != nil {
		return nil, err
	}
	return gapless.NewReconciler(ctx, nil, append(faults, gapless.WithGetenv(getenv), gapless.WithOutput(out))...)
}

func fullEnv() map[string]string {
	return map[string]string{
		config.EnvGroup: "g", config.EnvCheckpointTable: "cp", config.EnvDedupeTable: "ledger",
		config.EnvParkedQueueURL: "http://127.0.0.1:1/q/parked", config.EnvTargetQueueURL: "http://127.0.0.1:1/q/target",
		config.EnvStreamName: "stream", config.EnvPayloadBucket: "payloads",
	}
}

func TestSetup(t *testing.T) {
	t.Parallel()
	if _, err := setup(context.Background(), env(fullEnv()), &bytes.Buffer{}); err != nil {
		t.Fatalf("complete configuration: %v", err)
	}
	byARN := fullEnv()
	delete(byARN, config.EnvStreamName)
	byARN[config.EnvStreamARN] = "arn:aws:kinesis:us-east-1:111122223333:stream/stream"
	if _, err := setup(context.Background(), env(byARN), &bytes.Buffer{}); err != nil {
		t.Fatalf("stream given by ARN only: %v", err)
	}
	for _, tc := range []struct{ name, key, value string }{
		{"missing stream", config.EnvStreamName, ""},
		{"bad stream", config.EnvStreamName, "a|b"},
		{"bad stream arn", config.EnvStreamARN, "stream/orders"},
		{"stream arn of another stream", config.EnvStreamARN, "arn:aws:kinesis:us-east-1:111122223333:stream/other"},
		{"bad settle window", config.EnvSettleAfter, "soon"},
		{"record age Lambda refuses", config.EnvMaxRecordAge, "30"},
		{"missing ledger", config.EnvDedupeTable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := fullEnv()
			e[tc.key] = tc.value
			_, err := setup(context.Background(), env(e), &bytes.Buffer{})
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("err = %v, want an ErrInvalid naming %s", err, tc.key)
			}
		})
	}
}

// buildBootstrap builds this function as a provided.al2023 bootstrap.
func buildBootstrap(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootstrap")
	if err := rie.Build(context.Background(), "", ".", bin); err != nil {
		t.Fatalf("build: %v", err)
	}
	return bin
}

// TestColdStartFailsNamingTheVariable starts the function's main in a process of its own with an
// empty environment: it must exit non-zero at once and name what is missing.
func TestColdStartFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), runMainEnv + "=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit: %v, want a non-zero exit", err)
	}
	for _, name := range config.ReconcilerRequired {
		if !strings.Contains(stderr.String(), name) {
			t.Errorf("stderr does not name %s: %s", name, stderr.String())
		}
	}
}

// scheduledEvent is an EventBridge scheduled event as Lambda delivers it.
const scheduledEvent = `{"version":"0","id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa","detail-type":"Scheduled Event",
"source":"aws.events","account":"123456789012","time":"2026-11-29T16:53:06Z","region":"us-east-1",
"resources":["arn:aws:events:us-east-1:123456789012:rule/gapless-reconciler"],"detail":{}}`

// TestScheduledPassUnderRIE runs the built function under the Lambda runtime interface
// emulator against the local stack: gaps made on purpose behind the checkpoint are forwarded
// to the target queue, once each, and the watermark lands on the checkpoint.
func TestScheduledPassUnderRIE(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the function and runs the emulator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ddb, kin, sqsClient := stacktest.DynamoDB(t), stacktest.Kinesis(t), stacktest.SQS(t)
	stream, _ := stacktest.Stream(t, 1)
	cpTable, ledgerTable := stacktest.CheckpointTable(t), stacktest.LedgerTable(t)
	parked, target := stacktest.Queue(t, "parked", false), stacktest.Queue(t, "target", false)
	const group = "rie"

	var seqs []string
	var shardID string
	for i := range 12 {
		o, err := kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String(fmt.Sprint("k", i%3)),
			Data: []byte(fmt.Sprintf(`{"id":"order-%02d"}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		seqs, shardID = append(seqs, aws.ToString(o.SequenceNumber)), aws.ToString(o.ShardId)
	}
	// The consumer did records 0-2 and 9-11 (checkpoint at 11); 3-8 were skipped.
	shard := recordid.Shard{Group: group, Stream: stream, ShardID: shardID}
	cps := checkpoint.New(ddb, cpTable)
	p, err := pipeline.New(pipeline.DedupeLedger{L: dedupe.New(ddb, ledgerTable)}, pipeline.CheckpointStore{S: cps},
		park.New(sqsClient, parked), func(context.Context, pipeline.Record) error { return nil }, pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, span := range [][2]int{{0, 3}, {9, 12}} {
		b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
		for i := span[0]; i < span[1]; i++ {
			b.Records = append(b.Records, pipeline.Record{ID: recordid.ID{ShardID: shardID, Seq: seqs[i]}, PartitionKey: "k", Data: []byte("x")})
		}
		if _, err := p.Run(ctx, b); err != nil {
			t.Fatal(err)
		}
	}

	var logs syncBuffer
	inst, err := rie.Start(ctx, rie.Options{Bootstrap: buildBootstrap(t), Timeout: 60 * time.Second, LogWriter: &logs,
		Env: map[string]string{
			config.EnvGroup: group, config.EnvCheckpointTable: cpTable, config.EnvDedupeTable: ledgerTable,
			config.EnvParkedQueueURL: parked, config.EnvTargetQueueURL: target, config.EnvStreamName: stream,
			config.EnvSettleAfter: "1ms", config.EnvPayloadBucket: stacktest.Bucket(t),
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	out, err := inst.Invoke(ctx, []byte(scheduledEvent))
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, logs.String())
	}
	var sum struct {
		GapsDetected, GapsReplayed, RecordsVerified int
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	if sum.GapsDetected != 6 || sum.GapsReplayed != 6 || sum.RecordsVerified != 12 {
		t.Fatalf("summary %s: want 6 gaps replayed, 12 records verified", out)
	}
	// The default Process forwarded exactly records 3-8 to the target queue.
	got := map[string]int{}
	for {
		o, err := sqsClient.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(target), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Messages) == 0 {
			break
		}
		for _, m := range o.Messages {
			got[aws.ToString(m.MessageAttributes[process.AttrRecordID].StringValue)]++
			_, _ = sqsClient.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(target), ReceiptHandle: m.ReceiptHandle})
		}
	}
	if len(got) != 6 {
		t.Errorf("target queue received %d records, want 6: %v", len(got), got)
	}
	for i := 3; i <= 8; i++ {
		if id := (recordid.ID{ShardID: shardID, Seq: seqs[i]}).String(); got[id] != 1 {
			t.Errorf("record %d forwarded %d times", i, got[id])
		}
	}
	st, err := cps.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if st.Watermark != seqs[11] {
		t.Errorf("watermark %s, want the checkpoint %s", st.Watermark, seqs[11])
	}
	// The pass wrote its EMF metrics line and JSON logs to stdout.
	if !strings.Contains(logs.String(), `"GapsReplayed":6`) || !strings.Contains(logs.String(), `"msg":"reconciler pass"`) {
		t.Errorf("function output lacks the metrics line or the pass log:\n%s", logs.String())
	}
}

type syncBuffer = syncbuf.Buffer
