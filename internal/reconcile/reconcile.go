// Package reconcile proves, record by record, that everything behind the checkpoint mirror was
// done, and replays whatever was not through the same batch pipeline the consumer uses.
//
// A scheduled pass (Run) walks every shard of the stream, parents before children, from the
// verified watermark up to the checkpoint mirror, looking only at records older than the settle
// window, so that batches still in flight in another lane of the event-source mapping are not
// taken for gaps. A closed shard is walked to its end once the mapping has moved on to its
// children (a descendant has a checkpoint). Each page of records goes through the pipeline,
// which skips what the ledger already holds and processes the rest under the same attempt and
// parking rules; the watermark then advances (conditionally, monotonically) to the last record
// below which everything is accounted for. Failure-queue messages from the mapping name exact
// ranges; ReplayRange re-reads those.
//
// The watermark never passes a record that is not processed, parked or counted lost: a crash
// or a timeout at any point leaves work for the next run, never a silent skip. docs/reconciler.md
// explains the rules and their costs.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Source is the pipeline source name of replays made by the reconciler.
const Source = pipeline.SourceReconciler

// Checkpoints is what the reconciler needs from the checkpoint mirror (*checkpoint.Store).
type Checkpoints interface {
	List(ctx context.Context, group, stream string) ([]checkpoint.State, error)
	Get(ctx context.Context, shard recordid.Shard) (checkpoint.State, error)
	AdvanceWatermark(ctx context.Context, shard recordid.Shard, seq string) (checkpoint.Result, error)
	CountLoss(ctx context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error)
	AddCounters(ctx context.Context, shard recordid.Shard, c checkpoint.Counters) error
	MarkClosed(ctx context.Context, shard recordid.Shard, endingSeq string) error
	SetLineage(ctx context.Context, shard recordid.Shard, parents []string) error
	SetScopeFrom(ctx context.Context, shard recordid.Shard, at time.Time) error
	SetEmptyThrough(ctx context.Context, shard recordid.Shard, e checkpoint.EmptyThrough) (bool, error)
	SetVerifiedAsOf(ctx context.Context, shard recordid.Shard, at time.Time) error
}

var _ Checkpoints = (*checkpoint.Store)(nil)

// Replayer runs a batch through the pipeline (skipping what the ledger holds); *pipeline.Pipeline.
type Replayer interface {
	Run(ctx context.Context, b pipeline.Batch) (pipeline.Result, error)
}

var _ Replayer = (*pipeline.Pipeline)(nil)

// Config tunes a Reconciler.
type Config struct {
	Group  string
	Stream string
	// StreamARN, when set, names the stream in every Kinesis call instead of Stream: a stream
	// in another account is reachable only by ARN, through its resource-based policy (Kinesis
	// Data Streams developer guide, "Share access using resource-based policies"). Stream still
	// names the state.
	StreamARN string
	// SettleAfter: records younger than this are left alone (they may be in flight). See
	// config.MinSettle for the shortest safe value for a mapping.
	SettleAfter time.Duration
	// ReadInterval is the least time between two GetRecords calls on one shard (default 1s:
	// the reconciler takes at most one of the shard's five reads per second).
	ReadInterval time.Duration
	// ReadBytesPerSecond paces reads by size (default 1 MiB/s, half of a shard's 2 MB/s read
	// throughput): after a page of B bytes the next call waits at least B/ReadBytesPerSecond.
	ReadBytesPerSecond int64
	// PageLimit is GetRecords' Limit (default 10,000, the Kinesis maximum).
	PageLimit int32
	// DeadlineMargin: stop starting pages when less than this remains before ctx's deadline
	// (default 5s).
	DeadlineMargin time.Duration
	// MaxRunTime bounds a run whose ctx has no deadline (default 4 minutes).
	MaxRunTime time.Duration
	// MinShardTime is the least time a shard gets in a pass (default 10s, or what is left of
	// the pass if less). A shard's budget is an equal share of what is left of the pass among the
	// shards not yet walked, at least MinShardTime; see Run.
	MinShardTime time.Duration
	// MaxRecordAge is the event-source mapping's MaximumRecordAgeInSeconds (0 or negative:
	// -1, unlimited). Records past the checkpoint mirror older than TailAfter (this age, at most
	// TailAgeCap, plus SettleAfter) are verified too: the mapping has given them up or
	// processed them by then (docs/reconciler.md, "The tail past the checkpoint").
	MaxRecordAge time.Duration
	// Filter is the mapping's record filter (RECORD_FILTER): a record it drops never reached the
	// consumer, so it counts as accounted for (Filtered), not as a gap. nil: no filter.
	Filter *filter.Filter
	// StartingPosition is the mapping's StartingPosition (STARTING_POSITION): StartTrimHorizon
	// ("" means it too) or StartLatest. It sets where a lineage the mapping never checkpointed
	// is in scope (scope.go; docs/reconciler.md, "A lineage the mapping never checkpointed").
	StartingPosition string
}

// TailAgeCap bounds the age the mapping is trusted to still be working on a record past the
// checkpoint: half of the shortest retention Kinesis allows (24 hours), so that the tail of a
// shard is verified well before any stream can trim it, whatever MaximumRecordAgeInSeconds
// says (-1 = unlimited, or more than the stream's retention). A mapping more than this far
// behind (its IteratorAge alarm fires at one hour) gets duplicates from the reconciler, never
// a loss.
const TailAgeCap = 12 * time.Hour

// TailAfter is the age past which a record after the checkpoint mirror is verified by the
// scheduled pass: min(maxRecordAge, TailAgeCap) + settle, maxRecordAge <= 0 meaning unlimited.
func TailAfter(maxRecordAge, settle time.Duration) time.Duration {
	if maxRecordAge <= 0 || maxRecordAge > TailAgeCap {
		maxRecordAge = TailAgeCap
	}
	return maxRecordAge + settle
}

// Option configures optional dependencies.
type Option func(*Reconciler)

// WithClock injects the clock used for the settle window and lag (tests).
func WithClock(now func() time.Time) Option { return func(r *Reconciler) { r.now = now } }

// WithLogger sets the slog logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(r *Reconciler) { r.log = l } }

// Progress is reported after every page a reconciler replays (for the CLI's stderr).
type Progress struct {
	ShardID         string
	LastSeq         string // last sequence number of the page
	RecordsVerified int    // so far on this shard in this call
	GapsReplayed    int    // so far on this shard in this call
}

// WithProgress calls fn after every page (from the goroutine running ReplayRange, or from the
// goroutine walking a shard in Run: a shard abandoned at the end of its budget may still call
// it later, so fn must be safe for concurrent use).
func WithProgress(fn func(Progress)) Option { return func(r *Reconciler) { r.progress = fn } }

// Reconciler verifies one stream for one consumer group. It is safe for concurrent use, and
// several Reconcilers (or Lambda invocations) may work on one stream at once: the ledger keeps
// them from losing records and the conditional watermark keeps it monotonic (concurrent replays
// of one gap can process it twice: see docs/reconciler.md).
type Reconciler struct {
	kin      kinesisAPI
	cps      Checkpoints
	replay   Replayer
	cfg      Config
	now      func() time.Time
	log      *slog.Logger
	progress func(Progress)
	census   Census // WithCensus; nil: no expired span is proven done

	mu     sync.Mutex
	cursor string // the shard the next pass starts with ("" before the first pass stopped early)
	// verifiedAsOf is, per shard, what the last walk of this Reconciler found: the arrival of
	// the oldest record it knew not verified, or the time it found none (see unverifiedSince).
	verifiedAsOf map[string]time.Time
}

// ErrConfig is wrapped by New for unusable configurations.
var ErrConfig = errors.New("reconcile: invalid config")

// New returns a Reconciler reading through kin (*kinesis.Client), keeping state in cps
// (*checkpoint.Store) and replaying through replay (*pipeline.Pipeline).
func New(kin kinesisAPI, cps Checkpoints, replay Replayer, cfg Config, opts ...Option) (*Reconciler, error) {
	if kin == nil || cps == nil || replay == nil {
		return nil, fmt.Errorf("%w: Kinesis client, checkpoint store and replayer are all required", ErrConfig)
	}
	if err := (recordid.Shard{Group: cfg.Group, Stream: cfg.Stream, ShardID: "s"}).Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if cfg.SettleAfter < 0 {
		return nil, fmt.Errorf("%w: SettleAfter %s is negative", ErrConfig, cfg.SettleAfter)
	}
	switch cfg.StartingPosition {
	case "", StartTrimHorizon, StartLatest:
	default:
		return nil, fmt.Errorf("%w: StartingPosition %q, want %s or %s", ErrConfig, cfg.StartingPosition, StartTrimHorizon, StartLatest)
	}
	cfg = cfg.withDefaults()
	r := &Reconciler{kin: kin, cps: cps, replay: replay, cfg: cfg, now: time.Now, log: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

func (c Config) withDefaults() Config {
	if c.ReadInterval <= 0 {
		c.ReadInterval = time.Second
	}
	if c.ReadBytesPerSecond <= 0 {
		c.ReadBytesPerSecond = 1 << 20
	}
	if c.PageLimit <= 0 || c.PageLimit > 10000 {
		c.PageLimit = 10000
	}
	if c.DeadlineMargin <= 0 {
		c.DeadlineMargin = 5 * time.Second
	}
	if c.MaxRunTime <= 0 {
		c.MaxRunTime = 4 * time.Minute
	}
	if c.MinShardTime <= 0 {
		c.MinShardTime = 10 * time.Second
	}
	return c
}

// ShardReport is what one run did on one shard.
type ShardReport struct {
	ShardID   string
	Parents   []string
	Watermark string // after the run
	// Complete: the shard reached its bound this run (its checkpoint; for a closed shard whose
	// children the mapping has started, its end).
	Complete bool
	// End: the shard is closed and verified to its last record (its children may be verified).
	End bool
	// Deferred: not verified this run (time budget spent, or parents not yet verified).
	Deferred bool
	// Stuck: the shard's walk was still running when its time budget ended (a replay that
	// ignores its deadline: a record hanging its Process) and was abandoned; the pass went on
	// with the other shards, and the next one starts after this shard.
	Stuck           bool
	RecordsVerified int // user records proven accounted for this run
	GapsDetected    int // records found absent from the ledger
	GapsReplayed    int // of those, processed by this run
	// TailReplayed: the part of GapsReplayed past the checkpoint mirror (records the mapping
	// gave up, or skipped, with nothing after them to move the checkpoint).
	TailReplayed int
	Parked       int // of those, parked by this run
	StillFailing int // of those, failed again (retried by a later run)
	// LostSpans: spans that expired from the stream before they were verified, records nobody
	// processed possibly among them.
	LostSpans int
	// ExpiredUnverified: spans that expired before they were verified but whose every record is
	// proven done (spanDone): the reconciler fell behind, nothing was lost.
	ExpiredUnverified int
	Filtered          int // records the record filter drops: accounted for without a replay
	// OldestUnverified is the arrival time of the oldest record behind the checkpoint known not
	// to be verified after this run (zero if none is known).
	OldestUnverified time.Time
	// UnverifiedSince, for a Deferred shard whose walk this run learnt nothing of where it
	// stands (not walked, stuck, or cut short before its first page), is the time since which
	// its verification is not known to be current (unverifiedSince); its verified lag is
	// measured from it. Zero when nothing behind a checkpoint is known at all.
	UnverifiedSince time.Time
	GetRecordsCalls int
}

// Report sums a run.
type Report struct {
	Shards                                                            []ShardReport
	RecordsVerified, GapsDetected, GapsReplayed, Parked, StillFailing int
	TailReplayed                                                      int // the part of GapsReplayed past the checkpoint
	LostToRetention                                                   int // lost spans
	ExpiredUnverified                                                 int // expired spans proven done
	Filtered                                                          int // records the record filter drops
	GetRecordsCalls                                                   int
	// VerifiedLag is the age of the oldest record known not to be verified (0 when caught up).
	VerifiedLag time.Duration
}

func (rep *Report) add(s ShardReport, now time.Time) {
	rep.Shards = append(rep.Shards, s)
	rep.RecordsVerified += s.RecordsVerified
	rep.GapsDetected += s.GapsDetected
	rep.GapsReplayed += s.GapsReplayed
	rep.TailReplayed += s.TailReplayed
	rep.Parked += s.Parked
	rep.StillFailing += s.StillFailing
	rep.LostToRetention += s.LostSpans
	rep.ExpiredUnverified += s.ExpiredUnverified
	rep.Filtered += s.Filtered
	rep.GetRecordsCalls += s.GetRecordsCalls
	if from := s.lagFrom(); !from.IsZero() {
		if lag := now.Sub(from); lag > rep.VerifiedLag {
			rep.VerifiedLag = lag
		}
	}
}

// lagFrom is the time the shard's verified lag is measured from (zero: no lag known).
func (s ShardReport) lagFrom() time.Time {
	if s.OldestUnverified.IsZero() && s.Deferred {
		return s.UnverifiedSince
	}
	return s.OldestUnverified
}

// UserRecords turns Kinesis records into pipeline records, de-aggregating KPL aggregates the
// same way the consumer does (sub-index = position in the aggregate; a corrupt aggregate is one
// record carrying DecodeErr).
func UserRecords(shardID string, recs []types.Record) []pipeline.Record {
	out := make([]pipeline.Record, 0, len(recs))
	for _, rec := range recs {
		seq := aws.ToString(rec.SequenceNumber)
		arrival := aws.ToTime(rec.ApproximateArrivalTimestamp)
		pk := aws.ToString(rec.PartitionKey)
		users, err := kpl.Deaggregate(rec.Data)
		switch {
		case errors.Is(err, kpl.ErrNotAggregated):
			out = append(out, pipeline.Record{ID: recordid.ID{ShardID: shardID, Seq: seq}, PartitionKey: pk, Data: rec.Data, ArrivalTime: arrival})
		case err != nil:
			out = append(out, pipeline.Record{ID: recordid.ID{ShardID: shardID, Seq: seq}, PartitionKey: pk, Data: rec.Data, ArrivalTime: arrival, DecodeErr: err})
		default:
			for i, u := range users {
				out = append(out, pipeline.Record{ID: recordid.ID{ShardID: shardID, Seq: seq, Sub: uint32(i)}, PartitionKey: u.PartitionKey, Data: u.Data, ArrivalTime: arrival})
			}
		}
	}
	return out
}
