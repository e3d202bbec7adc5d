// Package gapless runs your per-record business logic behind a Kinesis Data Streams
// event-source mapping on AWS Lambda without losing a record: the consumer processes each batch
// with partial-failure reporting, keeps a ledger of what was really done and a mirror of the
// checkpoint in DynamoDB, and parks records that keep failing, with their payload, on SQS; the
// reconciler proves, record by record, that nothing behind the checkpoint was skipped, and
// replays through the same Process whatever was. A rare duplicate is accepted; a silent loss is
// not.
//
// # Use
//
// A service is two Lambda functions built from two small mains around one Process:
//
//	// functions/consumer/main.go
//	func main() { gapless.StartConsumer(orders.Process) }
//
//	// functions/reconciler/main.go
//	func main() { gapless.StartReconciler(orders.Process) }
//
// StartConsumer and StartReconciler read the configuration from the environment (below), fail
// the cold start naming any bad variable, and call lambda.Start. NewConsumer and NewReconciler
// return the handlers instead, for tests and for mains that register them themselves.
//
// A nil Process is the default one: every record is forwarded to the SQS queue TARGET_QUEUE_URL
// (records over SQS's 1 MiB go through PAYLOAD_BUCKET in the format of the Amazon SQS Extended
// Client Library), which makes the pair a loss-free Kinesis to SQS bridge. This repository's own
// functions (functions/consumer, functions/reconciler) are exactly that.
//
// # The Process contract
//
//   - It is called once per user record: KPL aggregates arrive de-aggregated, one Record per
//     user record, with its SubSequenceNumber.
//   - Records of one partition key are processed one at a time in sequence order; records of
//     different keys run concurrently (up to MAX_CONCURRENCY), so Process must be safe for
//     concurrent use.
//   - Returning an error fails the record: the batch is reported from it (partial batch
//     response), the record is tried again by a later invocation, and after MAX_RECORD_ATTEMPTS
//     failures it is parked with its payload on PARKED_QUEUE_URL (gapless redrive has the
//     reconciler run it through its Process again, after the fix).
//     A panic counts as an error.
//   - Delivery is at least once. A record can reach Process twice (a function killed between
//     your side effect and the ledger write, a reconciler replay of a record whose ledger write
//     was lost): make the side effect idempotent, keyed by Record.ID, which is the same on
//     every attempt, replay and redrive.
//   - Give the consumer and the reconciler the same Process: gaps are replayed, and parked
//     records redriven, through the reconciler's (gapless redrive and gapless replay invoke the
//     reconciler function with a command; nothing more is needed in its main).
//   - Stop when ctx is done: the pipeline stops starting records shortly before the Lambda
//     deadline (DEADLINE_MARGIN), and a record still running then is retried.
//
// # Configuration
//
// Both functions read these variables (the repository's template.yaml sets them; a bad value
// fails the cold start with an error wrapping ErrInvalidConfig and naming the variable):
//
//	GAPLESS_GROUP               required: the consumer group's name (keys the checkpoints and the ledger)
//	CHECKPOINT_TABLE            required: the checkpoint table
//	DEDUPE_TABLE                required: the ledger table
//	PARKED_QUEUE_URL            required: where records that keep failing are parked
//	PAYLOAD_BUCKET              required: S3 bucket for payloads too large for one SQS message
//	TARGET_QUEUE_URL            required by the default (nil) Process only: where it forwards
//	MAX_RECORD_ATTEMPTS         default 5: failures before a record is parked
//	MAX_CONCURRENCY             default 16: partition keys processed at once
//	DEDUPE_KEY                  default off: JSON field path of a business key processed once
//	LEDGER_TTL                  default 192h: ledger entry lifetime (at least 25h)
//	LOG_PAYLOADS                default false: include payloads in log lines about failures
//	STREAM_NAME                 the stream; reconciler: required unless STREAM_ARN is set
//	STREAM_ARN                  the stream's ARN (a stream in another account); records and failure-queue messages of any other stream ARN are refused
//	DEADLINE_MARGIN             consumer, default 3s: stop starting records this long before the deadline
//	SETTLE_AFTER                reconciler, default 30m: only records older than this are judged gaps
//	MAXIMUM_RECORD_AGE_SECONDS  reconciler, default -1: the mapping's MaximumRecordAgeInSeconds
//	STARTING_POSITION           reconciler, default TRIM_HORIZON: the mapping's StartingPosition (LATEST: records before the group's start are out of scope)
//	CONSUMER_FUNCTION_ARN       reconciler, default any: the mapping's function; failure-queue messages of another are refused
//	PARALLELIZATION_FACTOR      reconciler, default 1: the mapping's ParallelizationFactor; a failure-queue range replays its batch's lane
//	FAILURE_BUCKET              reconciler, optional: the mapping's S3 on-failure destination, the only bucket whose objects the failure queue's notifications may name
//	VERIFY_QUEUE_URL            reconciler, optional: a FIFO queue the function also consumes; a scheduled pass queues each shard's walk there, one invocation per shard
//	RECORD_FILTER               default none: the mapping's FilterCriteria pattern; records it drops are never processed, and not gaps
//	ON_PARK                     default continue: hold-key parks every later record of a parked record's key behind it, in order
//
// The repository's docs/design.md explains each one; docs/deploy.md the template's parameters.
// AWS clients come from the SDK's default configuration (AWS_REGION, the function's role,
// AWS_ENDPOINT_URL_* for a local stack) unless WithAWSConfig gives one.
//
// # Options
//
// WithLogger, WithOutput and WithMetricsWriter say where logs and CloudWatch Embedded Metric
// Format lines go (default: JSON on standard output, which Lambda sends to CloudWatch Logs);
// WithAWSConfig passes your own SDK configuration (credentials, retryer, HTTP client);
// WithProcessWrapper puts middleware around the Process; WithGetenv replaces os.Getenv.
//
// WithBatchProcess gives the business logic in batch form (BatchProcessFunc): waves of at most
// one record per partition key, one outcome per record, for a sink that writes many records in
// one request. The default Process is the SQS bridge in that form (SendMessageBatch, up to 10
// messages a request); WithBatchWrapper puts middleware around a batch form.
//
// # Compatibility
//
// This package is the API of the module github.com/gapless-dev/gapless and follows semantic
// versioning: within a major version its exported names keep their meaning. Everything under
// internal/ is the implementation and may change in any release; so may the operator CLI's
// output. The DynamoDB items and SQS messages gapless writes are versioned by the release notes.
package gapless
