package esm

import (
	"time"

	"github.com/gapless-dev/gapless/internal/onfailure"
)

// EventType names what happened in the mapping.
type EventType string

// The events a mapping reports to its observer.
const (
	// EventShardStarted: a shard's reader and lanes started (Parents lists its parents).
	EventShardStarted EventType = "shard_started"
	// EventBatchInvoked: a batch is about to be invoked (FirstSeq..LastSeq, Size, Attempt,
	// RequestID).
	EventBatchInvoked EventType = "batch_invoked"
	// EventFunctionError: the invocation failed (Err): an invoker error, a timeout, or a
	// response that counts as a complete failure.
	EventFunctionError EventType = "function_error"
	// EventPartialFailure: the function reported batch item failures; FailedSeq is the lowest
	// failed sequence number, where the lane resumes.
	EventPartialFailure EventType = "partial_failure"
	// EventBisected: a failed batch was split in two (FirstSeq..LastSeq is the batch, Size its
	// length, FailedSeq the first record of the second half).
	EventBisected EventType = "bisected"
	// EventRetriesExhausted: records were given up after MaximumRetryAttempts retries; Failure
	// is the OnFailure message (sent when a queue is configured), consolidated per batch:
	// FirstSeq..LastSeq is its range and Size its batchSize, the records given up.
	EventRetriesExhausted EventType = "retries_exhausted"
	// EventRecordsExpired: records older than MaximumRecordAge were dropped; Failure is the
	// OnFailure message (consolidated per batch like EventRetriesExhausted).
	EventRecordsExpired EventType = "records_expired"
	// EventRecordsTrimmed: records read but not done expired from the stream (its retention
	// period passed) and were dropped without an OnFailure message; Size is their number.
	EventRecordsTrimmed EventType = "records_trimmed"
	// EventDestinationDeliveryFailed: the OnFailure message Failure could not be delivered (Err
	// wraps ErrDestinationDelivery); its records are discarded without a trace in the
	// destination. Lambda counts these in the DestinationDeliveryFailures metric.
	EventDestinationDeliveryFailed EventType = "destination_delivery_failed"
	// EventCheckpoint: a lane's checkpoint moved to Checkpoint (every record of the lane up to it
	// is done: succeeded, expired or given up).
	EventCheckpoint EventType = "checkpoint"
	// EventShardFinished: the shard was read to its end and every lane finished.
	EventShardFinished EventType = "shard_finished"
)

// Event is one observation. Fields that do not apply to a Type are zero.
type Event struct {
	Type    EventType
	Time    time.Time
	ShardID string
	Lane    int

	FirstSeq string // first record of the batch or range
	LastSeq  string // last record of the batch or range
	Size     int    // records in the batch or range
	// Attempt is 0 for the first invocation of a (sub-)batch and n for its n-th retry.
	Attempt   int
	RequestID string

	Err        error
	FailedSeq  string
	Checkpoint string
	Failure    *onfailure.Message
	Parents    []string
}

// Observer receives events synchronously from the mapping's goroutines: it must be safe for
// concurrent use and return quickly.
type Observer func(Event)
