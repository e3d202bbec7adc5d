package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		// A fuzz worker runs only FuzzDecodeEvent, which uses the in-memory stores: starting
		// emulators in every worker process would only slow fuzzing down.
		os.Exit(m.Run())
	}
	os.Exit(stacktest.Run(m, localstack.DynamoDB, localstack.SQS))
}

// stack is one test's tables and parked queue on the local stack.
type stack struct {
	ddb         *dynamodb.Client
	sqs         *sqs.Client
	ledgerTable string
	cpTable     string
	parkedURL   string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return &stack{
		ddb: stacktest.DynamoDB(t), sqs: stacktest.SQS(t),
		ledgerTable: stacktest.LedgerTable(t), cpTable: stacktest.CheckpointTable(t),
		parkedURL: stacktest.Queue(t, "parked", false),
	}
}

func (s *stack) ledger() *dedupe.Ledger        { return dedupe.New(s.ddb, s.ledgerTable) }
func (s *stack) checkpoint() *checkpoint.Store { return checkpoint.New(s.ddb, s.cpTable) }

// shardFor is the fixtures' shard as seen by group.
func shardFor(group string) recordid.Shard {
	return recordid.Shard{Group: group, Stream: fixtures.Stream, ShardID: fixtures.Shard}
}

// processor is the test business logic: it records every call, fails payloads marked
// {"poison": true} (the events/ convention) and the sequence numbers in fail, and runs hook
// first when set.
type processor struct {
	mu    sync.Mutex
	calls map[recordid.ID]int
	order map[string][]recordid.ID // per partition key, in call order
	fail  map[string]bool
	hook  func(ctx context.Context, r pipeline.Record) error
}

func newProcessor() *processor {
	return &processor{calls: map[recordid.ID]int{}, order: map[string][]recordid.ID{}, fail: map[string]bool{}}
}

func (p *processor) process(ctx context.Context, r pipeline.Record) error {
	if p.hook != nil {
		if err := p.hook(ctx, r); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.calls[r.ID]++
	p.order[r.PartitionKey] = append(p.order[r.PartitionKey], r.ID)
	fail := p.fail[r.ID.Seq]
	p.mu.Unlock()
	var payload struct {
		Poison bool `json:"poison"`
	}
	if json.Unmarshal(r.Data, &payload) == nil && payload.Poison {
		return errors.New("poison record")
	}
	if fail {
		return errors.New("transient downstream failure")
	}
	return nil
}

func (p *processor) count(id recordid.ID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

func (p *processor) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

func (p *processor) setFail(seqs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = map[string]bool{}
	for _, s := range seqs {
		p.fail[s] = true
	}
}

type syncBuffer struct{ syncbuf.Buffer }

// jsonLines decodes every line of the buffer.
func (s *syncBuffer) jsonLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("not a JSON line: %q", ln)
		}
		out = append(out, m)
	}
	return out
}

// rig is one handler (one Lambda execution environment) with its processor and outputs.
type rig struct {
	h       *Handler
	proc    *processor
	logs    *syncBuffer
	metrics *syncBuffer
	group   string
}

type rigOption func(*rigConfig)

type rigConfig struct {
	proc   *processor
	cfg    pipeline.Config
	ledger pipeline.Ledger
	cp     pipeline.Checkpointer
	parker pipeline.Parker
}

func withConfig(f func(*pipeline.Config)) rigOption { return func(c *rigConfig) { f(&c.cfg) } }
func withLedger(l pipeline.Ledger) rigOption        { return func(c *rigConfig) { c.ledger = l } }
func withCheckpoint(cp pipeline.Checkpointer) rigOption {
	return func(c *rigConfig) { c.cp = cp }
}
func withParker(p pipeline.Parker) rigOption { return func(c *rigConfig) { c.parker = p } }

// withProcessor shares a processor between rigs (one business logic, two environments).
func withProcessor(p *processor) rigOption { return func(c *rigConfig) { c.proc = p } }

// rig builds a handler for group on the stack's real stores (unless replaced by options).
func (s *stack) rig(t *testing.T, group string, opts ...rigOption) *rig {
	t.Helper()
	rc := rigConfig{cfg: pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4, DeadlineMargin: time.Second}}
	rc.ledger = pipeline.DedupeLedger{L: s.ledger()}
	rc.cp = pipeline.CheckpointStore{S: s.checkpoint()}
	rc.parker = park.New(s.sqs, s.parkedURL)
	for _, o := range opts {
		o(&rc)
	}
	if rc.proc == nil {
		rc.proc = newProcessor()
	}
	r := &rig{proc: rc.proc, logs: &syncBuffer{}, metrics: &syncBuffer{}, group: group}
	logger := NewLogger(r.logs, slog.LevelDebug)
	var popts []pipeline.Option
	popts = append(popts, pipeline.WithLogger(logger))
	if c, ok := rc.ledger.(pipeline.Claimer); ok && rc.cfg.DedupeKey != "" {
		popts = append(popts, pipeline.WithClaimer(c))
	}
	p, err := pipeline.New(rc.ledger, rc.cp, rc.parker, r.proc.process, rc.cfg, popts...)
	if err != nil {
		t.Fatal(err)
	}
	em := metrics.New(r.metrics, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: group}})
	r.h = NewHandler(p, group, logger, WithMetrics(em))
	return r
}

// invoke runs the handler on a raw event the way the Lambda runtime does: with a request id
// and a deadline in the context.
func (r *rig) invoke(t *testing.T, raw []byte) (events.KinesisEventResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("req-%d", time.Now().UnixNano())})
	return r.h.HandleJSON(ctx, raw)
}

// lastMetrics returns the EMF line of the latest invocation.
func (r *rig) lastMetrics(t *testing.T) metrics.Line {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.metrics.String()), "\n")
	l, err := metrics.Parse([]byte(lines[len(lines)-1]))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return l
}

// failureOf returns the single reported identifier, "" for success; more than one is a bug.
func failureOf(t *testing.T, resp events.KinesisEventResponse) string {
	t.Helper()
	switch len(resp.BatchItemFailures) {
	case 0:
		if resp.BatchItemFailures != nil {
			t.Error("empty non-nil BatchItemFailures: want nil on success")
		}
		return ""
	case 1:
		id := resp.BatchItemFailures[0].ItemIdentifier
		if id == "" {
			t.Fatal("empty itemIdentifier: Lambda reads it as total failure")
		}
		return id
	}
	t.Fatalf("%d batch item failures, want at most 1", len(resp.BatchItemFailures))
	return ""
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// redeliver returns the records of a valid event from sequence number from on: what Lambda
// sends after a partial failure reporting from.
func redeliver(t *testing.T, raw []byte, from string) []byte {
	t.Helper()
	var ev events.KinesisEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ev.Records, func(r events.KinesisEventRecord) bool { return r.Kinesis.SequenceNumber == from })
	if i < 0 {
		t.Fatalf("sequence %s not in the event", from)
	}
	ev.Records = ev.Records[i:]
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rec is a record for mkEvent.
type rec struct {
	seq  string
	pk   string
	data []byte
}

// mkEvent builds a Kinesis event of the fixtures' shard.
func mkEvent(t testing.TB, recs ...rec) []byte {
	t.Helper()
	ev := events.KinesisEvent{}
	for _, r := range recs {
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			AwsRegion: fixtures.Region, EventID: fixtures.Shard + ":" + r.seq, EventName: "aws:kinesis:record",
			EventSource: "aws:kinesis", EventSourceArn: fixtures.StreamARN, EventVersion: "1.0",
			Kinesis: events.KinesisRecord{
				Data: r.data, PartitionKey: r.pk, SequenceNumber: r.seq, KinesisSchemaVersion: "1.0",
				ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Unix(1_700_000_000, 0)},
			},
		})
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// receiveParked reads up to want parked messages from the queue.
func (s *stack) receiveParked(t *testing.T, want int) []park.Message {
	t.Helper()
	var out []park.Message
	for deadline := time.Now().Add(15 * time.Second); len(out) < want && time.Now().Before(deadline); {
		resp, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.parkedURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.Messages {
			pm, err := park.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, pm)
		}
	}
	return out
}

// dynamoVia returns a DynamoDB client sending through endpoint (a faultproxy) with at most
// attempts attempts per call.
func dynamoVia(t *testing.T, endpoint string, attempts int) *dynamodb.Client {
	return dynamodb.NewFromConfig(stacktest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true // injected error bodies carry no x-amz-crc32
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			so.MaxBackoff = 20 * time.Millisecond
		})
	})
}

func sqsVia(t *testing.T, endpoint string, attempts int) *sqs.Client {
	return sqs.NewFromConfig(stacktest.Config(t), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			so.MaxBackoff = 20 * time.Millisecond
		})
	})
}

// ids returns the ids of plain records seqs (sub 0).
func ids(seqs ...string) []recordid.ID {
	out := make([]recordid.ID, len(seqs))
	for i, s := range seqs {
		out[i] = recordid.ID{ShardID: fixtures.Shard, Seq: s}
	}
	return out
}

func lambdaCtx(requestID string) context.Context {
	return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: requestID})
}
