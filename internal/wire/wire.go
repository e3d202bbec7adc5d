// Package wire builds what both functions share from their typed configuration: the AWS
// clients (S3 for the payload bucket among them), the stores, the logger and the batch pipeline
// around the business logic (the user's Process, or package process's default bridge; wrapped by
// internal/local/chaos only in the demo's builds). It is the implementation behind the public
// package github.com/gapless-dev/gapless, which the function mains and users' modules call.
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
	"github.com/aws/aws-sdk-go-v2/service/s3"
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

// NewS3 returns the S3 client for the payload bucket. With AWS_ENDPOINT_URL_S3 set (the local
// stack: fauxqs or moto_server on 127.0.0.1) it addresses buckets path-style, the only style an
// emulator on a bare host:port can serve; in AWS, virtual-hosted style as the SDK defaults.
func NewS3(cfg aws.Config, getenv func(string) string) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = getenv("AWS_ENDPOINT_URL_S3") != ""
		// The emulators send no response checksums; the SDK would print a plain-text DEBUG line
		// per GetObject into the JSON logs.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
}

// Parts is what Build returns.
type Parts struct {
	AWS         aws.Config
	Logger      *slog.Logger
	Metrics     *metrics.Emitter
	Checkpoints *checkpoint.Store
	Pipeline    *pipeline.Pipeline
}

// Option adjusts Build (options.go lists them).
type Option func(*options)

// Build wires the pipeline for cfg. getenv is os.Getenv in a main (for AWS_LAMBDA_LOG_LEVEL and
// AWS_ENDPOINT_URL_S3); logs and EMF metric lines go to out unless WithLogger or
// WithMetricsWriter say otherwise. Without WithProcess the Process is the default bridge
// (package process) to cfg.TargetQueueURL.
func Build(ctx context.Context, cfg config.Common, deadlineMargin time.Duration, getenv func(string) string, out io.Writer, opts ...Option) (Parts, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	logger := o.logger
	if logger == nil {
		logger = consumer.NewLogger(out, consumer.ParseLevel(getenv("AWS_LAMBDA_LOG_LEVEL")))
	}
	metricsOut := out
	if o.metrics != nil {
		metricsOut = o.metrics
	}
	var awsCfg aws.Config
	if o.aws != nil {
		awsCfg = *o.aws
	} else {
		var err error
		if awsCfg, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return Parts{}, fmt.Errorf("load AWS configuration: %w", err)
		}
	}
	ddb, sqsClient := dynamodb.NewFromConfig(awsCfg), sqs.NewFromConfig(awsCfg)
	objects := NewS3(awsCfg, getenv)
	proc := o.process
	if proc == nil {
		proc = process.New(sqsClient, cfg.TargetQueueURL, process.WithPayloadBucket(objects, cfg.PayloadBucket))
	}
	if o.wrap != nil {
		proc = o.wrap(proc)
	}
	cps := checkpoint.New(ddb, cfg.CheckpointTable)
	ledger := pipeline.DedupeLedger{L: dedupe.New(ddb, cfg.DedupeTable, dedupe.WithTTL(cfg.LedgerTTL), dedupe.WithLogger(logger))}
	popts := []pipeline.Option{pipeline.WithLogger(logger), pipeline.WithClaimer(ledger), batchSink(o, sqsClient, objects, cfg)}
	var view pipeline.Ledger = ledger
	if o.redriveLedger != nil {
		view = o.redriveLedger(ledger)
	} else if cfg.OnPark == config.OnParkHoldKey {
		popts = append(popts, pipeline.WithHoldKey(pipeline.HoldStore{H: dedupe.NewHolds(ddb, cfg.DedupeTable)}))
	}
	p, err := pipeline.New(
		view,
		pipeline.CheckpointStore{S: cps},
		park.New(sqsClient, cfg.ParkedQueueURL, park.WithPayloadBucket(objects, cfg.PayloadBucket)),
		proc,
		pipeline.Config{
			MaxRecordAttempts: cfg.MaxRecordAttempts, MaxConcurrency: cfg.MaxConcurrency,
			DeadlineMargin: deadlineMargin, DedupeKey: cfg.DedupeKey, LogPayloads: cfg.LogPayloads,
		},
		popts...,
	)
	if err != nil {
		return Parts{}, err
	}
	emf := metrics.New(metricsOut, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: cfg.Group}})
	return Parts{AWS: awsCfg, Logger: logger, Metrics: emf, Checkpoints: cps, Pipeline: p}, nil
}

// batchSink is the batch form of the business logic: WithBatchProcess's, or the default bridge
// in batch form unless per-record sending was asked for or the Process is not the default one
// (WithProcess, or WithProcessWrapper without a WithBatchWrapper). WithBatchWrapper wraps it.
func batchSink(o options, client *sqs.Client, objects *s3.Client, cfg config.Common) pipeline.Option {
	sink, chunk := o.batch, o.chunk
	if sink == nil {
		chunk = process.MaxBatchEntries
		if o.process != nil || o.perRecord || (o.wrap != nil && o.batchWrap == nil) {
			return func(*pipeline.Pipeline) {}
		}
		sink = process.NewBatch(client, cfg.TargetQueueURL, process.WithPayloadBucket(objects, cfg.PayloadBucket))
	}
	if o.batchWrap != nil {
		sink = o.batchWrap(sink)
	}
	return pipeline.WithBatchSink(sink, chunk)
}
