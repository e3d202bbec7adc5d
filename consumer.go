package gapless

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
)

// Consumer is the function behind the Kinesis event-source mapping (FunctionResponseTypes:
// ReportBatchItemFailures).
type Consumer struct {
	h *consumer.Handler
}

// NewConsumer reads and validates the consumer's configuration (an error wraps
// ErrInvalidConfig and names every bad variable), builds the AWS clients, the ledger, the
// checkpoint mirror and the pipeline around p (nil: the default Process), and returns the
// handler. ctx is used only while building.
func NewConsumer(ctx context.Context, p ProcessFunc, opts ...Option) (*Consumer, error) {
	o := newOptions(opts)
	cfg, err := config.LoadConsumer(o.getenv, o.loadOptions(p)...)
	if err != nil {
		return nil, err
	}
	parts, err := o.build(ctx, cfg.Common, cfg.DeadlineMargin, p)
	if err != nil {
		return nil, err
	}
	return &Consumer{h: consumer.NewHandler(parts.Pipeline, cfg.Group, parts.Logger, consumer.WithMetrics(parts.Metrics),
		consumer.WithLogPayloads(cfg.LogPayloads), consumer.WithStream(cfg.StreamName), consumer.WithStreamARN(cfg.StreamARN), consumer.WithFilter(cfg.RecordFilter))}, nil
}

// HandleJSON is what StartConsumer registers: it decodes the event record by record, so a
// record that does not decode is failed and retried (then parked) on its own instead of failing
// the invocation, and answers with the batch item failures to report.
func (c *Consumer) HandleJSON(ctx context.Context, event json.RawMessage) (events.KinesisEventResponse, error) {
	return c.h.HandleJSON(ctx, event)
}

// Handle handles an event the Lambda runtime has decoded already.
func (c *Consumer) Handle(ctx context.Context, event events.KinesisEvent) (events.KinesisEventResponse, error) {
	return c.h.Handle(ctx, event)
}

// StartConsumer is the consumer function's main: NewConsumer with os.Getenv, then lambda.Start.
// A configuration error is printed to standard error and the process exits with status 1, so
// the cold start fails naming the variable.
func StartConsumer(p ProcessFunc, opts ...Option) {
	c, err := NewConsumer(context.Background(), p, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless consumer: cold start failed: %v\n", err)
		os.Exit(1)
	}
	lambda.Start(c.HandleJSON)
}
