// Command reconciler is the Lambda function that proves nothing behind the checkpoint was
// skipped: an EventBridge schedule starts a pass over every shard, and the event-source
// mapping's on-failure SQS queue (FunctionResponseTypes: ReportBatchItemFailures) names ranges
// to replay. It only wires: typed configuration from the environment (a bad variable fails the
// cold start, naming it), AWS clients, the stores, the batch pipeline with the same business
// logic as the consumer (package process), and lambda.Start.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/process"
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
	logger := consumer.NewLogger(out, consumer.ParseLevel(getenv("AWS_LAMBDA_LOG_LEVEL")))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	ddb, sqsClient := dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)
	cps := checkpoint.New(ddb, cfg.CheckpointTable)
	ledger := pipeline.DedupeLedger{L: dedupe.New(ddb, cfg.DedupeTable, dedupe.WithTTL(cfg.LedgerTTL), dedupe.WithLogger(logger))}
	p, err := pipeline.New(
		ledger,
		pipeline.CheckpointStore{S: cps},
		park.New(sqsClient, cfg.ParkedQueueURL),
		process.New(sqsClient, cfg.TargetQueueURL),
		pipeline.Config{
			MaxRecordAttempts: cfg.MaxRecordAttempts, MaxConcurrency: cfg.MaxConcurrency,
			DeadlineMargin: config.DefaultDeadlineMargin, DedupeKey: cfg.DedupeKey, LogPayloads: cfg.LogPayloads,
		},
		pipeline.WithLogger(logger), pipeline.WithClaimer(ledger),
	)
	if err != nil {
		return nil, err
	}
	r, err := reconcile.New(kinesis.NewFromConfig(awsCfg), cps, p,
		reconcile.Config{Group: cfg.Group, Stream: cfg.StreamName, SettleAfter: cfg.SettleAfter},
		reconcile.WithLogger(logger))
	if err != nil {
		return nil, err
	}
	emf := metrics.New(out, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: cfg.Group}})
	return reconcile.NewHandler(r, emf, logger), nil
}
