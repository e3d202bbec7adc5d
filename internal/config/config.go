// Package config is the typed configuration of the two functions. Only the mains call Load…
// (with os.Getenv); everything else receives a validated struct. Every error names the variable.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// Environment variable names, shared by the functions, template.yaml and its test.
const (
	EnvGroup             = "GAPLESS_GROUP"
	EnvCheckpointTable   = "CHECKPOINT_TABLE"
	EnvDedupeTable       = "DEDUPE_TABLE"
	EnvParkedQueueURL    = "PARKED_QUEUE_URL"
	EnvTargetQueueURL    = "TARGET_QUEUE_URL"
	EnvPayloadBucket     = "PAYLOAD_BUCKET"
	EnvMaxRecordAttempts = "MAX_RECORD_ATTEMPTS"
	EnvMaxConcurrency    = "MAX_CONCURRENCY"
	EnvDedupeKey         = "DEDUPE_KEY"
	EnvLedgerTTL         = "LEDGER_TTL"
	EnvLogPayloads       = "LOG_PAYLOADS"
	EnvDeadlineMargin    = "DEADLINE_MARGIN"
	EnvStreamName        = "STREAM_NAME"
	EnvStreamARN         = "STREAM_ARN"
	EnvSettleAfter       = "SETTLE_AFTER"
	EnvMaxRecordAge      = "MAXIMUM_RECORD_AGE_SECONDS"
	EnvOnPark            = "ON_PARK"
	// EnvConsumerFunction is the function the mapping invokes (its ARN, or its name), given to
	// the reconciler: a failure-queue message naming another function is refused.
	EnvConsumerFunction = "CONSUMER_FUNCTION_ARN"
	// EnvParallelizationFactor is the mapping's ParallelizationFactor, given to the reconciler:
	// a failure-queue range is replayed only in the lane of the batch the mapping gave up.
	EnvParallelizationFactor = "PARALLELIZATION_FACTOR"
	// EnvFailureBucket names the mapping's S3 on-failure destination (reconciler, optional).
	EnvFailureBucket = "FAILURE_BUCKET"
	// EnvStartingPosition is the mapping's StartingPosition, given to the reconciler: it decides
	// which records of a lineage the mapping never checkpointed are in scope.
	EnvStartingPosition = "STARTING_POSITION"
	// EnvVerifyQueueURL is the reconciler's work queue (optional, an SQS FIFO queue): when set,
	// a scheduled pass hands every shard to its own invocation through it instead of walking
	// the shards itself.
	EnvVerifyQueueURL = "VERIFY_QUEUE_URL"
)

// STARTING_POSITION values (the mapping's StartingPosition; template.yaml allows these two).
const (
	StartingTrimHorizon = "TRIM_HORIZON"
	StartingLatest      = "LATEST"
)

// ON_PARK values: what a parked record means for the later records of its partition key.
const (
	// OnParkContinue (the default): a parked record counts as done and later records of its key
	// go on.
	OnParkContinue = "continue"
	// OnParkHoldKey: once a record is parked its key is held; later records of the key are parked
	// behind it until `gapless redrive` applies them in order (docs/consumer.md, "Holding a key").
	OnParkHoldKey = "hold-key"
)

// Defaults.
const (
	DefaultMaxRecordAttempts = 5
	DefaultMaxConcurrency    = 16
	DefaultLedgerTTL         = 192 * time.Hour // 7-day extended retention + a day of settle margin
	DefaultDeadlineMargin    = 3 * time.Second
	DefaultSettleAfter       = 30 * time.Minute
)

// The event-source mapping's defaults in template.yaml (parameters MaximumRetryAttempts and
// MaximumRecordAgeSeconds): finite, so that no record blocks a shard for long; what the mapping
// gives up on reaches the reconciler through the failure queue. docs/deploy.md explains the
// choice; deploy/template_test.go ties these to the template, and the demo's mapping uses them
// unless its flags say otherwise.
const (
	DefaultMappingRetryAttempts = 10
	DefaultMappingMaxRecordAge  = 6 * time.Hour
)

// MinRecordAgeSeconds and MaxRecordAgeSeconds bound MaximumRecordAgeInSeconds other than -1:
// "Although values less than 60 and greater than -1 fall within the parameter's absolute range,
// they are not allowed" (Lambda API reference, CreateEventSourceMapping,
// https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html).
const (
	MinRecordAgeSeconds = 60
	MaxRecordAgeSeconds = 604800
)

// StreamARNPattern matches a Kinesis data stream ARN of any partition, region and account; the
// submatch is the stream name. template.yaml's StreamArn parameter uses the same pattern.
var StreamARNPattern = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:stream/([a-zA-Z0-9_.-]{1,128})$`)

// FunctionPattern matches a Lambda function name (1-64 letters, digits, '-' and '_') or a
// function ARN, unqualified or with a version or alias (CreateEventSourceMapping's
// FunctionName, https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html).
var FunctionPattern = regexp.MustCompile(`^([a-zA-Z0-9-_]{1,64}|arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:[0-9]{12}:function:[a-zA-Z0-9-_]{1,64}(:(\$LATEST|[a-zA-Z0-9-_]+))?)$`)

// MaxParallelizationFactor is ParallelizationFactor's maximum (CreateEventSourceMapping).
const MaxParallelizationFactor = 10

// ConsumerRequired and ReconcilerRequired list the variables without defaults. The reconciler
// takes STREAM_ARN in place of STREAM_NAME too (see LoadReconciler).
var (
	ConsumerRequired   = []string{EnvGroup, EnvCheckpointTable, EnvDedupeTable, EnvParkedQueueURL, EnvTargetQueueURL, EnvPayloadBucket}
	ReconcilerRequired = append(append([]string(nil), ConsumerRequired...), EnvStreamName)
)

// Common is what both functions need to run the batch pipeline.
type Common struct {
	Group           string
	CheckpointTable string
	DedupeTable     string
	ParkedQueueURL  string
	TargetQueueURL  string
	// PayloadBucket holds payloads too large for an SQS message, claim-check style: parked
	// records (internal/park) and records the default Process forwards (package process).
	PayloadBucket     string
	MaxRecordAttempts int
	MaxConcurrency    int
	DedupeKey         string // JSON field path (dot-separated); empty disables business-key dedupe
	LedgerTTL         time.Duration
	LogPayloads       bool
	// RecordFilter (RECORD_FILTER) is the mapping's FilterCriteria pattern: the consumer never
	// processes a record it drops and the reconciler counts such records as accounted for. nil
	// (unset): no filter. See filter.go.
	RecordFilter *filter.Filter
	OnPark       string // OnParkContinue or OnParkHoldKey (ON_PARK)
}

// Consumer is the consumer function's configuration.
type Consumer struct {
	Common
	// DeadlineMargin: stop starting records when less than this remains before the Lambda deadline.
	DeadlineMargin time.Duration
	// StreamName (STREAM_NAME, optional) is the stream the mapping reads: the consumer rejects
	// records of another stream, naming both, and takes events whose eventSourceARN names no
	// stream (`sam local generate-event` sample events) to come from it.
	StreamName string
	// StreamARN (STREAM_ARN, optional) is the same stream by full ARN: a record whose
	// eventSourceARN names another stream, a same-named one in another account or region
	// included, is refused (consumer.WithStreamARN). Its name part must be STREAM_NAME.
	StreamARN string
}

// Reconciler is the reconciler function's configuration.
type Reconciler struct {
	Common
	// StreamName names the stream in the state keys: STREAM_NAME, or the name part of STREAM_ARN.
	StreamName string
	// StreamARN (STREAM_ARN, optional) names the stream in every Kinesis call: a stream in
	// another account is reachable only by ARN (through its resource-based policy).
	StreamARN string
	// SettleAfter: only records older than this are judged gaps (see MinSettle).
	SettleAfter time.Duration
	// MaxRecordAge is the event-source mapping's MaximumRecordAgeInSeconds
	// (MAXIMUM_RECORD_AGE_SECONDS: -1, the default, or 60-604800; template.yaml sets it from the
	// same parameter as the mapping's); -1 is kept as a negative duration, meaning unlimited.
	// Records past the checkpoint older than this (at most 12h) plus SettleAfter are verified
	// by the scheduled pass (reconcile.TailAfter).
	MaxRecordAge time.Duration
	// StartingPosition is the mapping's StartingPosition (STARTING_POSITION: TRIM_HORIZON, the
	// default, or LATEST; template.yaml sets it from the same parameter as the mapping's). With
	// TRIM_HORIZON every record of a shard the mapping never checkpointed is in scope; with
	// LATEST only those that arrived after the group's scope start (docs/reconciler.md).
	StartingPosition string
	// ConsumerFunction (CONSUMER_FUNCTION_ARN, optional: the function's ARN or name) is the
	// function the mapping invokes: a failure-queue message whose requestContext.functionArn
	// names another function is refused. Unset, the function is not checked.
	ConsumerFunction string
	// ParallelizationFactor (PARALLELIZATION_FACTOR, 1-10, default 1) is the mapping's: a
	// failure-queue range is replayed only in the lane of the batch the mapping gave up.
	ParallelizationFactor int
	// FailureBucket (FAILURE_BUCKET, optional) is the mapping's S3 on-failure destination: the
	// only bucket whose objects the failure queue's S3 event notifications may name.
	FailureBucket string
	// VerifyQueueURL (VERIFY_QUEUE_URL, optional) is the FIFO work queue of the fan-out: the
	// scheduled pass sends one message per shard (message group = shard id, so one walker per
	// shard at a time) and the reconciler, as the queue's consumer, walks the shard a message
	// names. Unset, a scheduled pass walks every shard itself.
	VerifyQueueURL string
}

// LoadConsumer reads and validates the consumer's variables through getenv (os.Getenv in main).
func LoadConsumer(getenv func(string) string, opts ...LoadOption) (Consumer, error) {
	p := newParser(getenv, opts)
	c := Consumer{Common: p.common(), DeadlineMargin: p.duration(EnvDeadlineMargin, DefaultDeadlineMargin),
		StreamName: strings.TrimSpace(getenv(EnvStreamName)), StreamARN: strings.TrimSpace(getenv(EnvStreamARN))}
	switch m := StreamARNPattern.FindStringSubmatch(c.StreamARN); {
	case c.StreamARN == "":
	case m == nil:
		p.fail(EnvStreamARN, c.StreamARN, "is not a Kinesis data stream ARN (arn:aws:kinesis:<region>:<account>:stream/<name>)")
	case c.StreamName != "" && c.StreamName != m[1]:
		p.fail(EnvStreamName, c.StreamName, "names another stream than "+EnvStreamARN+"="+c.StreamARN)
	case c.StreamName == "":
		c.StreamName = m[1]
	}
	p.streamName(c.StreamName)
	return c, p.err()
}

// LoadReconciler reads and validates the reconciler's variables.
func LoadReconciler(getenv func(string) string, opts ...LoadOption) (Reconciler, error) {
	p := newParser(getenv, opts)
	r := Reconciler{
		Common:      p.common(),
		StreamName:  strings.TrimSpace(getenv(EnvStreamName)),
		StreamARN:   strings.TrimSpace(getenv(EnvStreamARN)),
		SettleAfter: p.duration(EnvSettleAfter, DefaultSettleAfter),
	}
	if age := p.intIn(EnvMaxRecordAge, -1, -1, MaxRecordAgeSeconds); age == -1 {
		r.MaxRecordAge = -1
	} else if age < MinRecordAgeSeconds {
		p.fail(EnvMaxRecordAge, p.getenv(EnvMaxRecordAge), fmt.Sprintf("must be -1 (no limit) or %d to %d, like the mapping's MaximumRecordAgeInSeconds", MinRecordAgeSeconds, MaxRecordAgeSeconds))
	} else {
		r.MaxRecordAge = time.Duration(age) * time.Second
	}
	switch r.StartingPosition = strings.TrimSpace(getenv(EnvStartingPosition)); r.StartingPosition {
	case "":
		r.StartingPosition = StartingTrimHorizon
	case StartingTrimHorizon, StartingLatest:
	default:
		p.fail(EnvStartingPosition, r.StartingPosition, "must be "+StartingTrimHorizon+" or "+StartingLatest+", like the mapping's StartingPosition")
	}
	switch m := StreamARNPattern.FindStringSubmatch(r.StreamARN); {
	case r.StreamARN == "" && r.StreamName == "":
		p.errs = append(p.errs, fmt.Errorf("%w: %s is required (or %s)", ErrInvalid, EnvStreamName, EnvStreamARN))
	case r.StreamARN == "":
	case m == nil:
		p.fail(EnvStreamARN, r.StreamARN, "is not a Kinesis data stream ARN (arn:aws:kinesis:<region>:<account>:stream/<name>)")
	case r.StreamName != "" && r.StreamName != m[1]:
		p.fail(EnvStreamName, r.StreamName, "names another stream than "+EnvStreamARN+"="+r.StreamARN)
	default:
		r.StreamName = m[1]
	}
	p.streamName(r.StreamName)
	if r.ConsumerFunction = strings.TrimSpace(getenv(EnvConsumerFunction)); r.ConsumerFunction != "" && !FunctionPattern.MatchString(r.ConsumerFunction) {
		p.fail(EnvConsumerFunction, r.ConsumerFunction, "is not a Lambda function name or ARN (arn:aws:lambda:<region>:<account>:function:<name>)")
	}
	r.ParallelizationFactor = p.intIn(EnvParallelizationFactor, 1, 1, MaxParallelizationFactor)
	if r.FailureBucket = strings.TrimSpace(getenv(EnvFailureBucket)); r.FailureBucket != "" && !validBucket(r.FailureBucket) {
		p.fail(EnvFailureBucket, r.FailureBucket, "is not an S3 bucket name (3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit)")
	}
	if r.VerifyQueueURL = strings.TrimSpace(getenv(EnvVerifyQueueURL)); r.VerifyQueueURL != "" {
		if u, err := url.Parse(r.VerifyQueueURL); err != nil || u.Host == "" || !strings.HasSuffix(u.Path, ".fifo") || strings.Count(strings.Trim(u.Path, "/"), "/") != 1 {
			p.fail(EnvVerifyQueueURL, r.VerifyQueueURL, "is not the URL of an SQS FIFO queue (https://sqs.<region>.amazonaws.com/<account>/<name>.fifo): one walker per shard needs its message groups")
		}
	}
	return r, p.err()
}

func (p *parser) streamName(name string) {
	if name != "" {
		if err := (recordid.Shard{Group: "g", Stream: name, ShardID: "s"}).Validate(); err != nil {
			p.fail(EnvStreamName, name, "is not a stream name")
		}
	}
}

// MinSettle is the shortest safe settle window for a mapping: a record behind the checkpoint may
// still be in flight in another lane (ParallelizationFactor > 1) for as many invocations as it
// can fail before it is parked or the mapping gives up, each lasting up to the function timeout
// plus the batching window. retryAttempts is the mapping's MaximumRetryAttempts (-1 = infinite).
// One extra round and a minute of slack cover the poller's own delays.
func MinSettle(functionTimeout, batchingWindow time.Duration, maxRecordAttempts, retryAttempts int) time.Duration {
	rounds := maxRecordAttempts
	if retryAttempts >= 0 && retryAttempts+1 < rounds {
		rounds = retryAttempts + 1
	}
	return time.Duration(rounds+1)*(functionTimeout+batchingWindow) + time.Minute
}

type parser struct {
	getenv     func(string) string
	errs       []error
	ownProcess bool // OwnProcess: TARGET_QUEUE_URL is optional
}

func (p *parser) fail(name, value, why string) {
	p.errs = append(p.errs, fmt.Errorf("%w: %s=%q %s", ErrInvalid, name, value, why))
}

func (p *parser) err() error { return errors.Join(p.errs...) }

func (p *parser) required(name string) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		p.errs = append(p.errs, fmt.Errorf("%w: %s is required", ErrInvalid, name))
	}
	return v
}

func (p *parser) common() Common {
	c := Common{
		Group:             p.required(EnvGroup),
		CheckpointTable:   p.required(EnvCheckpointTable),
		DedupeTable:       p.required(EnvDedupeTable),
		ParkedQueueURL:    p.required(EnvParkedQueueURL),
		TargetQueueURL:    p.target(),
		PayloadBucket:     p.required(EnvPayloadBucket),
		MaxRecordAttempts: p.intIn(EnvMaxRecordAttempts, DefaultMaxRecordAttempts, MinMaxRecordAttempts, MaxMaxRecordAttempts),
		MaxConcurrency:    p.intIn(EnvMaxConcurrency, DefaultMaxConcurrency, 1, 1024),
		DedupeKey:         strings.TrimSpace(p.getenv(EnvDedupeKey)),
		LedgerTTL:         p.duration(EnvLedgerTTL, DefaultLedgerTTL),
		LogPayloads:       p.boolean(EnvLogPayloads, false),
		RecordFilter:      p.recordFilter(),
		OnPark:            p.oneOf(EnvOnPark, OnParkContinue, OnParkContinue, OnParkHoldKey),
	}
	if c.Group != "" {
		if err := (recordid.Shard{Group: c.Group, Stream: "s", ShardID: "s"}).Validate(); err != nil {
			p.fail(EnvGroup, c.Group, "may hold only letters, digits, '_', '.', ':' and '-' (1-256)")
		}
	}
	if c.PayloadBucket != "" && !validBucket(c.PayloadBucket) {
		p.fail(EnvPayloadBucket, c.PayloadBucket, "is not an S3 bucket name (3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit)")
	}
	if c.DedupeKey != "" && (strings.HasPrefix(c.DedupeKey, ".") || strings.HasSuffix(c.DedupeKey, ".") || strings.Contains(c.DedupeKey, "..")) {
		p.fail(EnvDedupeKey, c.DedupeKey, "must be a dot-separated JSON field path like order.id")
	}
	p.ledgerTTL(c.LedgerTTL)
	return c
}

// validBucket applies the S3 general purpose bucket naming rules (Amazon S3 user guide, "General
// purpose bucket naming rules"): 3-63 characters of lowercase letters, digits, '.' and '-',
// beginning and ending with a letter or digit, no two adjacent periods, not an IP address.
func validBucket(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") || net.ParseIP(name) != nil {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && ((c != '.' && c != '-') || i == 0 || i == len(name)-1) {
			return false
		}
	}
	return true
}

func (p *parser) intIn(name string, def, lo, hi int) int {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, v, fmt.Sprintf("must be an integer from %d to %d", lo, hi))
		return def
	}
	return n
}

func (p *parser) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(name, v, positiveDuration)
		return def
	}
	return d
}

// oneOf reads a variable that must be one of allowed (def when unset).
func (p *parser) oneOf(name, def string, allowed ...string) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	if !slices.Contains(allowed, v) {
		p.fail(name, v, "must be one of "+strings.Join(allowed, ", "))
		return def
	}
	return v
}

func (p *parser) boolean(name string, def bool) bool {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, v, "must be true or false")
		return def
	}
	return b
}
