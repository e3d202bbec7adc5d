package gapless

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/wire"
)

// An Option configures StartConsumer, NewConsumer, StartReconciler and NewReconciler.
type Option func(*options)

// options is every setting in one place; each Option sets one field. (Later forms of the
// business logic, a batch Process for instance, are one more field and one more Option here.)
type options struct {
	getenv   func(string) string
	output   io.Writer
	logger   *slog.Logger
	metrics  io.Writer
	aws      *aws.Config
	wrappers []func(ProcessFunc) ProcessFunc
	batch    BatchProcessFunc
	chunk    int
	bwraps   []func(BatchProcessFunc) BatchProcessFunc
}

func newOptions(opts []Option) options {
	o := options{getenv: os.Getenv, output: os.Stdout}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithLogger sets the logger. The default writes JSON lines to WithOutput's writer at the level
// of AWS_LAMBDA_LOG_LEVEL (INFO when unset), each with the invocation's request_id.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithOutput sets where the default logger and the metric lines go (default os.Stdout, which
// Lambda sends to CloudWatch Logs, where the Embedded Metric Format lines become metrics).
func WithOutput(w io.Writer) Option { return func(o *options) { o.output = w } }

// WithMetricsWriter sends the CloudWatch Embedded Metric Format lines (namespace Gapless,
// dimension Group) to w instead of WithOutput's writer.
func WithMetricsWriter(w io.Writer) Option { return func(o *options) { o.metrics = w } }

// WithAWSConfig builds every AWS client (DynamoDB, SQS, S3, Kinesis) from cfg instead of the
// SDK's default configuration: your credentials, region, retryer, HTTP client or middleware.
func WithAWSConfig(cfg aws.Config) Option { return func(o *options) { o.aws = &cfg } }

// WithGetenv reads the configuration through getenv instead of os.Getenv (tests).
func WithGetenv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

// WithProcessWrapper puts middleware around the Process (yours or the default one): wrap
// receives the Process and returns the one the pipeline calls. With several, the last given is
// the outermost.
func WithProcessWrapper(wrap func(ProcessFunc) ProcessFunc) Option {
	return func(o *options) { o.wrappers = append(o.wrappers, wrap) }
}

// WithBatchProcess makes the functions call b with waves of records instead of a Process per
// record; the Process given to StartConsumer or StartReconciler is then not called (pass nil).
// A wave holds at most one record per partition key, so its records may be written in any
// order or in one request; the next record of a key comes in a later wave, after its
// predecessor succeeded. chunk is b's natural request size (10 for SQS SendMessageBatch, 25 for
// DynamoDB BatchWriteItem): when more records are ready, a wave takes a multiple of it. The
// default Process is already the batch form of the SQS bridge (SendMessageBatch).
func WithBatchProcess(b BatchProcessFunc, chunk int) Option {
	return func(o *options) { o.batch, o.chunk = b, chunk }
}

// WithBatchWrapper puts middleware around the batch form (WithBatchProcess's or the default
// bridge's), as WithProcessWrapper does around a Process. Give both to wrap whichever form runs:
// with a Process wrapper alone, the default bridge sends record by record.
func WithBatchWrapper(wrap func(BatchProcessFunc) BatchProcessFunc) Option {
	return func(o *options) { o.bwraps = append(o.bwraps, wrap) }
}

// build wires the pipeline (internal/wire) for cfg around p (nil: the default Process).
// extra come last.
func (o options) build(ctx context.Context, cfg config.Common, deadlineMargin time.Duration, p ProcessFunc, extra ...wire.Option) (wire.Parts, error) {
	var w []wire.Option
	if p != nil {
		w = append(w, wire.WithProcess(internal(p)))
	}
	if len(o.wrappers) > 0 {
		w = append(w, wire.WithProcessWrapper(func(next pipeline.ProcessFunc) pipeline.ProcessFunc {
			pub := public(next)
			for _, wrap := range o.wrappers {
				pub = wrap(pub)
			}
			return internal(pub)
		}))
	}
	if o.batch != nil {
		w = append(w, wire.WithBatchProcess(internalBatch(o.batch), o.chunk))
	}
	if len(o.bwraps) > 0 {
		w = append(w, wire.WithBatchWrapper(func(next pipeline.BatchFunc) pipeline.BatchFunc {
			pub := publicBatch(next)
			for _, wrap := range o.bwraps {
				pub = wrap(pub)
			}
			return internalBatch(pub)
		}))
	}
	if o.aws != nil {
		w = append(w, wire.WithAWSConfig(*o.aws))
	}
	if o.logger != nil {
		w = append(w, wire.WithLogger(o.logger))
	}
	if o.metrics != nil {
		w = append(w, wire.WithMetricsWriter(o.metrics))
	}
	return wire.Build(ctx, cfg, deadlineMargin, o.getenv, o.output, append(w, extra...)...)
}

// loadOptions: a Process of your own (or a batch form) does not need TARGET_QUEUE_URL.
func (o options) loadOptions(p ProcessFunc) []config.LoadOption {
	if p != nil || o.batch != nil {
		return []config.LoadOption{config.OwnProcess()}
	}
	return nil
}
