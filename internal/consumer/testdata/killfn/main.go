// Command killfn is the consumer function (functions/consumer's wiring: typed configuration,
// DynamoDB ledger and checkpoint, SQS parking, the consumer handler, lambda.Start) with a
// Process that forwards records to TARGET_QUEUE_URL like package process, except a record whose
// payload holds "kill":true: for it Process writes the runtime's process id to $KILL_PID_FILE
// and blocks, so the test can SIGKILL the runtime in the middle of that record. Used by
// TestBootstrapKilledMidRecord under aws-lambda-rie.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/process"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "killfn: cold start failed: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	cfg, err := config.LoadConsumer(os.Getenv)
	if err != nil {
		return err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	ddb, sqsClient := dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)
	logger := consumer.NewLogger(os.Stdout, consumer.ParseLevel(os.Getenv("AWS_LAMBDA_LOG_LEVEL")))
	forward := process.New(sqsClient, cfg.TargetQueueURL)
	pidFile := os.Getenv("KILL_PID_FILE")
	proc := func(ctx context.Context, r pipeline.Record) error {
		if bytes.Contains(r.Data, []byte(`"kill":true`)) {
			if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
				return err
			}
			select {} // until SIGKILL
		}
		return forward(ctx, r)
	}
	ledger := pipeline.DedupeLedger{L: dedupe.New(ddb, cfg.DedupeTable, dedupe.WithTTL(cfg.LedgerTTL), dedupe.WithLogger(logger))}
	p, err := pipeline.New(ledger, pipeline.CheckpointStore{S: checkpoint.New(ddb, cfg.CheckpointTable)},
		park.New(sqsClient, cfg.ParkedQueueURL), proc,
		pipeline.Config{MaxRecordAttempts: cfg.MaxRecordAttempts, MaxConcurrency: cfg.MaxConcurrency,
			DeadlineMargin: cfg.DeadlineMargin, DedupeKey: cfg.DedupeKey, LogPayloads: cfg.LogPayloads},
		pipeline.WithLogger(logger), pipeline.WithClaimer(ledger))
	if err != nil {
		return err
	}
	emf := metrics.New(os.Stdout, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: cfg.Group}})
	h := consumer.NewHandler(p, cfg.Group, logger, consumer.WithMetrics(emf))
	lambda.Start(h.HandleJSON)
	return nil
}
