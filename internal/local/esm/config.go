package esm

import (
	"errors"
	"fmt"
	"time"
)

// Starting positions (CreateEventSourceMapping StartingPosition).
const (
	TrimHorizon = "TRIM_HORIZON"
	Latest      = "LATEST"
	AtTimestamp = "AT_TIMESTAMP"
)

// Limits of the Lambda event-source mapping for Kinesis
// (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-parameters.html and
// https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html).
const (
	// MaxPayloadBytes is the synchronous invocation payload limit, 6 MB: "Before invoking the
	// function, Lambda continues to read records from the event source until it has gathered a
	// full batch, the batching window expires, or the batch reaches the payload limit of 6 MB."
	MaxPayloadBytes = 6 * 1024 * 1024
	// MaxBatchSize is BatchSize's maximum for Kinesis (default 100).
	MaxBatchSize = 10000
	// MaxBatchingWindow is MaximumBatchingWindowInSeconds' maximum (default 0).
	MaxBatchingWindow = 300 * time.Second
	// MaxParallelizationFactor is ParallelizationFactor's maximum (default 1).
	MaxParallelizationFactor = 10
	// MaxRetryAttempts is MaximumRetryAttempts' maximum (default -1, infinite).
	MaxRetryAttempts = 10000
	// MaxRecordAge is MaximumRecordAgeInSeconds' maximum (default -1, infinite).
	MaxRecordAge = 604800 * time.Second
	// MinPollInterval keeps one mapping within Kinesis's 5 GetRecords calls per second per
	// shard, a limit shared with every other reader of the shard.
	MinPollInterval = 200 * time.Millisecond
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("esm: invalid config")

// Config is the event-source mapping's configuration, named after the CreateEventSourceMapping
// parameters it emulates.
type Config struct {
	// StreamName is the Kinesis stream to read. Required.
	StreamName string
	// FunctionName names the function in the OnFailure message's functionArn. Required.
	FunctionName string

	// StartingPosition is TRIM_HORIZON, LATEST or AT_TIMESTAMP (with StartingTimestamp).
	StartingPosition  string
	StartingTimestamp time.Time

	// BatchSize is the largest number of records in one invocation (1..10,000; 0 means 100).
	BatchSize int
	// BatchingWindow is MaximumBatchingWindowInSeconds: how long to gather records before
	// invoking unless the batch is full (0..300s).
	BatchingWindow time.Duration
	// ParallelizationFactor is the number of concurrent batches per shard (1..10; 0 means 1).
	ParallelizationFactor int

	// ReportBatchItemFailures is FunctionResponseTypes: [ReportBatchItemFailures].
	ReportBatchItemFailures bool
	// BisectBatchOnFunctionError splits a batch whose invocation failed in two.
	BisectBatchOnFunctionError bool
	// MaximumRetryAttempts is -1 (infinite) or 0..10,000. The zero value means no retries;
	// DefaultConfig has Lambda's default, -1.
	MaximumRetryAttempts int
	// MaximumRecordAge: records older than this are not sent (0 or negative: infinite). Lambda
	// accepts 60s..604,800s; shorter ages are allowed here for tests.
	MaximumRecordAge time.Duration

	// FunctionTimeout is the invoker's deadline; an invocation running past it is a function
	// error (0 means 3s, Lambda's default).
	FunctionTimeout time.Duration
	// MaxPayloadBytes caps an invocation's JSON payload (0 means 6 MB; lower for tests).
	MaxPayloadBytes int

	// OnFailureQueueURL receives the OnFailure messages (empty: none, records are only dropped).
	OnFailureQueueURL string

	// FilterCriteria is FilterCriteria.Filters[].Pattern: records whose data no pattern matches
	// are not sent to the function (see filter.go). Empty: every record is sent.
	FilterCriteria []string

	// PollInterval spaces GetRecords calls on one shard (0 means 1s, Lambda's base rate of one
	// poll per second per shard; at least 200ms).
	PollInterval time.Duration
}

// DefaultConfig returns Lambda's defaults for a Kinesis event-source mapping.
func DefaultConfig() Config {
	return Config{
		StartingPosition:      Latest,
		BatchSize:             100,
		ParallelizationFactor: 1,
		MaximumRetryAttempts:  -1,
		MaximumRecordAge:      -1,
		FunctionTimeout:       3 * time.Second,
		MaxPayloadBytes:       MaxPayloadBytes,
		PollInterval:          time.Second,
	}
}

// withDefaults fills the zero values that have a default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BatchSize == 0 {
		c.BatchSize = d.BatchSize
	}
	if c.ParallelizationFactor == 0 {
		c.ParallelizationFactor = d.ParallelizationFactor
	}
	if c.FunctionTimeout == 0 {
		c.FunctionTimeout = d.FunctionTimeout
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = d.MaxPayloadBytes
	}
	if c.PollInterval == 0 {
		c.PollInterval = d.PollInterval
	}
	if c.MaximumRecordAge < 0 {
		c.MaximumRecordAge = 0
	}
	return c
}

// Validate reports the first setting outside the range Lambda accepts.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.StreamName == "":
		return bad("StreamName is required")
	case c.FunctionName == "":
		return bad("FunctionName is required")
	}
	switch c.StartingPosition {
	case TrimHorizon, Latest:
	case AtTimestamp:
		if c.StartingTimestamp.IsZero() {
			return bad("StartingPosition AT_TIMESTAMP needs StartingTimestamp")
		}
	default:
		return bad("StartingPosition %q is not TRIM_HORIZON, LATEST or AT_TIMESTAMP", c.StartingPosition)
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize %d outside 1..%d", c.BatchSize, MaxBatchSize)
	case c.BatchingWindow < 0 || c.BatchingWindow > MaxBatchingWindow:
		return bad("BatchingWindow %s outside 0..%s", c.BatchingWindow, MaxBatchingWindow)
	case c.ParallelizationFactor < 1 || c.ParallelizationFactor > MaxParallelizationFactor:
		return bad("ParallelizationFactor %d outside 1..%d", c.ParallelizationFactor, MaxParallelizationFactor)
	case c.MaximumRetryAttempts < -1 || c.MaximumRetryAttempts > MaxRetryAttempts:
		return bad("MaximumRetryAttempts %d outside -1..%d", c.MaximumRetryAttempts, MaxRetryAttempts)
	case c.MaximumRecordAge > MaxRecordAge:
		return bad("MaximumRecordAge %s above %s", c.MaximumRecordAge, MaxRecordAge)
	case c.FunctionTimeout <= 0:
		return bad("FunctionTimeout %s must be positive", c.FunctionTimeout)
	case c.MaxPayloadBytes <= 0 || c.MaxPayloadBytes > MaxPayloadBytes:
		return bad("MaxPayloadBytes %d outside 1..%d", c.MaxPayloadBytes, MaxPayloadBytes)
	case c.PollInterval < MinPollInterval:
		return bad("PollInterval %s below %s (5 GetRecords per second per shard)", c.PollInterval, MinPollInterval)
	}
	if _, err := c.filter(); err != nil {
		return err
	}
	return nil
}
