package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/process"
)

// TestMain gives the package's tests a local stack (status, replay and redrive need Kinesis,
// DynamoDB and SQS; invoke's tests reuse the DynamoDB and SQS endpoints).
func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

// opsStack is one test's stream, tables and queues, with the stores on top.
type opsStack struct {
	t                    *testing.T
	ddb                  *dynamodb.Client
	kin                  *kinesis.Client
	sqs                  *sqs.Client
	group, stream        string
	cpTable, ledgerTable string
	parkedURL, targetURL string
	bucket               string
	shardID              string
	cps                  *checkpoint.Store
	ledger               *dedupe.Ledger
	seqs                 []string
	datas                [][]byte
	parkedMaxBytes       int
}

func newOpsStack(t *testing.T) *opsStack {
	t.Helper()
	s := &opsStack{t: t, ddb: stacktest.DynamoDB(t), kin: stacktest.Kinesis(t), sqs: stacktest.SQS(t), group: "ops",
		cpTable: stacktest.CheckpointTable(t), ledgerTable: stacktest.LedgerTable(t),
		parkedURL: stacktest.Queue(t, "parked", false), targetURL: stacktest.Queue(t, "target", false), bucket: stacktest.Bucket(t)}
	s.stream, _ = stacktest.Stream(t, 1)
	s.cps = checkpoint.New(s.ddb, s.cpTable)
	s.ledger = dedupe.New(s.ddb, s.ledgerTable)
	return s
}

// args are the shared flags pointing at this stack.
func (s *opsStack) args(extra ...string) []string {
	return append([]string{"--group", s.group, "--stream", s.stream, "--checkpoint-table", s.cpTable,
		"--dedupe-table", s.ledgerTable, "--parked-queue", s.parkedURL}, extra...)
}

func (s *opsStack) put(datas ...[]byte) {
	s.t.Helper()
	for i, d := range datas {
		o, err := s.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(s.stream),
			PartitionKey: aws.String(fmt.Sprint("k", (len(s.seqs)+i)%3)), Data: d})
		if err != nil {
			s.t.Fatal(err)
		}
		s.seqs, s.shardID = append(s.seqs, aws.ToString(o.SequenceNumber)), aws.ToString(o.ShardId)
		s.datas = append(s.datas, d)
	}
}

func (s *opsStack) putN(n int) {
	for range n {
		s.put([]byte(fmt.Sprintf(`{"id":"order-%03d"}`, len(s.seqs))))
	}
}

func (s *opsStack) id(i int) recordid.ID { return recordid.ID{ShardID: s.shardID, Seq: s.seqs[i]} }

// run runs records [from, to) through a pipeline whose Process fails every call when fail is
// set, with maxAttempts; checkpoint moves when advance is set.
func (s *opsStack) run(from, to int, fail bool, maxAttempts int, advance bool) pipeline.Result {
	s.t.Helper()
	proc := func(context.Context, pipeline.Record) error { return nil }
	if fail {
		proc = func(context.Context, pipeline.Record) error { return fmt.Errorf("downstream rejects it") }
	}
	opts := []park.Option{park.WithPayloadBucket(stacktest.S3(s.t), s.bucket)}
	if s.parkedMaxBytes > 0 {
		opts = append(opts, park.WithMaxMessageBytes(s.parkedMaxBytes))
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxRecordAttempts = maxAttempts
	p, err := pipeline.New(pipeline.DedupeLedger{L: s.ledger}, pipeline.CheckpointStore{S: s.cps}, park.New(s.sqs, s.parkedURL, opts...), proc, cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	b := pipeline.Batch{Shard: recordid.Shard{Group: s.group, Stream: s.stream, ShardID: s.shardID}, Source: pipeline.SourceConsumer, AdvanceCheckpoint: advance}
	for i := from; i < to; i++ {
		b.Records = append(b.Records, pipeline.Record{ID: s.id(i), PartitionKey: fmt.Sprint("k", i%3), Data: s.datas[i], ArrivalTime: time.Now()})
	}
	res, err := p.Run(context.Background(), b)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// queue drains a queue: record id attribute (target) or body (parked) per message.
func (s *opsStack) drain(url string) []*sqs.ReceiveMessageOutput {
	s.t.Helper()
	var outs []*sqs.ReceiveMessageOutput
	for {
		o, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			s.t.Fatal(err)
		}
		if len(o.Messages) == 0 {
			return outs
		}
		for _, m := range o.Messages {
			if _, err := s.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				s.t.Fatal(err)
			}
		}
		outs = append(outs, o)
	}
}

// forwarded returns record id -> body of what the default Process sent to the target queue.
func (s *opsStack) forwarded() map[string]string {
	s.t.Helper()
	got := map[string]string{}
	for _, o := range s.drain(s.targetURL) {
		for _, m := range o.Messages {
			id := aws.ToString(m.MessageAttributes[process.AttrRecordID].StringValue)
			if _, dup := got[id]; dup {
				s.t.Errorf("record %s forwarded twice", id)
			}
			got[id] = aws.ToString(m.Body)
		}
	}
	return got
}

// parked drains the parked queue.
func (s *opsStack) parked() []park.Message {
	s.t.Helper()
	var out []park.Message
	for _, o := range s.drain(s.parkedURL) {
		for _, m := range o.Messages {
			pm, err := park.Decode(aws.ToString(m.Body))
			if err != nil {
				s.t.Fatal(err)
			}
			out = append(out, pm)
		}
	}
	return out
}

// gapless runs the CLI in-process.
func gapless(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = run(ctx, args, &o, &e)
	return o.String(), e.String(), code
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("output %q: %v", s, err)
	}
	return v
}

func TestOpsMissingFlagsNameTheVariables(t *testing.T) {
	for _, env := range []string{"GAPLESS_GROUP", "STREAM_NAME", "CHECKPOINT_TABLE", "DEDUPE_TABLE", "PARKED_QUEUE_URL", "TARGET_QUEUE_URL"} {
		t.Setenv(env, "")
	}
	for _, cmd := range [][]string{{"status"}} {
		t.Run(cmd[0], func(t *testing.T) {
			_, stderr, code := gapless(t, cmd...)
			if code != 2 || !strings.Contains(stderr, "gapless "+cmd[0]+": missing ") {
				t.Fatalf("exit %d stderr %q", code, stderr)
			}
			for _, want := range []string{"--group (or $GAPLESS_GROUP)", "--stream (or $STREAM_NAME)", "--dedupe-table (or $DEDUPE_TABLE)"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not name %s: %q", want, stderr)
				}
			}
		})
	}
	_, stderr, _ := gapless(t, "replay")
	if !strings.Contains(stderr, "--shard") {
		t.Errorf("replay without a range: %q", stderr)
	}
	// Redrive and replay run in the reconciler function: on AWS the CLI needs its name only.
	t.Setenv("GAPLESS_RECONCILER_FUNCTION", "")
	for _, cmd := range [][]string{{"replay", "--aws", "--shard", "s", "--from", "1", "--to", "2"}, {"redrive", "--aws"}} {
		_, stderr, code := gapless(t, cmd...)
		if code != 2 || !strings.Contains(stderr, "--reconciler-function (or $GAPLESS_RECONCILER_FUNCTION)") || !strings.Contains(stderr, "ReconcilerFunctionName") {
			t.Errorf("%s: exit %d stderr %q", cmd[0], code, stderr)
		}
	}
	// The deployed function's configuration is its own: a local-only flag is refused, not ignored.
	_, stderr, code := gapless(t, "redrive", "--reconciler-function", "gapless-Reconciler", "--target-queue", "q", "--max-attempts", "2")
	if code != 2 || !strings.Contains(stderr, "--max-attempts, --target-queue set the local reconciler's configuration") {
		t.Errorf("redrive --reconciler-function with local flags: exit %d stderr %q", code, stderr)
	}
}

// nopParker accepts every record (for pipelines whose Process never fails).
type nopParker struct{}

func (nopParker) Park(context.Context, park.Record) (park.Result, error) {
	return park.Result{MessageID: "nop"}, nil
}

// requeue sends a parked message back to the parked queue (after a test drained it).
func (s *opsStack) requeue(m park.Message) {
	s.t.Helper()
	b, err := park.Encode(m)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(s.parkedURL), MessageBody: aws.String(b)}); err != nil {
		s.t.Fatal(err)
	}
}
