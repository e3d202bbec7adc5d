package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/sqsesm"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// The deployed reconciler function's size (template.yaml): what a walk is billed at.
const (
	reconcilerMemoryGB = 0.5 // MemorySize 512
	reconcilerTimeout  = 300 * time.Second
	// lambdaGBSecondUSD is Lambda's x86 price per GB-second in us-east-1 (first pricing tier):
	// https://aws.amazon.com/lambda/pricing/
	lambdaGBSecondUSD = 0.0000166667
	// verifyVisibilitySeconds is the VerifyQueue's VisibilityTimeout.
	verifyVisibilitySeconds = 1800
)

// FanOutResult is one fan-out pass over a stream whose records were all consumed: the
// coordinator's invocation, then every shard's walk as its own invocation of the reconciler,
// run by the local SQS event source at MaximumConcurrency = shards.
type FanOutResult struct {
	Shards             int     `json:"shards"`
	RecordsPer         int     `json:"records_per_shard"`
	RecordBytes        int     `json:"record_bytes"`
	WalkBytesPerSecond int64   `json:"walk_bytes_per_second"` // 0: the deployed 1 MiB/s
	ShardsQueued       int     `json:"shards_queued"`         // by the coordinator
	ShardsDone         int     `json:"shards_done"`           // watermark at the checkpoint
	Walks              int64   `json:"walks"`                 // invocations of the verify queue's event source
	FailedWalks        int64   `json:"failed_walks"`          // walks that answered with their message failed
	Seconds            float64 `json:"seconds"`               // from the coordinator's invocation to the last shard done
	MBPerSecond        float64 `json:"mb_per_second"`         // stream-wide: bytes verified / Seconds
	WalkSeconds        float64 `json:"walk_seconds"`          // summed over walks: the billed duration
	GBSeconds          float64 `json:"gb_seconds"`            // WalkSeconds × the function's 0.5 GB
	GetRecords         int     `json:"get_records"`
	KinesisCalls       int     `json:"kinesis_calls"`
	DDBCalls           int64   `json:"ddb_calls"`
	ReadUnits          float64 `json:"read_units"`
	WriteUnits         float64 `json:"write_units"`
	PerMillionUSD      float64 `json:"lambda_usd_per_million_records"`
}

// FanOutSpec is the stream a fan-out pass verifies and how fast each walk reads.
type FanOutSpec struct {
	Shards, PerShard, RecordBytes int
	// WalkBytesPerSecond paces each walk; 0 is the deployed function's 1 MiB/s in pages of up
	// to 10,000 records, run through gapless.NewReconciler itself. The local Kinesis emulator
	// serves about 1.2 MB/s in all on two cores, so scaling past one shard is measured at a
	// per-walk rate it can serve to every shard at once.
	WalkBytesPerSecond int64
}

// FanOut writes spec.PerShard records of spec.RecordBytes to each of a fresh stream's shards,
// consumes them all through the gapless handler, then times one scheduled pass of the
// reconciler function (VERIFY_QUEUE_URL set) until every shard's watermark reaches its
// checkpoint: the coordinator's invocation queues each shard's walk on a FIFO verify queue and
// the local SQS event source invokes the reconciler with them, one shard per invocation, as
// many at once as there are shards.
func FanOut(ctx context.Context, c Clients, t Tables, nonce string, spec FanOutSpec) (FanOutResult, error) {
	shards, perShard, recordBytes := spec.Shards, spec.PerShard, spec.RecordBytes
	res := FanOutResult{Shards: shards, RecordsPer: perShard, RecordBytes: recordBytes, WalkBytesPerSecond: spec.WalkBytesPerSecond}
	kin := kinesis.NewFromConfig(c.Config)
	stream := "bench-fanout-" + nonce
	arn, err := schema.EnsureStream(ctx, kin, stream, int32(shards))
	if err != nil {
		return res, err
	}
	list, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil || len(list.Shards) != shards {
		return res, fmt.Errorf("bench: list shards of %s: %v (%d of %d shards)", stream, err, len(list.Shards), shards)
	}
	for _, sh := range list.Shards {
		if err := fillShard(ctx, kin, stream, sh, perShard, recordBytes); err != nil {
			return res, err
		}
	}
	subject, err := NewSubject(Gapless, c, t)
	if err != nil {
		return res, err
	}
	var consumed ReconcileResult
	for _, sh := range list.Shards {
		if err := consume(ctx, kin, stream, arn, aws.ToString(sh.ShardId), consumeBatch(recordBytes), perShard, subject, &consumed); err != nil {
			return res, err
		}
	}

	sqsc := sqs.NewFromConfig(c.Config)
	verifyURL, err := schema.EnsureQueue(ctx, sqsc, schema.Queue{Name: "bench-verify-" + nonce + ".fifo", FIFO: true})
	if err != nil {
		return res, fmt.Errorf("bench: verify queue: %w", err)
	}
	// template.yaml's VerifyQueue: a walk in flight keeps its message (and its shard's message
	// group) hidden for up to 30 minutes, so a slow walk is never walked twice at once.
	if _, err := sqsc.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(verifyURL),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameVisibilityTimeout): strconv.Itoa(verifyVisibilitySeconds)}}); err != nil {
		return res, fmt.Errorf("bench: verify queue: %w", err)
	}
	meter, kc := ddbmeter.New(), &opCounter{n: map[string]int{}}
	metered := c.Config.Copy()
	metered.APIOptions = append(metered.APIOptions, meter.APIOption, kc.apiOption(kinesis.ServiceID))
	handle, err := reconcilerFunction(ctx, metered, t, nonce, stream, verifyURL, spec)
	if err != nil {
		return res, err
	}
	time.Sleep(1100 * time.Millisecond) // the last record is older than SETTLE_AFTER

	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, reconcilerTimeout)
	out, err := handle(cctx, json.RawMessage(`{}`))
	cancel()
	if err != nil {
		return res, fmt.Errorf("bench: coordinator: %w", err)
	}
	sum, ok := out.(reconcile.Summary)
	if !ok {
		return res, fmt.Errorf("bench: coordinator answered %T, want reconcile.Summary", out)
	}
	res.ShardsQueued = sum.ShardsQueued
	if sum.ShardsQueued != shards {
		return res, fmt.Errorf("bench: coordinator queued %d of %d shards: %+v", sum.ShardsQueued, shards, sum)
	}
	m, err := sqsesm.New(ctx, sqsc, sqsesm.Config{QueueURL: verifyURL, BatchSize: 1,
		MaximumConcurrency: max(shards, 2), FunctionTimeout: reconcilerTimeout}, func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		raw, err := json.Marshal(ev)
		if err != nil {
			return events.SQSEventResponse{}, err
		}
		out, err := handle(ctx, raw)
		if err != nil {
			return events.SQSEventResponse{}, err
		}
		resp, ok := out.(events.SQSEventResponse)
		if !ok {
			return events.SQSEventResponse{}, fmt.Errorf("bench: walk answered %T, want events.SQSEventResponse", out)
		}
		return resp, nil
	})
	if err != nil {
		return res, err
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(rctx) })
	done, err := waitVerified(ctx, checkpoint.New(dynamodb.NewFromConfig(c.Config), t.Checkpoint), t.Group, stream, list.Shards, start.Add(2*reconcilerTimeout))
	res.Seconds = time.Since(start).Seconds()
	stop()
	wg.Wait()
	res.ShardsDone = done
	res.Walks, res.FailedWalks = m.Stats.Invocations.Load(), m.Stats.Failed.Load()
	res.WalkSeconds = m.Stats.Busy().Seconds()
	res.GBSeconds = res.WalkSeconds * reconcilerMemoryGB
	records := shards * perShard
	res.MBPerSecond = float64(records*recordBytes) / 1e6 / res.Seconds
	res.PerMillionUSD = res.GBSeconds * lambdaGBSecondUSD * 1e6 / float64(records)
	kc.mu.Lock()
	res.GetRecords = kc.n["GetRecords"]
	for _, v := range kc.n {
		res.KinesisCalls += v
	}
	kc.mu.Unlock()
	s := meter.Snapshot()
	res.DDBCalls, res.ReadUnits, res.WriteUnits = s.Total.Calls, s.Total.ReadUnits, s.Total.WriteUnits
	return res, err
}

// reconcilerFunction is the reconciler function's handler over the bench's tables and stream,
// built from metered (every DynamoDB and Kinesis call it makes is counted). At walkRate 0 it
// is gapless.NewReconciler with the deployed variables; otherwise the same handler wired by
// hand, its walks paced at spec.WalkBytesPerSecond.
func reconcilerFunction(ctx context.Context, metered aws.Config, t Tables, nonce, stream, verifyURL string, spec FanOutSpec) (func(context.Context, json.RawMessage) (any, error), error) {
	log := slog.New(slog.DiscardHandler)
	if walkRate := spec.WalkBytesPerSecond; walkRate > 0 {
		// Pages of about ten seconds of the walk's rate: the emulator serves the walks' reads
		// spread over the pass, not as one burst of 10 MB pages at its start.
		page := int32(max(1, min(10000, walkRate*10/int64(spec.RecordBytes))))
		ddb := dynamodb.NewFromConfig(metered)
		cps := checkpoint.New(ddb, t.Checkpoint)
		p, err := pipeline.New(pipeline.DedupeLedger{L: dedupe.New(ddb, t.Ledger, dedupe.WithLogger(log))}, pipeline.CheckpointStore{S: cps},
			park.New(sqs.NewFromConfig(metered), t.ParkedQueue), Checksum, pipeline.DefaultConfig())
		if err != nil {
			return nil, err
		}
		rc, err := reconcile.New(kinesis.NewFromConfig(metered), cps, p,
			reconcile.Config{Group: t.Group, Stream: stream, SettleAfter: time.Second, ReadBytesPerSecond: walkRate, PageLimit: page}, reconcile.WithLogger(log))
		if err != nil {
			return nil, err
		}
		return reconcile.NewHandler(rc, nil, log, reconcile.WithVerifyQueue(sqs.NewFromConfig(metered), verifyURL)).Handle, nil
	}
	bucket := "bench-payloads-" + nonce
	if err := schema.EnsureBucket(ctx, s3.NewFromConfig(metered, func(o *s3.Options) { o.UsePathStyle = true }), bucket); err != nil {
		return nil, fmt.Errorf("bench: payload bucket: %w", err)
	}
	env := map[string]string{
		"GAPLESS_GROUP": t.Group, "CHECKPOINT_TABLE": t.Checkpoint, "DEDUPE_TABLE": t.Ledger,
		"PARKED_QUEUE_URL": t.ParkedQueue, "STREAM_NAME": stream, "SETTLE_AFTER": "1s", "VERIFY_QUEUE_URL": verifyURL,
		"PAYLOAD_BUCKET": bucket, "AWS_ENDPOINT_URL_S3": os.Getenv("AWS_ENDPOINT_URL_S3"),
	}
	r, err := gapless.NewReconciler(ctx, checksumProcess, gapless.WithGetenv(func(k string) string { return env[k] }),
		gapless.WithAWSConfig(metered), gapless.WithLogger(log), gapless.WithMetricsWriter(io.Discard))
	if err != nil {
		return nil, err
	}
	return r.Handle, nil
}

// consumeBatch keeps a consumed batch within Lambda's 6 MB invocation payload (base64 in JSON).
func consumeBatch(recordBytes int) int { return max(1, min(1000, 4<<20/(recordBytes*4/3+200))) }

// checksumProcess is Checksum as the public package's ProcessFunc.
func checksumProcess(ctx context.Context, r gapless.Record) error {
	return Checksum(ctx, pipeline.Record{Data: r.Data, PartitionKey: r.PartitionKey})
}

// fillShard writes n records of size bytes to sh alone (ExplicitHashKey at its range's start),
// at most 5 MB and 500 records per PutRecords, retrying the entries Kinesis refused.
func fillShard(ctx context.Context, kin *kinesis.Client, stream string, sh kintypes.Shard, n, size int) error {
	hash := sh.HashKeyRange.StartingHashKey
	per := max(1, min(500, (5<<20)/(size+64)))
	data := make([]byte, size)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	for written := 0; written < n; {
		var entries []kintypes.PutRecordsRequestEntry
		for i := written; i < min(n, written+per); i++ {
			entries = append(entries, kintypes.PutRecordsRequestEntry{Data: data, ExplicitHashKey: hash,
				PartitionKey: aws.String(fmt.Sprintf("k-%d", i))})
		}
		for attempt := 0; len(entries) > 0; attempt++ {
			if attempt == 20 {
				return fmt.Errorf("bench: %s of %s: %d records still refused after %d PutRecords", aws.ToString(sh.ShardId), stream, len(entries), attempt)
			}
			out, err := kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
			if err != nil {
				return fmt.Errorf("bench: fill %s of %s: %w", aws.ToString(sh.ShardId), stream, err)
			}
			var again []kintypes.PutRecordsRequestEntry
			for j, r := range out.Records {
				if r.ErrorCode != nil {
					again = append(again, entries[j])
				} else if aws.ToString(r.ShardId) != aws.ToString(sh.ShardId) {
					return fmt.Errorf("bench: a record for %s landed on %s", aws.ToString(sh.ShardId), aws.ToString(r.ShardId))
				}
			}
			written += len(entries) - len(again)
			if entries = again; len(entries) > 0 {
				time.Sleep(time.Second) // the shard's write limit is per second
			}
		}
	}
	return nil
}

// waitVerified polls every shard's checkpoint item until its watermark equals its checkpoint,
// and returns how many do; an error if some do not by the deadline.
func waitVerified(ctx context.Context, cp *checkpoint.Store, group, stream string, shards []kintypes.Shard, deadline time.Time) (int, error) {
	left := map[string]bool{}
	for _, sh := range shards {
		left[aws.ToString(sh.ShardId)] = true
	}
	for {
		for id := range left {
			st, err := cp.Get(ctx, recordid.Shard{Group: group, Stream: stream, ShardID: id})
			if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
				return len(shards) - len(left), err
			}
			if st.Checkpoint != "" && st.Watermark == st.Checkpoint {
				delete(left, id)
			}
		}
		if len(left) == 0 {
			return len(shards), nil
		}
		if time.Now().After(deadline) {
			return len(shards) - len(left), fmt.Errorf("bench: %d of %d shards not verified by %s", len(left), len(shards), deadline.Format(time.TimeOnly))
		}
		select {
		case <-ctx.Done():
			return len(shards) - len(left), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// apiOption is the counter as an aws.Config API option, counting only service's calls.
func (c *opCounter) apiOption(service string) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("bench.countService",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if awsmiddleware.GetServiceID(ctx) == service {
					c.mu.Lock()
					c.n[middleware.GetOperationName(ctx)]++
					c.mu.Unlock()
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}
}
