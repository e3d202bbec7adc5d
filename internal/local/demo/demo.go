// Package demo runs the field report's load test against the local stack and goes past it: the
// same seeded workload (4,500 uniquely identified records by default) over several shards with
// ParallelizationFactor > 1 and every fault on, once through the event-source mapping alone and
// once through gapless, and prints the two side by side (`make demo`, `gapless demo`).
//
// One run:
//
//  1. starts the local stack on 127.0.0.1 (installing the emulators when missing) unless
//     Options.Endpoints names one, and picks the function runtime (Config.Runtime);
//  2. per variant, creates a stream, the checkpoint and ledger tables and the target, parked
//     and failure queues, and puts fault-injecting proxies (internal/local/faultproxy) in front of
//     DynamoDB and SQS: the functions' endpoints are the proxies, everything else (the
//     mapping, the producer, the demo's own bookkeeping) talks to the emulators directly;
//  3. runs the local event-source mapping (internal/local/esm) — and, with the race fault, a second
//     one with the same configuration and group — invoking the consumer: the mapping-alone
//     handler (internal/local/baseline) or gapless's (internal/consumer), with in-function faults
//     from internal/local/chaos; for gapless the reconciler runs every Config.ReconcileEvery and on
//     the mapping's failure queue;
//  4. produces the workload (internal/local/loadgen), splitting a shard half way, while draining the
//     target and parked queues;
//  5. waits until the mappings are drained and, for gapless, the reconciler has verified every
//     shard and the failure queue is empty (bounded by Config.Timeout), then counts what
//     arrived: a record is delivered (its id reached the target queue), parked (its exact
//     payload is in the parked queue) or lost.
//
// Everything started is stopped when Run returns, including on context cancellation (Ctrl-C).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// Options are the parts of a run that are not the experiment.
type Options struct {
	// AWS is the SDK configuration (region, credentials for the emulators); endpoints are set
	// per client by the demo.
	AWS aws.Config
	// Endpoints of a running local stack; empty: the demo starts its own.
	Endpoints Endpoints
	// Progress receives the progress display (stderr); nil discards it.
	Progress io.Writer
	// Root is the repository root (template.yaml, functions/, reports/); empty: found from
	// the working directory.
	Root string
}

// Result is the outcome of a run. The top-level figures are gapless's; LostESMOnly and
// LostCheckpointDecides are the comparison variants' losses on the same workload (nil when the
// variant did not run).
type Result struct {
	Produced        int  `json:"produced"`
	DeliveredUnique int  `json:"delivered_unique"`
	Duplicates      int  `json:"duplicates"`
	Parked          int  `json:"parked"`
	Lost            int  `json:"lost"`
	LostESMOnly     *int `json:"lost_esm_only"`
	// MappingAloneLossInGapless says what gapless did with each record the mapping alone lost
	// (same ids: both variants produce the same records); nil unless both ran.
	MappingAloneLossInGapless *LossFates `json:"mapping_alone_loss_in_gapless,omitempty"`
	LostCheckpointDecides     *int       `json:"lost_checkpoint_decides"`
	// LostToRetention: records trimmed from the stream (--expire) before they were delivered
	// or parked; not in Lost. Exact: the retention proxy knows every record it trimmed.
	LostToRetention int `json:"lost_to_retention"`
	// ReplayedAfterTrim: gapless's records trimmed from the stream (--expire) that the
	// reconciler replayed from the mapping's S3 on-failure objects after the trim.
	ReplayedAfterTrim int `json:"replayed_after_trim"`
	// Variants are the variants that ran, in order.
	Variants []string `json:"variants"`
	// GapsDetected and GapsReplayed are gapless's reconciler metrics summed over every pass
	// (see VariantResult): detections, not records. ReconcilerReplayed and ReconcilerParked
	// count distinct records.
	GapsDetected       int `json:"gaps_detected"`
	GapsReplayed       int `json:"gaps_replayed"`
	ReconcilerReplayed int `json:"reconciler_replayed_records"`
	ReconcilerParked   int `json:"reconciler_parked_records"`
	// Filtered and FilteredProcessed are gapless's (see VariantResult); 0 without --filter.
	Filtered            int     `json:"filtered"`
	FilteredProcessed   int     `json:"filtered_processed"`
	DDBRequestsPerBatch float64 `json:"ddb_requests_per_batch"`
	DDBWCUPerRecord     float64 `json:"ddb_wcu_per_record"`
	Seconds             float64 `json:"seconds"`
	// Verified: the reconciler verified every shard before the run ended, and no record is
	// pending past the checkpoint.
	Verified bool `json:"verified"`
	// Pending and Incomplete are gapless's (see VariantResult): a run cut before every record
	// was accounted for is INCOMPLETE, never "lost".
	Pending    int    `json:"pending"`
	Incomplete bool   `json:"incomplete"`
	Runtime    string `json:"runtime"`
	Seed       uint64 `json:"seed"`
	ReportDir  string `json:"report_dir"`
	// FullReport: the report directory keeps everything (see Config.FullReport).
	FullReport bool `json:"full_report"`

	// ForgedParked is the forged-parked fault's outcome (nil when it did not run).
	ForgedParked *ForgedParked `json:"forged_parked,omitempty"`

	Gapless           *VariantResult `json:"gapless"`
	Baseline          *VariantResult `json:"mapping_alone,omitempty"`
	CheckpointDecides *VariantResult `json:"checkpoint_decides,omitempty"`
	Settings          Settings       `json:"settings"`
}

// OK reports whether gapless lost nothing and proved it: no record lost, every parked message
// carrying the produced payload, and every shard verified before the deadline. A run without
// the gapless variant has nothing to prove and is OK.
func (r *Result) OK() bool {
	if r.Gapless == nil {
		return !slices.Contains(r.Variants, VariantGapless)
	}
	return r.Lost == 0 && r.Verified && r.Gapless.ParkedBadPayload == 0 && r.Gapless.FilteredProcessed == 0 &&
		r.ForgedParked.OK() && // no forged parked message applied, each refused, counted and left
		// a record lost to retention must have raised gapless's alarm (a counted span)
		(r.Gapless.LostToRetention == 0 || r.Gapless.Reconciler.LostToRetention > 0)
}

// variant returns the result of the named variant (nil when it did not run).
func (r *Result) variant(name string) *VariantResult {
	switch name {
	case VariantBaseline:
		return r.Baseline
	case VariantCheckpointDecides:
		return r.CheckpointDecides
	case VariantGapless:
		return r.Gapless
	}
	return nil
}

// ran are the results of the variants that ran, in run order.
func (r *Result) ran() []*VariantResult {
	var out []*VariantResult
	for _, name := range AllVariants() {
		if v := r.variant(name); v != nil {
			out = append(out, v)
		}
	}
	return out
}

// VariantResult is one variant's figures.
type VariantResult struct {
	Name           string `json:"name"`
	Produced       int    `json:"produced"`
	PoisonProduced int    `json:"poison_produced"`
	// Killers: records that crash the runtime or hang on every attempt, and their fate.
	Killers         KillerStats `json:"killers"`
	DeliveredUnique int         `json:"delivered_unique"`
	Duplicates      int         `json:"duplicates"`
	// Parked counts records accounted for by parking alone: not delivered, and their exact
	// payload is in the parked queue. Lost = Produced - DeliveredUnique - Parked.
	Parked             int `json:"parked"`
	ParkedAndDelivered int `json:"parked_and_delivered"`
	// ParkedMessages counts the messages drained from the variant's parked queue: not
	// records. A record parked twice (the consumer and a reconciler replay each parked it) is
	// two messages and one record in Parked; a parked record also delivered (parked, then
	// redriven) is in ParkedAndDelivered, not Parked; a message without its record's exact
	// payload is in ParkedBadPayload and counts nothing.
	ParkedMessages   int `json:"parked_messages"`
	ParkedBadPayload int `json:"parked_bad_payload"`
	// ParkedIDs are the ids of the records counted in Parked.
	ParkedIDs []string `json:"parked_ids,omitempty"`
	// ForgedParked (gapless): the forged-parked fault's outcome; nil when it did not run.
	ForgedParked *ForgedParked `json:"forged_parked,omitempty"`
	Lost         int           `json:"lost"`
	LostIDs      []string      `json:"lost_ids,omitempty"`
	// Pending (gapless): records neither delivered nor parked that are not known lost: the
	// run was cut short (its budget ended, or not every shard was verified), or they lie past
	// the checkpoint mirror, where the reconciler has not verified yet. PendingWhere counts
	// them by place (held by the mapping, with the reconciler, past the checkpoint, behind it
	// unverified); PendingRecords names the first 50. Incomplete: Pending > 0.
	Pending        int             `json:"pending"`
	PendingWhere   map[string]int  `json:"pending_where,omitempty"`
	PendingRecords []PendingRecord `json:"pending_records,omitempty"`
	Incomplete     bool            `json:"incomplete"`
	// Safety is the time from production to delivery or parking, per record.
	Safety SafetyStats `json:"time_to_safety"`
	// LostToRetention counts the records (not in Lost) that expired from the stream before
	// they were delivered or parked (--expire), named in LostToRetentionIDs.
	LostToRetention    int      `json:"lost_to_retention"`
	LostToRetentionIDs []string `json:"lost_to_retention_ids,omitempty"`
	// ReplayedAfterTrim counts the records the stream trimmed (--expire) that first reached the
	// target queue after the trim, sent by the reconciler: replayed from the mapping's S3
	// on-failure objects, the only copy left (part of DeliveredUnique).
	ReplayedAfterTrim int `json:"replayed_after_trim"`
	// Trimmed counts the produced records the stream trimmed (--expire), whatever became of them.
	Trimmed int `json:"trimmed"`
	// HeldShard is the shard whose consumer --expire held back past the retention period.
	HeldShard string `json:"held_shard,omitempty"`
	// LostRecords says where the first lost records were in the stream.
	LostRecords []LostRecord `json:"lost_records,omitempty"`
	Unexpected  int          `json:"unexpected"`
	// DuplicatesByCause attributes every duplicate delivery (see duplicateCauses); the values
	// sum to Duplicates.
	DuplicatesByCause map[string]int `json:"duplicates_by_cause,omitempty"`
	// DrainReceiveErrors counts receives of the demo's own drains that failed (their messages
	// stayed in flight and were drained once visible again).
	DrainReceiveErrors int `json:"drain_receive_errors"`
	// LateDrained counts messages that were in flight when a queue first looked empty at the
	// end, and were drained once visible again.
	LateDrained int `json:"late_drained"`
	// GapsDetected and GapsReplayed are the reconciler's GapsDetected and GapsReplayed metrics
	// summed over every pass (the checkpoint table's counters): a record a pass finds missing
	// from the ledger counts once per pass that finds it, so a record that keeps failing (a
	// killer, the records behind it) counts again on every pass until it is parked. They count
	// detections and replays, not records; ReconcilerReplayed and ReconcilerParked do.
	GapsDetected int `json:"gaps_detected"`
	GapsReplayed int `json:"gaps_replayed"`
	// ReconcilerReplayed: distinct records the reconciler delivered to the target queue (its
	// SQS tap's journal); ReconcilerParked: distinct records the reconciler parked (parked
	// messages whose source is the reconciler, payload verified). Gapless only.
	ReconcilerReplayed int `json:"reconciler_replayed_records"`
	ReconcilerParked   int `json:"reconciler_parked_records"`
	// Filtered: produced records --filter drops (not expected downstream, not in Lost);
	// FilteredProcessed: of those, delivered or parked all the same (must be 0).
	Filtered          int     `json:"filtered"`
	FilteredProcessed int     `json:"filtered_processed"`
	Verified          bool    `json:"verified"`
	TimedOut          bool    `json:"timed_out"`
	Seconds           float64 `json:"seconds"`

	// Handler counts the checkpoint-decides handler's decisions (that variant only).
	Handler *HandlerStats `json:"handler,omitempty"`

	Mapping    MappingStats    `json:"mapping"`
	Reconciler ReconcilerStats `json:"reconciler"`
	DDB        DDBStats        `json:"dynamodb"`
	Faults     FaultStats      `json:"faults"`
	Processes  []ProcessRSS    `json:"processes"`
	Timeline   []Sample        `json:"-"`
}

// PendingRecord is a record not accounted for yet at the end of a run, and where it is.
type PendingRecord struct {
	ID      string `json:"id"`
	ShardID string `json:"shard_id"`
	Seq     string `json:"sequence_number"`
	Where   string `json:"where"`
}

// LostRecord is a produced record that was neither delivered nor parked.
type LostRecord struct {
	ID           string `json:"id"`
	PartitionKey string `json:"partition_key"`
	ShardID      string `json:"shard_id"`
	Seq          string `json:"sequence_number"`
	// What gapless's ledger says about it (gapless only): done (processed or parked), parked,
	// failed attempts; LedgerError when the lookup failed.
	LedgerDone     bool   `json:"ledger_done"`
	LedgerParked   bool   `json:"ledger_parked"`
	LedgerAttempts int    `json:"ledger_attempts"`
	LedgerError    string `json:"ledger_error,omitempty"`
}

// HandlerStats are what the checkpoint-decides handler (internal/local/baseline) reports deciding.
type HandlerStats struct {
	Received  int `json:"records_received"`
	Processed int `json:"processed"`
	Failed    int `json:"failed"`
	// Filtered: records dropped as at or below the stored checkpoint ("processed by the other
	// consumer"); RacesLost: batches whose compare-and-replace lost; Abandoned: failed records
	// those batches left unretried.
	Filtered  int `json:"filtered_at_or_below_checkpoint"`
	RacesLost int `json:"replaces_lost"`
	Abandoned int `json:"failed_records_abandoned"`
}

// MappingStats counts the event-source mappings' events.
type MappingStats struct {
	Mappings          int    `json:"mappings"`
	Invocations       int    `json:"invocations"`
	FunctionErrors    int    `json:"function_errors"`
	Timeouts          int    `json:"timeouts"`
	PartialFailures   int    `json:"partial_failures"`
	Bisections        int    `json:"bisections"`
	RetriesExhausted  int    `json:"retries_exhausted"`
	RecordAgeExceeded int    `json:"record_age_exceeded"`
	RecordsGivenUp    int    `json:"records_given_up"`
	SplitShard        string `json:"split_shard,omitempty"`

	// DestinationDeliveryFailures: on-failure messages the mapping could not deliver (--dest-fail).
	DestinationDeliveryFailures int `json:"destination_delivery_failures"`
}

// ReconcilerStats counts the reconciler's invocations (gapless).
type ReconcilerStats struct {
	ScheduledRuns      int `json:"scheduled_runs"`
	ScheduledErrors    int `json:"scheduled_errors"`
	FailureInvocations int `json:"failure_queue_invocations"`
	FailureMessages    int `json:"failure_queue_messages"`
	FailureDeleted     int `json:"failure_queue_deleted"`
	FailureRetried     int `json:"failure_queue_retried"`
	Crashes            int `json:"crashes"`
	LostToRetention    int `json:"lost_to_retention"` // spans counted (the alarm's metric)
	CheckpointWrites   int `json:"checkpoint_writes"`
	// TailReplayed: records past the checkpoint mirror the scheduled passes replayed (a tail the
	// mapping gave up with nothing after it; reconcile.TailAfter).
	TailReplayed int `json:"tail_replayed"`
}

// DDBStats are the DynamoDB requests by operation as the fault proxies counted them (faulted
// requests included) and the capacity the meters computed from the requests that reached
// DynamoDB.
type DDBStats struct {
	Requests           map[string]int    `json:"requests"`
	ReconcilerRequests map[string]int    `json:"reconciler_requests"`
	RequestsPerBatch   float64           `json:"requests_per_batch"`
	WCUPerRecord       float64           `json:"wcu_per_record"`
	Meter              ddbmeter.Snapshot `json:"meter"`
	ReconcilerMeter    ddbmeter.Snapshot `json:"reconciler_meter"`
}

// FaultStats are the faults injected.
type FaultStats struct {
	Chaos           chaos.Stats `json:"in_function"`
	DynamoDB        ProxyFaults `json:"dynamodb"`
	SQS             ProxyFaults `json:"sqs"`
	ReconcilerKills int         `json:"reconciler_kills"`
	KillNote        string      `json:"kill_note,omitempty"`
}

// ProxyFaults sums a service's fault proxies.
type ProxyFaults struct {
	Requests     int `json:"requests"`
	Throttled    int `json:"throttled"`
	ServerErrors int `json:"server_errors"`
	DroppedAfter int `json:"dropped_after_forward"`
	// Operations counts the requests by operation (SendMessageBatch: the batched default bridge).
	Operations map[string]int `json:"requests_by_operation,omitempty"`
}

// Settings echoes the configuration in the report.
type Settings struct {
	Records         int    `json:"records"`
	Shards          int    `json:"shards"`
	Parallelization int    `json:"parallelization"`
	Keys            int    `json:"keys"`
	Rate            int    `json:"rate"`
	Duration        string `json:"duration"`
	FunctionTimeout string `json:"function_timeout"`
	SettleAfter     string `json:"settle_after"`
	Reconcile       string `json:"reconcile_every"`
	BatchSize       int    `json:"batch_size"`
	RetryAttempts   int    `json:"retry_attempts"`
	MaxRecordAge    string `json:"max_record_age"` // MaximumRecordAgeInSeconds; 0s: off
	// OnFailure is the mapping's on-failure destination (sqs or s3).
	OnFailure string `json:"on_failure"`
	// Retention is the stream's retention under --expire ("" without it).
	Retention         string `json:"retention,omitempty"`
	MaxRecordAttempts int    `json:"max_record_attempts"`
	Bisect            bool   `json:"bisect"`
	Faults            Faults `json:"faults"`
	// Filter is --filter (the record filter); empty: none.
	Filter  string `json:"filter,omitempty"`
	Chaos   string `json:"gapless_chaos"`
	Backend string `json:"backend"`
}

// env is what both variants of a run share.
type env struct {
	cfg      Config
	awsCfg   aws.Config
	ep       Endpoints
	direct   clients
	root     string
	dir      string
	runID    string
	progress *progress
	template esm.Config
	runtime  string
	boot     bootstraps
}

// Run runs the demo. The error is non-nil when the run could not be carried out (stack, setup,
// production); a run that completes returns its Result, and Result.OK says whether gapless lost
// anything. The report directory is written in both cases when it could be created.
func Run(ctx context.Context, cfg Config, opts Options) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	root := opts.Root
	if root == "" {
		var err error
		if root, err = localstack.FindRoot(); err != nil {
			return nil, err
		}
	}
	if cfg.ReportsDir == "" {
		cfg.ReportsDir = filepath.Join(root, "reports")
	}
	started := time.Now()
	// The run's resources (stream, tables, queues) and its report directory are named after
	// it: two runs started in the same second on one stack (tests of two packages at once)
	// must not share a stream, or the first to finish deletes the other's.
	runID := started.Format("20060102-150405") + "-" + randHex(2)
	dir := filepath.Join(cfg.ReportsDir, "demo-"+runID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: report directory: %w", err)
	}
	// Runs last (after the stack stopped): a finished run without --full-report keeps only
	// what a reader needs.
	prune := false
	defer func() {
		if prune {
			pruneReport(dir)
		}
	}()
	pw := opts.Progress
	if pw == nil {
		pw = io.Discard
	}
	prog := newProgress(pw)
	defer prog.stop()

	e := &env{cfg: cfg, awsCfg: opts.AWS, ep: opts.Endpoints, root: root, dir: dir, runID: runID, progress: prog}
	if e.awsCfg.Region == "" {
		e.awsCfg.Region = "us-east-1"
	}
	if e.awsCfg.Credentials == nil {
		// The emulators take any credentials: fixed ones, so nothing looks for real ones.
		e.awsCfg.Credentials = credentials.NewStaticCredentialsProvider("local", "local", "")
	}
	sdkLog, err := os.Create(filepath.Join(dir, "sdk.log"))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer sdkLog.Close()
	e.awsCfg = withSDKLog(e.awsCfg, slog.New(slog.NewJSONHandler(sdkLog, nil)))
	if !e.ep.complete() {
		prog.phase("stack", "starting the local stack (installing the emulators if needed)")
		ep, procs, err := startStack(ctx, root, filepath.Join(dir, "stack"), cfg.Backend)
		if err != nil {
			return nil, err
		}
		defer localstack.Stop(procs)
		e.ep = ep
	}
	e.direct = newClients(e.awsCfg, e.ep.Kinesis, e.ep.DynamoDB, e.ep.SQS, true)

	tmpl, err := esm.ConfigFromTemplate(filepath.Join(root, "template.yaml"))
	if err != nil {
		tmpl = esm.DefaultConfig() // the demo sets every setting it relies on itself
	}
	e.template = tmpl
	if err := e.pickRuntime(ctx); err != nil {
		return nil, err
	}

	res := &Result{Runtime: e.runtime, Seed: cfg.Seed, ReportDir: dir, Settings: cfg.settings(), Variants: cfg.Variants, FullReport: cfg.FullReport}
	prog.phase("demo", cfg.expectation())
	if prog.columns() < 150 {
		prog.phase("demo", statusLegend)
	}
	for _, name := range cfg.Variants {
		v, err := newVariant(e, name, name == VariantGapless)
		if err != nil {
			return nil, err
		}
		// Each variant has its own budget: a slow comparison variant never eats gapless's.
		vctx, vcancel := context.WithTimeout(ctx, cfg.Timeout)
		vr, err := v.run(vctx)
		vcancel()
		if err != nil {
			return nil, err
		}
		if err := writeVariantFiles(v, vr); err != nil {
			return nil, err
		}
		lost := vr.Lost
		res.Produced = vr.Produced
		switch name {
		case VariantBaseline:
			res.Baseline, res.LostESMOnly = vr, &lost
		case VariantCheckpointDecides:
			res.CheckpointDecides, res.LostCheckpointDecides = vr, &lost
		case VariantGapless:
			res.Gapless = vr
			res.Produced, res.DeliveredUnique, res.Duplicates = vr.Produced, vr.DeliveredUnique, vr.Duplicates
			res.Parked, res.Lost, res.LostToRetention, res.ReplayedAfterTrim = vr.Parked, vr.Lost, vr.LostToRetention, vr.ReplayedAfterTrim
			res.GapsDetected, res.GapsReplayed = vr.GapsDetected, vr.GapsReplayed
			res.ReconcilerReplayed, res.ReconcilerParked = vr.ReconcilerReplayed, vr.ReconcilerParked
			res.Filtered, res.FilteredProcessed = vr.Filtered, vr.FilteredProcessed
			res.DDBRequestsPerBatch, res.DDBWCUPerRecord = vr.DDB.RequestsPerBatch, vr.DDB.WCUPerRecord
			res.Verified, res.Pending, res.Incomplete = vr.Verified, vr.Pending, vr.Incomplete
			res.ForgedParked = vr.ForgedParked
		}
	}
	if res.Baseline != nil && res.Gapless != nil {
		f := lossFates(res.Baseline, res.Gapless)
		res.MappingAloneLossInGapless = &f
	}
	res.Seconds = time.Since(started).Seconds()
	prog.stop()
	if err := writeOutcomeChart(res); err != nil {
		return res, err
	}
	if err := writeReport(res); err != nil {
		return res, err
	}
	prune = !cfg.FullReport
	return res, nil
}

// expectation announces how long the run is expected to take: production at the configured
// rate, then the wait for every record to be accounted for, each variant bounded by Timeout.
func (c Config) expectation() string {
	produce := "as fast as PutRecords goes"
	if c.Rate > 0 {
		produce = fmt.Sprintf("about %s", (time.Duration(c.Records) * time.Second / time.Duration(c.Rate)).Round(time.Second))
	}
	return fmt.Sprintf("%d variant(s) in turn (%s); each produces %d records (%s), then waits until every record is "+
		"delivered or parked and every shard verified, at most %s per variant (--timeout)",
		len(c.Variants), strings.Join(c.Variants, ", "), c.Records, produce, c.Timeout)
}

// ErrLost is returned by callers (the CLI) when gapless lost records or could not prove it.
var ErrLost = errors.New("demo: gapless lost records or did not verify every shard")

func (c Config) settings() Settings {
	return Settings{
		Records: c.Records, Shards: c.Shards, Parallelization: c.Parallelization, Keys: c.Keys, Rate: c.Rate,
		Duration: c.Duration.String(), FunctionTimeout: c.FunctionTimeout.String(), SettleAfter: c.SettleAfter.String(),
		Reconcile: c.ReconcileEvery.String(), BatchSize: c.BatchSize, RetryAttempts: c.RetryAttempts,
		MaxRecordAge:      c.MaxRecordAge.String(),
		MaxRecordAttempts: c.MaxRecordAttempts, Bisect: c.Bisect, Faults: c.Faults, Chaos: c.chaosConfig("").String(),
		Backend: c.Backend, Filter: c.Filter, OnFailure: c.onFailure(), Retention: c.retention(),
	}
}

func (c Config) onFailure() string {
	if c.OnFailure == "" {
		return OnFailureSQS
	}
	return c.OnFailure
}

func (c Config) retention() string {
	if !c.Faults.Expire {
		return ""
	}
	return c.Retention.String()
}
