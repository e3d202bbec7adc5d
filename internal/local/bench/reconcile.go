package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/schema"
)

// ReconcileResult is what verifying a stream the gapless handler consumed cost the reconciler.
type ReconcileResult struct {
	Records         int            `json:"records"`
	Tail            int            `json:"tail"` // records written after them and not consumed
	ConsumedBatches int            `json:"consumed_batches"`
	RecordsVerified int            `json:"records_verified"`
	GapsDetected    int            `json:"gaps_detected"`
	Runs            int            `json:"runs"`
	KinesisCalls    map[string]int `json:"kinesis_calls"` // counted by SDK middleware
	// ReportedGetRecords is the sum of the reconciler's own Report.GetRecordsCalls, kept to
	// cross-check KinesisCalls["GetRecords"].
	ReportedGetRecords int `json:"reported_get_records"`
	// Per 10,000 records verified.
	GetRecordsPer10k   float64 `json:"get_records_per_10k"`
	KinesisCallsPer10k float64 `json:"kinesis_calls_per_10k"`
	// DynamoDB of the reconciler (ledger lookups, checkpoint reads and the watermark write).
	DDBCalls           int64   `json:"ddb_calls"`
	ReadUnitsPerRecord float64 `json:"rcu_per_record"`
	WriteUnits         float64 `json:"wcu"`
	Seconds            float64 `json:"seconds"`
}

// opCounter counts Kinesis calls by operation through SDK middleware (one per client method
// call, like ddbmeter's Calls).
type opCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounter) options(o *kinesis.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("bench.count",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.mu.Lock()
				c.n[middleware.GetOperationName(ctx)]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// Reconcile fills a one-shard stream with n records plus a 1% tail, consumes the n through the
// gapless handler in batches of batch records (read with plain GetRecords, as the mapping
// would), then runs the
// reconciler (settle window 0) until it has verified the shard up to the checkpoint, counting its
// Kinesis and DynamoDB calls.
func Reconcile(ctx context.Context, c Clients, t Tables, nonce string, n, batch int) (ReconcileResult, error) {
	res := ReconcileResult{Records: n}
	kin := kinesis.NewFromConfig(c.Config)
	stream := "bench-reconcile-" + nonce
	arn, err := schema.EnsureStream(ctx, kin, stream, 1)
	if err != nil {
		return res, err
	}
	// A live stream has records past the consumer's checkpoint: a tail of 1% is written and not
	// consumed, so the reconciler's page shows where the checkpoint ends.
	tail := max(n/100, 10)
	res.Tail = tail
	recs := loadgen.Records(loadgen.Spec{Records: n + tail, Keys: Keys, PadBytes: 8, Seed: 7})
	if err := loadgen.Produce(ctx, kin, stream, recs, 0, nil); err != nil {
		return res, fmt.Errorf("bench: fill stream: %w", err)
	}

	gapless, err := NewSubject(Gapless, c, t)
	if err != nil {
		return res, err
	}
	shards, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil || len(shards.Shards) != 1 {
		return res, fmt.Errorf("bench: list shards of %s: %v (%d shards)", stream, err, len(shards.Shards))
	}
	shardID := aws.ToString(shards.Shards[0].ShardId)
	if err := consume(ctx, kin, stream, arn, shardID, batch, n, gapless, &res); err != nil {
		return res, err
	}

	counter := &opCounter{n: map[string]int{}}
	meter := ddbmeter.New()
	ddb := dynamodb.NewFromConfig(c.Config, meter.Options())
	p, err := pipeline.New(pipeline.DedupeLedger{L: dedupe.New(ddb, t.Ledger, dedupe.WithLogger(slog.New(slog.DiscardHandler)))},
		pipeline.CheckpointStore{S: checkpoint.New(ddb, t.Checkpoint)},
		park.New(sqs.NewFromConfig(c.Config), t.ParkedQueue), Checksum, pipeline.DefaultConfig())
	if err != nil {
		return res, err
	}
	rc, err := reconcile.New(kinesis.NewFromConfig(c.Config, counter.options), checkpoint.New(ddb, t.Checkpoint), p,
		reconcile.Config{Group: t.Group, Stream: stream, SettleAfter: 0},
		reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return res, err
	}
	start := time.Now()
	getRecords := 0
	for res.Runs < 5 && res.RecordsVerified < n {
		rep, err := rc.Run(ctx)
		res.Runs++
		if err != nil {
			return res, fmt.Errorf("bench: reconcile run %d: %w", res.Runs, err)
		}
		res.RecordsVerified += rep.RecordsVerified
		res.GapsDetected += rep.GapsDetected
		getRecords += rep.GetRecordsCalls
	}
	res.Seconds = time.Since(start).Seconds()
	if res.RecordsVerified < n {
		return res, fmt.Errorf("bench: reconciler verified %d of %d records of %s in %d runs", res.RecordsVerified, n, shardID, res.Runs)
	}
	res.KinesisCalls = counter.n
	res.ReportedGetRecords = getRecords // the client's count is the one used
	total := 0
	for _, v := range counter.n {
		total += v
	}
	per := 10000 / float64(res.RecordsVerified)
	res.GetRecordsPer10k = float64(counter.n["GetRecords"]) * per
	res.KinesisCallsPer10k = float64(total) * per
	s := meter.Snapshot()
	res.DDBCalls = s.Total.Calls
	res.ReadUnitsPerRecord = s.Total.ReadUnits / float64(res.RecordsVerified)
	res.WriteUnits = s.Total.WriteUnits
	return res, nil
}

// consume reads the first n records of shardID from its start and hands them to s in batches.
func consume(ctx context.Context, kin *kinesis.Client, stream, arn, shardID string, batch, n int, s *Subject, res *ReconcileResult) error {
	it, err := kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName: aws.String(stream), ShardId: aws.String(shardID), ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		return fmt.Errorf("bench: shard iterator: %w", err)
	}
	iter := it.ShardIterator
	var pending []kintypes.Record
	flush := func() error {
		ev := events.KinesisEvent{Records: make([]events.KinesisEventRecord, len(pending))}
		for i, r := range pending {
			seq := aws.ToString(r.SequenceNumber)
			ev.Records[i] = events.KinesisEventRecord{
				AwsRegion: region, EventID: shardID + ":" + seq, EventName: "aws:kinesis:record",
				EventSource: "aws:kinesis", EventSourceArn: arn, EventVersion: "1.0",
				Kinesis: events.KinesisRecord{
					ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: aws.ToTime(r.ApproximateArrivalTimestamp)},
					Data:                        r.Data, PartitionKey: aws.ToString(r.PartitionKey), SequenceNumber: seq,
					KinesisSchemaVersion: "1.0",
				},
			}
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		resp, err := s.Invoke(ctx, raw)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			return fmt.Errorf("bench: consume batch: %+v %v", resp.BatchItemFailures, err)
		}
		res.ConsumedBatches++
		pending = pending[:0]
		return nil
	}
	read, empty := 0, 0
	for read < n {
		if empty > 100 {
			return fmt.Errorf("bench: read %d of %d records of %s: the stream returns nothing more", read, n, shardID)
		}
		out, err := kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
		if err != nil {
			return fmt.Errorf("bench: read %s: %w", shardID, err)
		}
		for _, r := range out.Records {
			if read == n {
				break // the tail stays unconsumed
			}
			pending = append(pending, r)
			read++
			if len(pending) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 {
			empty++
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(pending) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}
