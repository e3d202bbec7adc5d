// Command consumer is the Lambda function behind the Kinesis event-source mapping
// (FunctionResponseTypes: ReportBatchItemFailures). It only wires: typed configuration from the
// environment (a bad variable fails the cold start, naming it), the shared parts (internal/wire:
// clients, stores, pipeline around package process), the handler, and lambda.Start.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/wire"
)

func main() {
	h, err := setup(context.Background(), os.Getenv, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless consumer: cold start failed: %v\n", err)
		os.Exit(1)
	}
	lambda.Start(h.HandleJSON)
}

// setup builds the handler from the environment; logs and EMF metrics go to out.
func setup(ctx context.Context, getenv func(string) string, out io.Writer) (*consumer.Handler, error) {
	cfg, err := config.LoadConsumer(getenv)
	if err != nil {
		return nil, err
	}
	faults, err := faultOptions(getenv)
	if err != nil {
		return nil, err
	}
	parts, err := wire.Build(ctx, cfg.Common, cfg.DeadlineMargin, getenv, out, faults...)
	if err != nil {
		return nil, err
	}
	return consumer.NewHandler(parts.Pipeline, cfg.Group, parts.Logger,
		consumer.WithMetrics(parts.Metrics), consumer.WithLogPayloads(cfg.LogPayloads), consumer.WithStream(cfg.StreamName), consumer.WithFilter(cfg.RecordFilter)), nil
}
