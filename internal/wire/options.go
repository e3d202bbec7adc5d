package wire

import (
	"io"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

type options struct {
	process pipeline.ProcessFunc
	wrap    func(pipeline.ProcessFunc) pipeline.ProcessFunc
	aws     *aws.Config
	logger  *slog.Logger
	metrics io.Writer
	// perRecord: the default bridge sends one SendMessage per record (WithPerRecordBridge).
	perRecord bool
	batch     pipeline.BatchFunc
	chunk     int
	batchWrap func(pipeline.BatchFunc) pipeline.BatchFunc
	// redriveLedger: a redrive session's pipeline (ForRedrive).
	redriveLedger func(pipeline.Ledger) pipeline.Ledger
}

// WithBatchProcess sets the business logic in batch form: the pipeline hands f waves of at most
// one record per partition key (pipeline.WithBatchSink; chunk is its natural request size)
// instead of calling a Process per record.
func WithBatchProcess(f pipeline.BatchFunc, chunk int) Option {
	return func(o *options) { o.batch, o.chunk = f, chunk }
}

// WithBatchWrapper wraps the batch form (the default bridge's or WithBatchProcess's) before the
// pipeline gets it. Given together with WithProcessWrapper, the default bridge stays batched:
// fault injection in the demo's builds gives both, so the demo runs the default as deployed.
func WithBatchWrapper(wrap func(pipeline.BatchFunc) pipeline.BatchFunc) Option {
	return func(o *options) { o.batchWrap = wrap }
}

// WithPerRecordBridge makes the default bridge send one SendMessage per record (process.New)
// instead of the default SendMessageBatch waves (process.NewBatch through
// pipeline.WithBatchSink). A Process of one's own (WithProcess) or a Process wrapper
// (WithProcessWrapper) implies it: they work record by record.
func WithPerRecordBridge() Option { return func(o *options) { o.perRecord = true } }

// WithProcess sets the business logic (default: package process's bridge to TARGET_QUEUE_URL).
func WithProcess(p pipeline.ProcessFunc) Option { return func(o *options) { o.process = p } }

// WithProcessWrapper wraps the Process (the default one or WithProcess's) before the pipeline
// gets it: fault injection in the demo's builds, tests that misbehave on chosen records.
func WithProcessWrapper(wrap func(pipeline.ProcessFunc) pipeline.ProcessFunc) Option {
	return func(o *options) { o.wrap = wrap }
}

// WithAWSConfig uses cfg for every client instead of config.LoadDefaultConfig's.
func WithAWSConfig(cfg aws.Config) Option { return func(o *options) { o.aws = &cfg } }

// WithLogger sets the logger (default: JSON on out at AWS_LAMBDA_LOG_LEVEL, with the request id).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMetricsWriter sends the EMF metric lines to w instead of out.
func WithMetricsWriter(w io.Writer) Option { return func(o *options) { o.metrics = w } }
