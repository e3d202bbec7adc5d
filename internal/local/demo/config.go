package demo

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/chaos"
)

// Runtimes: how the gapless functions run.
const (
	// RuntimeAuto: RIE when functions/consumer and functions/reconciler exist and apply
	// GAPLESS_CHAOS, in-process otherwise.
	RuntimeAuto = "auto"
	// RuntimeRIE: the real bootstraps, built with go build, one Lambda runtime interface
	// emulator per mapping lane, one for the scheduled reconciler and one for its failure queue.
	RuntimeRIE = "rie"
	// RuntimeInProcess: the same handlers (internal/consumer, internal/reconcile) called in
	// this process.
	RuntimeInProcess = "inprocess"
)

// Backends for the DynamoDB and SQS emulators of a stack the demo starts itself.
const (
	BackendDynalite = "dynalite" // dynalite + fauxqs
	BackendMoto     = "moto"     // moto_server
)

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("demo: invalid configuration")

// Faults are the injected faults; every rate is a probability per attempt or per request,
// except Poison, Crash and Hang, which are per record.
type Faults struct {
	// In the function (internal/local/chaos, GAPLESS_CHAOS), per record attempt.
	Transient float64       `json:"transient"`
	Panic     float64       `json:"panic"`
	Slow      float64       `json:"slow"`     // the call outlasts the function timeout: the invocation times out
	SlowFor   time.Duration `json:"slow_for"` // 0: twice the function timeout
	// Poison is the fraction of produced records marked "poison": true (they never succeed).
	Poison float64 `json:"poison"`
	// Killer records (internal/local/chaos crash and hang), chosen per record by the seed and the
	// record's id, misbehave on every attempt in both variants. Crash: the runtime process exits
	// mid-record (under the emulator the bootstrap dies; in process the invocation is abandoned
	// and nothing after it is recorded). Hang: the call blocks, ignoring its context, for
	// HangFor (0: twice the function timeout), so every invocation holding it times out.
	Crash   float64       `json:"crash"`
	Hang    float64       `json:"hang"`
	HangFor time.Duration `json:"hang_for"`

	// At the fault-injecting proxies in front of DynamoDB and SQS, per HTTP request.
	DDBThrottle float64 `json:"ddb_throttle"`
	DDBError    float64 `json:"ddb_error"`
	DDBDrop     float64 `json:"ddb_drop"` // writes forwarded, response dropped
	SQSThrottle float64 `json:"sqs_throttle"`
	SQSError    float64 `json:"sqs_error"`
	SQSDrop     float64 `json:"sqs_drop"` // sends forwarded, response dropped

	// DestFail: the mapping's OnFailure delivery fails (per message), as it can on AWS
	// (DestinationDeliveryFailures): the given-up range never reaches the failure queue and only
	// the scheduled reconciler pass can find it (esm.WithDestinationFault).
	DestFail float64 `json:"dest_fail"`

	Split          bool `json:"split"`           // split a shard when half the records are produced
	KillReconciler bool `json:"kill_reconciler"` // kill the reconciler in the middle of its first replay
	Race           bool `json:"race"`            // a second mapping, same function config and group, racing on one shard
	// ForgeParked sends this many forged parked messages to the parked queue at the end of the
	// gapless run (see forge.go) and redrives them through the reconciler function's redrive
	// command: every one must be refused, counted and left in the queue, none applied.
	ForgeParked int `json:"forge_parked"`
	// Expire gives the stream a short retention (internal/local/retention in front of kinesis-local,
	// Config.Retention) and caps the mapping's MaximumRecordAge at half of it; one shard's
	// invocations are throttled until its records of the first 3 seconds have exceeded that
	// age, so the mapping gives them up to the on-failure destination (RecordAgeExceeded); the
	// reconciler is down until the stream has trimmed them. With the SQS destination (metadata
	// only) they are lost to retention; with the S3 destination the reconciler replays them from
	// the objects. See expire.go. Not in DefaultFaults: it loses records by design.
	Expire bool `json:"expire"`
}

// DefaultFaults has every fault on.
func DefaultFaults() Faults {
	return Faults{
		Transient: 0.03, Panic: 0.005, Slow: 0.002, Poison: 0.002, Crash: 0.001, Hang: 0.001,
		DDBThrottle: 0.02, DDBError: 0.01, DDBDrop: 0.01,
		SQSThrottle: 0.02, SQSError: 0.01, SQSDrop: 0.01, DestFail: 0.5,
		Split: true, KillReconciler: true, Race: true, ForgeParked: 5,
	}
}

// Config is one demo run.
type Config struct {
	Records         int    // records to produce (soak: 0 means Rate × Duration)
	Shards          int    // initial shards
	Parallelization int    // ParallelizationFactor
	Seed            uint64 // workload, faults and proxies
	Keys            int    // distinct partition keys
	// Rate caps production in records per second (0: as fast as PutRecords goes).
	Rate int
	// Duration > 0 is a soak: production is spread over Duration at Rate.
	Duration time.Duration

	// The event-source mapping (the same for every variant).
	BatchSize       int
	BatchingWindow  time.Duration
	FunctionTimeout time.Duration // whole seconds (the emulator counts seconds)
	// RetryAttempts and MaxRecordAge default to template.yaml's (config.DefaultMapping*).
	RetryAttempts int           // MaximumRetryAttempts: -1 infinite
	MaxRecordAge  time.Duration // MaximumRecordAgeInSeconds; 0 off
	Bisect        bool          // BisectBatchOnFunctionError
	// OnFailure is the mapping's on-failure destination: OnFailureSQS (the metadata, to the
	// failure queue; "" is the same) or OnFailureS3 (the records and metadata as an object in
	// a bucket whose notification goes to the failure queue; template.yaml's
	// OnFailureDestination S3).
	OnFailure string

	// gapless.
	MaxRecordAttempts int           // MAX_RECORD_ATTEMPTS
	SettleAfter       time.Duration // SETTLE_AFTER of the reconciler
	ReconcileEvery    time.Duration // the reconciler's schedule

	Faults Faults

	// Baseline runs the comparison variants (mapping alone, checkpoint decides) before gapless
	// when Variants is empty.
	Baseline bool
	// Variants are the variants to run (VariantBaseline, VariantCheckpointDecides,
	// VariantGapless; ParseVariants reads them), run in that order; empty: all three, or gapless
	// alone when Baseline is false.
	Variants []string
	Runtime  string
	// Retention is the stream's retention period under Faults.Expire (0: 30s); MaxRecordAge is
	// capped at half of it. The stream trims for Retention plus 10s from the start of production
	// (its records of the first 10 s), then its horizon stops (see expire.go).
	Retention time.Duration
	// Timeout bounds each variant's run (0: 10 minutes, plus Duration): every variant has its own.
	Timeout time.Duration
	// ReportsDir receives demo-<timestamp>/ (default <repo>/reports).
	ReportsDir string
	// Backend of a stack the demo starts itself.
	Backend string
	// FullReport keeps everything in the report directory: the SDK log, the emulators' logs,
	// the chaos state and every process's memory row in report.md. Without it the report keeps
	// what a reader needs (report.md, result.json, charts, timelines, function logs).
	FullReport bool
	// Filter is the record filter (template.yaml's RecordFilter): one Lambda FilterCriteria
	// pattern on the record's data, put on every mapping and given to the gapless functions as
	// RECORD_FILTER. Empty: none. See filter.go.
	Filter string
}

// On-failure destinations of the demo's mapping (Config.OnFailure).
const (
	OnFailureSQS = "sqs"
	OnFailureS3  = "s3"
)

// DefaultConfig is `make demo`: the seed's load test (4,500 records) over 4 shards with
// ParallelizationFactor 4 and every fault on.
func DefaultConfig() Config {
	return Config{
		Records: 4500, Shards: 4, Parallelization: 4, Seed: 1, Keys: 200, Rate: 500,
		BatchSize: 100, BatchingWindow: time.Second, FunctionTimeout: 6 * time.Second,
		RetryAttempts: config.DefaultMappingRetryAttempts, MaxRecordAge: config.DefaultMappingMaxRecordAge, Bisect: true,
		MaxRecordAttempts: 5, SettleAfter: 5 * time.Second, ReconcileEvery: 3 * time.Second,
		Faults: DefaultFaults(), Baseline: true, Runtime: RuntimeAuto, Backend: BackendDynalite,
	}
}

// DefaultSoakRate is the production rate of a soak when Rate is 0.
const DefaultSoakRate = 20

func (c Config) withDefaults() Config {
	if c.Duration > 0 {
		if c.Rate <= 0 {
			c.Rate = DefaultSoakRate
		}
		if c.Records <= 0 {
			c.Records = int(c.Duration.Seconds() * float64(c.Rate))
		} else {
			// Records over Duration: the rate follows.
			c.Rate = max(1, int(float64(c.Records)/c.Duration.Seconds()))
		}
	}
	if c.Keys <= 0 {
		c.Keys = 200
	}
	if c.Retention <= 0 {
		c.Retention = 30 * time.Second
	}
	if c.Faults.Expire && (c.MaxRecordAge <= 0 || c.MaxRecordAge > c.Retention/2) {
		// The throttled shard's records must exceed the mapping's age before the stream trims
		// them (expire.go): with an age at or past the retention the trim always wins, the
		// mapping discards them silently and no destination ever sees them.
		c.MaxRecordAge = c.Retention / 2
	}
	if c.Faults.SlowFor <= 0 {
		c.Faults.SlowFor = 2 * c.FunctionTimeout
	}
	if c.Faults.HangFor <= 0 {
		c.Faults.HangFor = 2 * c.FunctionTimeout
	}
	if c.Timeout <= 0 {
		c.Timeout = 10*time.Minute + c.Duration
	}
	if c.Runtime == "" {
		c.Runtime = RuntimeAuto
	}
	if c.Backend == "" {
		c.Backend = BackendDynalite
	}
	if len(c.Variants) == 0 {
		c.Variants = []string{VariantGapless}
		if c.Baseline {
			c.Variants = AllVariants()
		}
	}
	return c
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...)) }
	rate := func(name string, r float64) error {
		if r < 0 || r > 1 {
			return bad("%s %g is not a probability from 0 to 1", name, r)
		}
		return nil
	}
	f := c.Faults
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"transient", f.Transient}, {"panic", f.Panic}, {"slow", f.Slow}, {"poison", f.Poison},
		{"crash", f.Crash}, {"hang", f.Hang},
		{"ddb-throttle", f.DDBThrottle}, {"ddb-error", f.DDBError}, {"ddb-drop", f.DDBDrop},
		{"sqs-throttle", f.SQSThrottle}, {"sqs-error", f.SQSError}, {"sqs-drop", f.SQSDrop},
		{"dest-fail", f.DestFail},
	} {
		if err := rate(r.name, r.v); err != nil {
			return err
		}
	}
	switch {
	case c.OnFailure != "" && c.OnFailure != OnFailureSQS && c.OnFailure != OnFailureS3:
		return bad("on-failure %q: %s or %s", c.OnFailure, OnFailureSQS, OnFailureS3)
	case c.Records < 1:
		return bad("records %d: at least 1", c.Records)
	case c.Shards < 1 || c.Shards > 64:
		return bad("shards %d outside 1..64", c.Shards)
	case c.Parallelization < 1 || c.Parallelization > 10:
		return bad("parallelization %d outside 1..10", c.Parallelization)
	case c.Rate < 0:
		return bad("rate %d is negative", c.Rate)
	case c.Duration < 0:
		return bad("duration %s is negative", c.Duration)
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return bad("batch size %d outside 1..10000", c.BatchSize)
	case c.FunctionTimeout < time.Second || c.FunctionTimeout%time.Second != 0:
		return bad("function timeout %s: whole seconds, at least 1s", c.FunctionTimeout)
	case c.RetryAttempts < -1 || c.RetryAttempts > 10000:
		return bad("retry attempts %d outside -1..10000", c.RetryAttempts)
	case c.RetryAttempts == -1 && c.runs(VariantBaseline, VariantCheckpointDecides) && f.Poison+f.Crash+f.Hang > 0 && c.MaxRecordAge <= 0:
		return bad("retry attempts -1 without a record age: a poison or killer record would block the mapping-alone run forever")
	case c.MaxRecordAttempts < 1 || c.MaxRecordAttempts > 1000:
		return bad("max record attempts %d outside 1..1000", c.MaxRecordAttempts)
	case c.SettleAfter < 0:
		return bad("settle %s is negative", c.SettleAfter)
	case c.ReconcileEvery <= 0:
		return bad("reconcile schedule %s must be positive", c.ReconcileEvery)
	case f.Transient+f.Panic+f.Slow > 1:
		return bad("transient+panic+slow exceeds 1")
	case f.ForgeParked < 0 || f.ForgeParked > 100:
		return bad("forge-parked %d outside 0..100", f.ForgeParked)
	case f.Crash+f.Hang > 1:
		return bad("crash+hang exceeds 1")
	case f.Expire && c.Retention < 10*time.Second:
		// The throttled shard's records must exceed MaximumRecordAge (half the retention) well
		// before the stream trims them (expire.go).
		return bad("retention %s under --expire: at least 10s", c.Retention)
	}
	if _, err := c.recordFilter(); err != nil {
		return err
	}
	if _, err := ParseVariants(strings.Join(c.Variants, ",")); err != nil {
		return err
	}
	switch c.Runtime {
	case RuntimeAuto, RuntimeRIE, RuntimeInProcess:
	default:
		return bad("runtime %q: want auto, rie or inprocess", c.Runtime)
	}
	switch c.Backend {
	case BackendDynalite, BackendMoto:
	default:
		return bad("backend %q: want dynalite or moto", c.Backend)
	}
	return nil
}

// chaosConfig is the GAPLESS_CHAOS of a run.
func (c Config) chaosConfig(stateDir string) chaos.Config {
	return chaos.Config{
		Seed: c.Seed, Transient: c.Faults.Transient, Panic: c.Faults.Panic, Slow: c.Faults.Slow,
		SlowFor: c.Faults.SlowFor, Poison: true, StateDir: stateDir,
		Crash: c.Faults.Crash, Hang: c.Faults.Hang, HangFor: c.Faults.HangFor,
	}
}
