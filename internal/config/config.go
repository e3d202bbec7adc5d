// Package config is the typed configuration of the two functions. Only the mains call Load…
// (with os.Getenv); everything else receives a validated struct. Every error names the variable.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	EnvMaxRecordAttempts = "MAX_RECORD_ATTEMPTS"
	EnvMaxConcurrency    = "MAX_CONCURRENCY"
	EnvDedupeKey         = "DEDUPE_KEY"
	EnvLedgerTTL         = "LEDGER_TTL"
	EnvLogPayloads       = "LOG_PAYLOADS"
	EnvDeadlineMargin    = "DEADLINE_MARGIN"
	EnvStreamName        = "STREAM_NAME"
	EnvSettleAfter       = "SETTLE_AFTER"
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

// ConsumerRequired and ReconcilerRequired list the variables without defaults.
var (
	ConsumerRequired   = []string{EnvGroup, EnvCheckpointTable, EnvDedupeTable, EnvParkedQueueURL, EnvTargetQueueURL}
	ReconcilerRequired = append(append([]string(nil), ConsumerRequired...), EnvStreamName)
)

// Common is what both functions need to run the batch pipeline.
type Common struct {
	Group             string
	CheckpointTable   string
	DedupeTable       string
	ParkedQueueURL    string
	TargetQueueURL    string
	MaxRecordAttempts int
	MaxConcurrency    int
	DedupeKey         string // JSON field path (dot-separated); empty disables business-key dedupe
	LedgerTTL         time.Duration
	LogPayloads       bool
}

// Consumer is the consumer function's configuration.
type Consumer struct {
	Common
	// DeadlineMargin: stop starting records when less than this remains before the Lambda deadline.
	DeadlineMargin time.Duration
}

// Reconciler is the reconciler function's configuration.
type Reconciler struct {
	Common
	StreamName string
	// SettleAfter: only records older than this are judged gaps (see MinSettle).
	SettleAfter time.Duration
}

// LoadConsumer reads and validates the consumer's variables through getenv (os.Getenv in main).
func LoadConsumer(getenv func(string) string) (Consumer, error) {
	p := parser{getenv: getenv}
	c := Consumer{Common: p.common(), DeadlineMargin: p.duration(EnvDeadlineMargin, DefaultDeadlineMargin)}
	return c, p.err()
}

// LoadReconciler reads and validates the reconciler's variables.
func LoadReconciler(getenv func(string) string) (Reconciler, error) {
	p := parser{getenv: getenv}
	r := Reconciler{
		Common:      p.common(),
		StreamName:  p.required(EnvStreamName),
		SettleAfter: p.duration(EnvSettleAfter, DefaultSettleAfter),
	}
	if r.StreamName != "" {
		if err := (recordid.Shard{Group: "g", Stream: r.StreamName, ShardID: "s"}).Validate(); err != nil {
			p.fail(EnvStreamName, r.StreamName, "is not a stream name")
		}
	}
	return r, p.err()
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
	getenv func(string) string
	errs   []error
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
		TargetQueueURL:    p.required(EnvTargetQueueURL),
		MaxRecordAttempts: p.intIn(EnvMaxRecordAttempts, DefaultMaxRecordAttempts, 1, 1000),
		MaxConcurrency:    p.intIn(EnvMaxConcurrency, DefaultMaxConcurrency, 1, 1024),
		DedupeKey:         strings.TrimSpace(p.getenv(EnvDedupeKey)),
		LedgerTTL:         p.duration(EnvLedgerTTL, DefaultLedgerTTL),
		LogPayloads:       p.boolean(EnvLogPayloads, false),
	}
	if c.Group != "" {
		if err := (recordid.Shard{Group: c.Group, Stream: "s", ShardID: "s"}).Validate(); err != nil {
			p.fail(EnvGroup, c.Group, "may hold only letters, digits, '_', '.', ':' and '-' (1-256)")
		}
	}
	if c.DedupeKey != "" && (strings.HasPrefix(c.DedupeKey, ".") || strings.HasSuffix(c.DedupeKey, ".") || strings.Contains(c.DedupeKey, "..")) {
		p.fail(EnvDedupeKey, c.DedupeKey, "must be a dot-separated JSON field path like order.id")
	}
	if c.LedgerTTL > 0 && c.LedgerTTL < 25*time.Hour {
		p.fail(EnvLedgerTTL, p.getenv(EnvLedgerTTL), "must cover the stream retention (at least 24h) plus the settle window: use 25h or more")
	}
	return c
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
		p.fail(name, v, "must be a positive Go duration like 30m or 192h")
		return def
	}
	return d
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
