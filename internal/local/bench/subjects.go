package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	bridge "github.com/gapless-dev/gapless/process"
)

// The handlers compared.
const (
	Bare       = "bare"       // (a) the mapping alone: no state
	Idempotent = "idempotent" // (b) Powertools-style record-level idempotency
	Gapless    = "gapless"    // (c) internal/consumer over the pipeline, ledger and checkpoint
	// The default bridge (Kinesis → SQS TARGET_QUEUE_URL) instead of checksum.Process:
	BareSQS    = "bare-sqs"    // (a) with process.New: one SendMessage per record, the usual recipe
	GaplessSQS = "gapless-sqs" // (c) with process.NewBatch through pipeline.WithBatchSink (the default wiring)
)

// Handlers lists the handler names in report order.
var Handlers = []string{Bare, Idempotent, Gapless, BareSQS, GaplessSQS}

// Concurrency is the number of partition keys every handler processes at once (the pipeline's
// default MAX_CONCURRENCY), so the three differ only in what they do around Process.
const Concurrency = 16

// Tables names the state the handlers use; Setup creates them.
type Tables struct {
	Idempotency string // baseline.Ensure schema (key id)
	Ledger      string // schema.LedgerTable
	Checkpoint  string // schema.CheckpointTable
	ParkedQueue string // queue URL; unused on the happy path but required by the pipeline
	TargetQueue string // TARGET_QUEUE_URL of the consumer bootstrap (its default Process)
	Group       string // GAPLESS_GROUP of the gapless handler
}

// Clients are the SDK configuration of the stack. DynamoDB clients are built per handler, each
// with its own meter.
type Clients struct {
	Config aws.Config
}

// Subject is one handler as the Lambda runtime would call it: raw invocation payload in,
// partial batch response out. Meter counts its DynamoDB traffic (empty for Bare), SQS its SQS
// requests (the bridge's sends and any parking).
type Subject struct {
	Name   string
	Invoke func(ctx context.Context, raw []byte) (events.KinesisEventResponse, error)
	Meter  *ddbmeter.Meter
	SQS    *SQSMeter
}

// NewSubject builds the named handler with Checksum as Process.
func NewSubject(name string, c Clients, t Tables) (*Subject, error) {
	return newSubject(name, c, t, Checksum)
}

func newSubject(name string, c Clients, t Tables, process pipeline.ProcessFunc) (*Subject, error) {
	m, sm := ddbmeter.New(), &SQSMeter{}
	ddb := dynamodb.NewFromConfig(c.Config, m.Options(), pathOptions())
	sqsc := sqs.NewFromConfig(c.Config, sm.Options())
	s := &Subject{Name: name, Meter: m, SQS: sm}
	var popts []pipeline.Option
	switch name {
	case BareSQS:
		process = bridge.New(sqsc, t.TargetQueue)
		fallthrough
	case Bare:
		s.Invoke = typed(baseline.Bare(process, baseline.WithConcurrency(Concurrency)))
	case Idempotent:
		s.Invoke = typed(baseline.Idempotent(ddb, t.Idempotency, process,
			baseline.WithConcurrency(Concurrency), baseline.WithFunctionName("bench")))
	case GaplessSQS:
		popts = append(popts, pipeline.WithBatchSink(bridge.NewBatch(sqsc, t.TargetQueue), bridge.MaxBatchEntries))
		fallthrough
	case Gapless:
		p, err := pipeline.New(
			pipeline.DedupeLedger{L: dedupe.New(ddb, t.Ledger, dedupe.WithLogger(slog.New(slog.DiscardHandler)))},
			pipeline.CheckpointStore{S: checkpoint.New(ddb, t.Checkpoint)},
			park.New(sqsc, t.ParkedQueue),
			process, pipeline.DefaultConfig(), popts...)
		if err != nil {
			return nil, fmt.Errorf("bench: gapless pipeline: %w", err)
		}
		h := consumer.NewHandler(p, t.Group, nil)
		s.Invoke = func(ctx context.Context, raw []byte) (events.KinesisEventResponse, error) {
			return h.HandleJSON(ctx, raw)
		}
	default:
		return nil, fmt.Errorf("bench: unknown handler %q (want one of %s)", name, strings.Join(Handlers, ", "))
	}
	return s, nil
}

// typed decodes the payload into events.KinesisEvent, as lambda.Start does for a handler that
// takes one, and calls h.
func typed(h baseline.Handler) func(context.Context, []byte) (events.KinesisEventResponse, error) {
	return func(ctx context.Context, raw []byte) (events.KinesisEventResponse, error) {
		var ev events.KinesisEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return events.KinesisEventResponse{}, fmt.Errorf("bench: decode event: %w", err)
		}
		return h(ctx, ev)
	}
}
