// Package wire builds what both functions share from their typed configuration: the AWS
// clients, the stores, the logger and the batch pipeline around the business logic (package
// process, wrapped by internal/chaos when GAPLESS_CHAOS is set, which only the demo does). The
// mains stay thin: load config, call Build, add their own handler, lambda.Start.
package wire

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/chaos"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/process"
)

// Parts is what Build returns.
type Parts struct {
	AWS         aws.Config
	Logger      *slog.Logger
	Metrics     *metrics.Emitter
	Checkpoints *checkpoint.Store
	Pipeline    *pipeline.Pipeline
}

// Build wires the pipeline for cfg. getenv is os.Getenv in a main (for AWS_LAMBDA_LOG_LEVEL and
// GAPLESS_CHAOS); logs and EMF metric lines go to out.
func Build(ctx context.Context, cfg config.Common, deadlineMargin time.Duration, getenv func(string) string, out io.Writer) (Parts, error) {
	logger := consumer.NewLogger(out, consumer.ParseLevel(getenv("AWS_LAMBDA_LOG_LEVEL")))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return Parts{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	ddb, sqsClient := dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)
	proc, err := chaos.WrapFromEnv(getenv, process.New(sqsClient, cfg.TargetQueueURL))
	if err != nil {
		return Parts{}, err
	}
	cps := checkpoint.New(ddb, cfg.CheckpointTable)
	ledger := pipeline.DedupeLedger{L: dedupe.New(ddb, cfg.DedupeTable, dedupe.WithTTL(cfg.LedgerTTL), dedupe.WithLogger(logger))}
	p, err := pipeline.New(
		ledger,
		pipeline.CheckpointStore{S: cps},
		park.New(sqsClient, cfg.ParkedQueueURL),
		proc,
		pipeline.Config{
			MaxRecordAttempts: cfg.MaxRecordAttempts, MaxConcurrency: cfg.MaxConcurrency,
			DeadlineMargin: deadlineMargin, DedupeKey: cfg.DedupeKey, LogPayloads: cfg.LogPayloads,
		},
		pipeline.WithLogger(logger), pipeline.WithClaimer(ledger),
	)
	if err != nil {
		return Parts{}, err
	}
	emf := metrics.New(out, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: cfg.Group}})
	return Parts{AWS: awsCfg, Logger: logger, Metrics: emf, Checkpoints: cps, Pipeline: p}, nil
}
