package gapless

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/wire"
)

// Reconciler is the function that proves nothing behind the checkpoint was skipped: an
// EventBridge schedule starts a pass over every shard of the stream, replaying gaps through the
// Process, and the event-source mapping's on-failure SQS queue (FunctionResponseTypes:
// ReportBatchItemFailures) names ranges to replay.
type Reconciler struct {
	h *reconcile.Handler
}

// NewReconciler reads and validates the reconciler's configuration (an error wraps
// ErrInvalidConfig and names every bad variable), builds the clients and the pipeline around p
// (nil: the default Process; give it the consumer's), and returns the handler.
func NewReconciler(ctx context.Context, p ProcessFunc, opts ...Option) (*Reconciler, error) {
	o := newOptions(opts)
	cfg, err := config.LoadReconciler(o.getenv, o.loadOptions(p)...)
	if err != nil {
		return nil, err
	}
	parts, err := o.build(ctx, cfg.Common, config.DefaultDeadlineMargin, p)
	if err != nil {
		return nil, err
	}
	r, err := reconcile.New(kinesis.NewFromConfig(parts.AWS), parts.Checkpoints, parts.Pipeline,
		reconcile.Config{Group: cfg.Group, Stream: cfg.StreamName, StreamARN: cfg.StreamARN, SettleAfter: cfg.SettleAfter,
			MaxRecordAge: cfg.MaxRecordAge, Filter: cfg.RecordFilter, StartingPosition: cfg.StartingPosition},
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
	if cfg.ConsumerFunction == "" {
		parts.Logger.Warn("failure-queue messages are accepted from any function: set "+config.EnvConsumerFunction+" to the consumer function's ARN",
			"group", cfg.Group)
	}
	// The failure queue's untried messages go back to it (the record's eventSourceARN names it);
	// only the mapping's own messages are believed, and a range replays only its batch's lane.
	hopts := []reconcile.HandlerOption{reconcile.WithRelease(sqs.NewFromConfig(parts.AWS)),
		reconcile.WithConsumerFunction(cfg.ConsumerFunction), reconcile.WithLanes(cfg.ParallelizationFactor),
		// Operator commands (gapless redrive, gapless replay) run here, with this Process and
		// this configuration.
		reconcile.WithCommands(o.newRedriver(cfg, p, parts), cfg.OnPark)}
	if cfg.FailureBucket != "" { // the mapping's S3 on-failure destination: its objects' notifications come on the failure queue
		hopts = append(hopts, reconcile.WithFailureBucket(wire.NewS3(parts.AWS, o.getenv), cfg.FailureBucket))
	}
	if cfg.VerifyQueueURL != "" { // fan-out: a scheduled pass queues each shard's walk; this function walks them
		hopts = append(hopts, reconcile.WithVerifyQueue(sqs.NewFromConfig(parts.AWS), cfg.VerifyQueueURL))
	}
	return &Reconciler{h: reconcile.NewHandler(r, parts.Metrics, parts.Logger, hopts...)}, nil
}

// newRedriver builds a redrive session the way the consumer's pipeline is built (this Process,
// parked queue, payload bucket, MAX_RECORD_ATTEMPTS as the fresh budget), over a fresh
// reconcile.NewRedriveLedger per session; held keys (ON_PARK=hold-key) are redriven in order
// and released (without holds in the ledger this costs one GetItem per partition key seen).
func (o options) newRedriver(cfg config.Reconciler, p ProcessFunc, parts wire.Parts) reconcile.NewRedriverFunc {
	sqsClient, ddb := sqs.NewFromConfig(parts.AWS), dynamodb.NewFromConfig(parts.AWS)
	objects := wire.NewS3(parts.AWS, o.getenv)
	kin := kinesis.NewFromConfig(parts.AWS)
	return func(ctx context.Context, rc reconcile.RedriveConfig, progress func(reconcile.RedriveEvent)) (*reconcile.Redriver, error) {
		rp, err := o.build(ctx, cfg.Common, config.DefaultDeadlineMargin, p, wire.WithAWSConfig(parts.AWS), wire.WithLogger(parts.Logger),
			wire.ForRedrive(func(l pipeline.Ledger) pipeline.Ledger { return reconcile.NewRedriveLedger(l) }))
		if err != nil {
			return nil, err
		}
		rc.MaxRecordAttempts = cfg.MaxRecordAttempts
		return reconcile.NewRedriver(sqsClient, cfg.ParkedQueueURL, kin, rp.Pipeline, rc,
			reconcile.WithRedriveHolds(dedupe.NewHolds(ddb, cfg.DedupeTable)), reconcile.WithRedriveLogger(parts.Logger),
			reconcile.WithRedrivePayloads(objects), reconcile.WithRedrivePayloadBucket(cfg.PayloadBucket),
			reconcile.WithRedriveMetrics(parts.Metrics), reconcile.WithRedriveProgress(progress))
	}
}

// Handle is what StartReconciler registers. An SQS event (the on-failure queue, or the verify
// queue's shard walks) is answered with an events.SQSEventResponse naming the messages to retry; an operator command
// ({"gapless": {"version": 1, "command": "redrive" or "replay", ...}}, sent by gapless redrive
// and gapless replay) runs with this Process and configuration and is answered with
// {"gapless": {...report}}, or refused with an error naming why; any other event (an
// EventBridge scheduled event, or {} from a manual invoke) runs a scheduled pass and is answered
// with its summary, a JSON object of counts (recordsVerified, gapsDetected, gapsReplayed,
// parked, lostToRetention, ...).
func (r *Reconciler) Handle(ctx context.Context, event json.RawMessage) (any, error) {
	return r.h.Handle(ctx, event)
}

// StartReconciler is the reconciler function's main: NewReconciler with os.Getenv, then
// lambda.Start. A configuration error is printed to standard error and the process exits with
// status 1.
func StartReconciler(p ProcessFunc, opts ...Option) {
	r, err := NewReconciler(context.Background(), p, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless reconciler: cold start failed: %v\n", err)
		os.Exit(1)
	}
	lambda.Start(r.Handle)
}
