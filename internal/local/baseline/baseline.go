// Package baseline holds the Kinesis handlers gapless is measured against. None is part of
// gapless: they are the recipes a team writes without it, kept faithful so the benchmark
// (internal/local/bench, `gapless bench`) and the demo compare like with like.
//
//   - Bare is "the mapping alone": every record of the event through Process, no state, and a
//     partial batch response (ReportBatchItemFailures) naming the lowest failed sequence number.
//     Lambda redelivers from that record, so records after it that succeeded are processed again.
//   - Idempotent is Bare plus the record-level idempotency recipe of Powertools for AWS Lambda
//     (Python, TypeScript, Java, .NET): one DynamoDB item per record, claimed INPROGRESS with a
//     conditional PutItem before Process and set COMPLETED with an UpdateItem after it.
//   - CheckpointDecides is the field report's consumer: a shared per-shard checkpoint read before
//     the batch filters out records at or below it, and a lost compare-and-replace skips the
//     rest of the batch (checkpoint.go). It loses records whenever two batches of one shard run
//     at once; the demo runs it to show that failure.
//
// # The Powertools recipe, as implemented here
//
// From aws-powertools/powertools-lambda-python, aws_lambda_powertools/utilities/idempotency/
// persistence/dynamodb.py and base.py (the TypeScript DynamoDBPersistenceLayer is the same):
//
//   - Key: attribute `id` (S), the only key of the table; TTL attribute `expiration` (N, epoch
//     seconds). The key is "<function name>#" + md5 hex of the JSON of the selected data; the
//     batch-processing integration selects one field of the record with event_key_jmespath
//     ("messageId" for SQS in the docs' example); for Kinesis the field is "eventID" here.
//   - save_inprogress: PutItem {id, expiration = now + expires_after_seconds (default 3600),
//     status = "INPROGRESS", in_progress_expiration = now + the invocation's remaining time, in
//     milliseconds} with ConditionExpression
//     "attribute_not_exists(#id) OR #expiry < :now OR (#status = :inprogress AND
//     attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)" and
//     ReturnValuesOnConditionCheckFailure ALL_OLD.
//   - On ConditionalCheckFailedException the existing item decides (from the exception's Item,
//     or a consistent GetItem where the endpoint does not return it): COMPLETED and not expired
//     returns the stored result without running the function (here: the record counts as done);
//     INPROGRESS whose in-progress expiry has not passed raises IdempotencyAlreadyInProgressError
//     (here: the record fails, ErrInProgress); an item that turned out expired is an
//     "inconsistent state" and the claim is retried (MAX_RETRIES = 2, so 3 tries).
//   - save_success: UpdateItem "SET #response_data = :response_data, #expiry = :expiry,
//     #status = :status" with status COMPLETED and the JSON of the function's result (here the
//     record handler returns nothing: "null").
//   - delete_record: when the function raises, DeleteItem of the key, so a retry runs it again.
//
// So a new record costs exactly two writes (one conditional PutItem, one UpdateItem, 1 write
// unit each for these small items), a redelivered completed record one failed conditional write
// (which DynamoDB bills) and, on endpoints that do not return the old item, one read.
//
// The batch side follows the Powertools BatchProcessor for Kinesis: records run in event order
// and a failure does not stop the records after it (a known complaint: it breaks per-key order
// and they are delivered again anyway). WithConcurrency runs partition keys concurrently, each
// key in order. A panic in Process is recovered into a failure of that record.
package baseline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Errors.
var (
	// ErrInProgress fails a record whose idempotency item is INPROGRESS and not expired: another
	// invocation holds it (Powertools' IdempotencyAlreadyInProgressError).
	ErrInProgress = errors.New("baseline: record already in progress")
	// ErrPersistence fails a record whose idempotency item could not be read or written.
	ErrPersistence = errors.New("baseline: idempotency store unavailable")
	// ErrPanic wraps a panic recovered from Process.
	ErrPanic = errors.New("baseline: process panicked")
)

// Handler is the Lambda handler signature both recipes return (lambda.Start accepts it).
type Handler = func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error)

// Stats counts what a handler did across invocations. Safe for concurrent use; read it with
// the atomic Load methods.
type Stats struct {
	Records    atomic.Int64 // records received
	Processed  atomic.Int64 // Process ran and succeeded
	Failed     atomic.Int64 // records that failed (Process error, panic, in progress, store error)
	Duplicates atomic.Int64 // Idempotent only: skipped because their item was COMPLETED
	InProgress atomic.Int64 // Idempotent only: the part of Failed that was ErrInProgress
	// CheckpointDecides only: records dropped as at or below the stored checkpoint, batches
	// whose compare-and-replace lost, and failed records those batches left unretried.
	Filtered  atomic.Int64
	RacesLost atomic.Int64
	Abandoned atomic.Int64
}

type options struct {
	concurrency  int
	log          *slog.Logger
	stats        *Stats
	functionName string
	expiresAfter int64 // seconds
	now          func() int64
}

// Option configures a handler.
type Option func(*options)

// WithConcurrency processes up to n partition keys at once, each key in event order (default 1:
// the whole event in order).
func WithConcurrency(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.concurrency = n
		}
	}
}

// WithLogger logs record failures (default: discard). Payloads are never logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithStats counts outcomes into s.
func WithStats(s *Stats) Option { return func(o *options) { o.stats = s } }

func newOptions(opts []Option) *options {
	o := &options{concurrency: 1, log: slog.New(slog.DiscardHandler), stats: &Stats{},
		functionName: "baseline", expiresAfter: 3600, now: nowMillis}
	for _, f := range opts {
		f(o)
	}
	return o
}

// recordFunc handles one record; it returns a nil error when the record is done.
type recordFunc func(ctx context.Context, raw *events.KinesisEventRecord, r pipeline.Record) error

// Bare returns the stateless handler: each record through process, partial batch response with
// the lowest failed sequence number.
func Bare(process pipeline.ProcessFunc, opts ...Option) Handler {
	o := newOptions(opts)
	return o.handler(func(ctx context.Context, _ *events.KinesisEventRecord, r pipeline.Record) error {
		if err := call(ctx, process, r); err != nil {
			return err
		}
		o.stats.Processed.Add(1)
		return nil
	})
}

// handler runs fn over the event's records (in order, or by partition-key lanes) and builds the
// partial batch response.
func (o *options) handler(fn recordFunc) Handler {
	return func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
		n := len(ev.Records)
		o.stats.Records.Add(int64(n))
		failed := make([]bool, n)
		run := func(i int) {
			raw := &ev.Records[i]
			if err := fn(ctx, raw, toRecord(raw)); err != nil {
				failed[i] = true
				o.stats.Failed.Add(1)
				if errors.Is(err, ErrInProgress) {
					o.stats.InProgress.Add(1)
				}
				o.log.WarnContext(ctx, "record failed", "shard_id", shardOf(raw.EventID),
					"sequence_number", raw.Kinesis.SequenceNumber, "error", err.Error())
			}
		}
		if o.concurrency <= 1 {
			for i := range n {
				run(i)
			}
		} else {
			lanes := laneOf(ev.Records)
			work := make(chan []int)
			var wg sync.WaitGroup
			for range min(o.concurrency, len(lanes)) {
				wg.Go(func() {
					for lane := range work {
						for _, i := range lane {
							run(i)
						}
					}
				})
			}
			for _, l := range lanes {
				work <- l
			}
			close(work)
			wg.Wait()
		}
		lowest := -1
		for i := range n {
			if failed[i] && (lowest < 0 || lower(ev.Records[i].Kinesis.SequenceNumber, ev.Records[lowest].Kinesis.SequenceNumber)) {
				lowest = i
			}
		}
		if lowest < 0 {
			return events.KinesisEventResponse{}, nil // null batchItemFailures: complete success
		}
		return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{
			{ItemIdentifier: ev.Records[lowest].Kinesis.SequenceNumber},
		}}, nil
	}
}

// laneOf groups record indexes by partition key, lanes in order of their first record.
func laneOf(recs []events.KinesisEventRecord) [][]int {
	idx := map[string]int{}
	var lanes [][]int
	for i := range recs {
		k, ok := idx[recs[i].Kinesis.PartitionKey]
		if !ok {
			k = len(lanes)
			idx[recs[i].Kinesis.PartitionKey] = k
			lanes = append(lanes, nil)
		}
		lanes[k] = append(lanes[k], i)
	}
	return lanes
}

// lower orders sequence numbers numerically when both are valid; otherwise the earlier record
// (in event order, which is how Lambda delivers) stays the lowest.
func lower(a, b string) bool {
	if seqnum.Validate(a) != nil || seqnum.Validate(b) != nil {
		return false
	}
	return seqnum.Compare(a, b) < 0
}

// toRecord is the record as Process sees it. No KPL de-aggregation: neither recipe does it.
func toRecord(raw *events.KinesisEventRecord) pipeline.Record {
	return pipeline.Record{
		ID:           recordid.ID{ShardID: shardOf(raw.EventID), Seq: raw.Kinesis.SequenceNumber},
		PartitionKey: raw.Kinesis.PartitionKey,
		Data:         raw.Kinesis.Data,
		ArrivalTime:  raw.Kinesis.ApproximateArrivalTimestamp.Time,
	}
}

// shardOf extracts the shard id from an event id "shardId-000000000000:<sequence number>".
func shardOf(eventID string) string {
	shard, _, _ := strings.Cut(eventID, ":")
	return shard
}

// call runs process, turning a panic into an error.
func call(ctx context.Context, process pipeline.ProcessFunc, r pipeline.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, v, debug.Stack())
		}
	}()
	return process(ctx, r)
}
