package reconcile

import (
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// MaxInvocationPayload is the payload limit up to which the event-source mapping fills an
// invocation: "Lambda passes all of the records in the batch to the function in a single call,
// up to the payload limit for synchronous invocation (6 MB)" (Lambda API reference,
// EventSourceMappingConfiguration, BatchSize). Read as 6,000,000 bytes, the smaller reading: a
// record judged undeliverable too early is at worst processed twice, never left behind.
const MaxInvocationPayload = 6_000_000

// recordEnvelope bounds the JSON one Kinesis record takes in the event besides its base64 data
// (eventID, eventSourceARN, a partition key of up to 256 characters, the sequence number, …).
const recordEnvelope = 2048

// MaxDeliverableData is the largest record data one invocation can carry: the event holds it
// base64-encoded (4 bytes per 3) with its envelope. A stream's maximum record size can be raised
// to 10 MiB (Kinesis API reference, UpdateMaxRecordSize: MaxRecordSizeInKiB 1024 to 10240; the
// Kinesis developer guide, "Handle large records"), so a stream can hold records the mapping can
// never hand to the consumer.
const MaxDeliverableData = (MaxInvocationPayload - recordEnvelope) / 4 * 3

// Undeliverable reports whether record data of n bytes is larger than one invocation carries:
// the mapping cannot deliver it, so only the reconciler processes it (or parks it with its
// payload).
func Undeliverable(n int) bool { return n > MaxDeliverableData }

// undeliverable is Undeliverable for a record read from the stream. The scheduled pass replays
// such a record as soon as it reads it, behind the checkpoint or past it, without waiting for
// the settle window or the tail bound: both wait for the mapping, which will never deliver it.
func undeliverable(rec types.Record) bool { return Undeliverable(len(rec.Data)) }
