package gapless

import (
	"context"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Record is one user record of a Kinesis data stream, as Process receives it.
type Record struct {
	// ShardID is the shard the record was read from (shardId-000000000003).
	ShardID string
	// SequenceNumber is the record's Kinesis sequence number (decimal, up to 129 digits).
	SequenceNumber string
	// SubSequenceNumber is the record's position inside a KPL aggregate; 0 for a plain record.
	SubSequenceNumber uint32
	// PartitionKey is the record's partition key (the user record's own, inside a KPL aggregate).
	PartitionKey string
	// Data is the record's payload, de-aggregated and base64-decoded. Process must not keep it
	// past its return nor modify it.
	Data []byte
	// ArrivalTime is Kinesis's ApproximateArrivalTimestamp; zero when the event carried none.
	ArrivalTime time.Time
}

// ID names the record uniquely within its stream, the same way on every attempt, replay and
// redrive: "<shard id>:<sequence number>:<sub-sequence number>". Use it as the idempotency key of
// Process's side effect. It is the id gapless's ledger, logs and parked messages use.
func (r Record) ID() string {
	return recordid.ID{ShardID: r.ShardID, Seq: r.SequenceNumber, Sub: r.SubSequenceNumber}.String()
}

// ProcessFunc is your business logic for one record (see the package documentation for the
// contract). A nil ProcessFunc given to StartConsumer, NewConsumer, StartReconciler or
// NewReconciler selects the default Process: forward the record to TARGET_QUEUE_URL.
type ProcessFunc func(ctx context.Context, r Record) error

// ErrInvalidConfig is wrapped by every configuration error NewConsumer and NewReconciler
// return; the message names the variable.
var ErrInvalidConfig = config.ErrInvalid

func fromPipeline(r pipeline.Record) Record {
	return Record{ShardID: r.ID.ShardID, SequenceNumber: r.ID.Seq, SubSequenceNumber: r.ID.Sub,
		PartitionKey: r.PartitionKey, Data: r.Data, ArrivalTime: r.ArrivalTime}
}

func toPipeline(r Record) pipeline.Record {
	return pipeline.Record{ID: recordid.ID{ShardID: r.ShardID, Seq: r.SequenceNumber, Sub: r.SubSequenceNumber},
		PartitionKey: r.PartitionKey, Data: r.Data, ArrivalTime: r.ArrivalTime}
}

// public turns the pipeline's Process into a ProcessFunc.
func public(p pipeline.ProcessFunc) ProcessFunc {
	return func(ctx context.Context, r Record) error { return p(ctx, toPipeline(r)) }
}

// BatchProcessFunc is the batch form of ProcessFunc (WithBatchProcess): it gets a wave of records
// and returns one outcome per record, in the same order (nil: done; an error: that record
// failed, as a ProcessFunc error). A slice of another length, or a panic, fails every record of
// the wave. The contract of ProcessFunc holds per record: return nil only once the record's
// effect is durable, and be idempotent.
type BatchProcessFunc func(ctx context.Context, recs []Record) []error

// publicBatch turns the pipeline's batch form into a BatchProcessFunc.
func publicBatch(b pipeline.BatchFunc) BatchProcessFunc {
	return func(ctx context.Context, recs []Record) []error {
		in := make([]pipeline.Record, len(recs))
		for i, r := range recs {
			in[i] = toPipeline(r)
		}
		return b(ctx, in)
	}
}

// internalBatch turns a BatchProcessFunc into the pipeline's batch form.
func internalBatch(b BatchProcessFunc) pipeline.BatchFunc {
	return func(ctx context.Context, recs []pipeline.Record) []error {
		in := make([]Record, len(recs))
		for i, r := range recs {
			in[i] = fromPipeline(r)
		}
		return b(ctx, in)
	}
}

// internal turns a ProcessFunc into the pipeline's Process.
func internal(p ProcessFunc) pipeline.ProcessFunc {
	return func(ctx context.Context, r pipeline.Record) error { return p(ctx, fromPipeline(r)) }
}
