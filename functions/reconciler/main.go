// Command reconciler is the Lambda function that proves nothing behind the checkpoint was
// skipped: an EventBridge schedule starts a pass over every shard, and the event-source
// mapping's on-failure SQS queue (FunctionResponseTypes: ReportBatchItemFailures) names ranges
// to replay; messages of a batch it has no time to try go back to that queue untouched. It only wires: typed configuration from the environment (a bad variable fails the
// cold start, naming it), the shared parts (internal/wire: clients, stores, the pipeline with
// the same business logic as the consumer), the reconciler, and lambda.Start.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/wire"
)

func main() {
	h, err := setup(context.Background(), os.Getenv, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless reconciler: cold start failed: %v\n", err)
		os.Exit(1)
	}
	lambda.Start(h.Handle)
}

// setup builds the handler from the environment; logs and EMF metrics go to out.
func setup(ctx context.Context, getenv func(string) string, out io.Writer) (*reconcile.Handler, error) {
	cfg, err := config.LoadReconciler(getenv)
	if err != nil {
		return nil, err
	}
	faults, err := faultOptions(getenv)
	if err != nil {
		return nil, err
	}
	parts, err := wire.Build(ctx, cfg.Common, config.DefaultDeadlineMargin, getenv, out, faults...)
	if err != nil {
		return nil, err
	}
	r, err := reconcile.New(kinesis.NewFromConfig(parts.AWS), parts.Checkpoints, parts.Pipeline,
		reconcile.Config{Group: cfg.Group, Stream: cfg.StreamName, StreamARN: cfg.StreamARN, SettleAfter: cfg.SettleAfter,
			MaxRecordAge: cfg.MaxRecordAge, Filter: cfg.RecordFilter},
		reconcile.WithLogger(parts.Logger))
	if err != nil {
		return nil, err
	}
	ageSeconds := int64(-1) // unlimited
	if cfg.MaxRecordAge > 0 {
		ageSeconds = int64(cfg.MaxRecordAge / time.Second)
	}
	parts.Logger.Info("records past the checkpoint mirror are verified once older than tail_after",
		"group", cfg.Group, "tail_after", reconcile.TailAfter(cfg.MaxRecordAge, cfg.SettleAfter).String(),
		"maximum_record_age_seconds", ageSeconds, "unlimited_age_capped_at", reconcile.TailAgeCap.String())
	// The failure queue's untried messages go back to it (the record's eventSourceARN names it).
	return reconcile.NewHandler(r, parts.Metrics, parts.Logger, reconcile.WithRelease(sqs.NewFromConfig(parts.AWS))), nil
}
