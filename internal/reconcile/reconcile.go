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
	"hash/fnv"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
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

type shardInfo struct {
	id          string
	parents     []string
	startingSeq string // SequenceNumberRange.StartingSequenceNumber: below every record of the shard
	endingSeq   string // set when the shard is closed
}

// Run makes one scheduled pass over every shard of the stream still in retention. Work is
// bounded by ctx's deadline (minus DeadlineMargin) or MaxRunTime; what is left waits for the
// next run. The error is non-nil only when the pass could not start or a shard failed (a store
// or stream error); the report is valid either way.
//
// One stuck shard does not stop the others: each shard gets a time budget, an equal share of
// what is left of the pass among the shards not yet walked (at least MinShardTime). A shard
// whose walk has not returned shortly after its budget (a replayed record whose Process hangs,
// ignoring its context) is abandoned, reported Stuck, and the pass moves on; the walk goes on in
// the background and stops at its next check of the context (its effects are conditional, like
// those of a concurrent reconciler). The order is parents before children, starting at the
// shard where the previous pass stopped (the one after a stuck shard, or the first it did not
// reach), so a shard that holds up a pass is walked last next time; a reconciler that starts
// cold (a runtime killed by a record) starts at a shard picked from the clock, so that one
// record killing every pass does not keep the shards behind it from being verified.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	ctx, cancel := r.budget(ctx)
	defer cancel()
	var rep Report
	sv, err := r.survey(ctx)
	if err != nil {
		return rep, err
	}
	sv.scope = r.scopeStart(ctx, sv.shards, sv.byShard)
	// Parents before children: a child is verified only once each parent still in the stream
	// is closed and verified to its end, as the mapping drains parents first.
	done := map[string]bool{}
	var errs []error
	order := r.passOrder(sv.shards)
	stopped := false // the pass has recorded where the next one starts
	for i, sh := range order {
		st := r.stateOf(sv, sh.id)
		ready := ctx.Err() == nil
		if !ready && !stopped {
			stopped = true
			r.setCursor(sh.id) // the first shard this pass did not reach
		}
		if !ready || !sv.parentsDone(sh, done) {
			rep.add(ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Deferred: true,
				UnverifiedSince: r.unverifiedSince(sh.id, st)}, r.now())
			continue
		}
		sr, stuck, err := r.walk(ctx, sv, sh, st, done, len(order)-i)
		if stuck && !stopped && i+1 < len(order) {
			r.setCursor(order[i+1].id)
		}
		rep.add(sr, r.now())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done[sh.id] = sr.End
	}
	return rep, errors.Join(errs...)
}

// survey is what a pass knows of the stream before it walks a shard: the shards in retention
// and the stored state of each.
type survey struct {
	shards   []shardInfo
	byShard  map[string]checkpoint.State
	inStream map[string]bool
	drained  map[string]bool
	scope    time.Time // the group's scope start under LATEST (scope.go); zero otherwise
}

// survey lists the stream's shards and the group's shard items.
func (r *Reconciler) survey(ctx context.Context) (*survey, error) {
	shards, err := listShards(ctx, r.kin, r.cfg.Stream, r.cfg.StreamARN)
	if err != nil {
		return nil, err
	}
	states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	sv := &survey{shards: shards, byShard: make(map[string]checkpoint.State, len(states)), inStream: make(map[string]bool, len(shards))}
	for _, s := range states {
		sv.byShard[s.Shard.ShardID] = s
	}
	for _, s := range shards {
		sv.inStream[s.id] = true
	}
	sv.drained = drainedShards(shards, sv.byShard)
	return sv, nil
}

// stateOf is the stored state of a shard of the stream (the zero State, keyed, for one without
// an item).
func (r *Reconciler) stateOf(sv *survey, id string) checkpoint.State {
	st := sv.byShard[id]
	st.Shard = r.shard(id)
	return st
}

// parentsDone reports whether every parent of sh still in the stream is verified to its end.
func (sv *survey) parentsDone(sh shardInfo, done map[string]bool) bool {
	for _, p := range sh.parents {
		if sv.inStream[p] && !done[p] {
			return false
		}
	}
	return true
}

// walk verifies one shard whose parents are done, within its share of the pass (left shards
// remain, this one included: withinShardBudget). A walk that does not return within its budget
// is abandoned and reported Deferred and Stuck. The error is the walk's (a store or stream
// error); the report is valid either way.
func (r *Reconciler) walk(ctx context.Context, sv *survey, sh shardInfo, st checkpoint.State, done map[string]bool, left int) (ShardReport, bool, error) {
	// A child the mapping gave up on from its start (lineage.go), or the root of a lineage it
	// never checkpointed (scope.go): verified from where the mapping's responsibility starts.
	from, walk := r.startOf(sh, &st, done, sv.inStream, sv.byShard, sv.drained[sh.id], sv.scope)
	if !walk {
		return ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Complete: true}, false, nil
	}
	if len(sh.parents) > 0 && len(st.Parents) == 0 && st.Checkpoint != "" {
		if err := r.cps.SetLineage(ctx, st.Shard, sh.parents); err != nil {
			r.log.WarnContext(ctx, "recording lineage failed", "group", r.cfg.Group, "shard_id", sh.id, "error", err)
		}
	}
	sr, stuck, err := r.withinShardBudget(ctx, left, func(ctx context.Context) (ShardReport, error) {
		return r.verifyShard(ctx, sh, st, sv.drained[sh.id], from)
	})
	if stuck {
		sr = ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Deferred: true, Stuck: true}
		r.log.ErrorContext(ctx, "verifying a shard did not return within its time budget: a replayed record is stuck "+
			"(its Process ignores the deadline?); the pass goes on with the other shards and the next pass starts after it",
			"group", r.cfg.Group, "shard_id", sh.id, "watermark", st.Watermark)
	}
	switch {
	case sr.Deferred && sr.OldestUnverified.IsZero():
		sr.UnverifiedSince = r.unverifiedSince(sh.id, st)
	case err == nil:
		r.keepVerifiedAsOf(sh.id, sr.OldestUnverified)
	}
	if err != nil {
		r.log.ErrorContext(ctx, "verifying shard failed; it is retried next run", "group", r.cfg.Group, "shard_id", sh.id, "error", err)
	}
	return sr, stuck, err
}

// withinShardBudget runs walk with a deadline that is this shard's share of the pass: what is
// left of ctx's deadline divided among the left shards (this one included), at least
// MinShardTime, never past ctx's deadline. It waits for walk until a short grace after that
// deadline; a walk still running then is abandoned (stuck is true; it keeps running on its own
// and its report is not used).
func (r *Reconciler) withinShardBudget(ctx context.Context, left int, walk func(context.Context) (ShardReport, error)) (_ ShardReport, stuck bool, _ error) {
	passEnd, ok := ctx.Deadline()
	if !ok { // Run always sets one (budget); a bare call gets MaxRunTime
		passEnd = time.Now().Add(r.cfg.MaxRunTime)
	}
	remaining := time.Until(passEnd)
	share := remaining / time.Duration(max(left, 1))
	share = min(max(share, r.cfg.MinShardTime), remaining)
	sctx, cancel := context.WithDeadline(ctx, time.Now().Add(share))
	type result struct {
		rep ShardReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		rep, err := walk(sctx)
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		return res.rep, false, res.err
	case <-sctx.Done():
	}
	// The walk checks its context between pages and records: give it half the margin to return
	// what it did (its last writes: the watermark, the position kept through an empty stretch),
	// so a slow write is not taken for a stuck Process. The pass's own deadline keeps
	// DeadlineMargin from the invocation's, so this stays inside the invocation.
	grace := time.NewTimer(r.cfg.DeadlineMargin / 2)
	defer grace.Stop()
	select {
	case res := <-done:
		return res.rep, false, res.err
	case <-grace.C:
		return ShardReport{}, true, nil
	}
}

// passOrder is the order of this pass: parents before children, starting at the cursor (see
// Run).
func (r *Reconciler) passOrder(shards []shardInfo) []shardInfo {
	sorted := append([]shardInfo(nil), shards...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].id < sorted[j].id })
	if len(sorted) == 0 {
		return nil
	}
	r.mu.Lock()
	cursor := r.cursor
	r.mu.Unlock()
	start := 0
	if cursor != "" {
		// The cursor's shard, or the next one by id if it left the stream.
		start = sort.Search(len(sorted), func(i int) bool { return sorted[i].id >= cursor }) % len(sorted)
	} else {
		// Cold start: a start shard picked from the clock (per minute), the same for every
		// reconciler starting in that minute.
		h := fnv.New64a()
		fmt.Fprint(h, r.now().Unix()/60)
		start = int(h.Sum64() % uint64(len(sorted)))
	}
	return topoOrder(append(sorted[start:], sorted[:start]...))
}

// unverifiedSince is the time from which a shard this pass learnt nothing about is not known to
// be verified: what this Reconciler's last walk of it found (the arrival of the oldest record
// it knew not verified, or, when it found none, the time of that walk: records that arrived
// since may be unverified); for a reconciler that never walked it (a cold start), the time the
// verified watermark last moved, or, for a shard never verified, the time the consumer last
// moved its checkpoint (every record behind it is unverified and arrived before it: a lower
// bound of the lag). Zero for a shard with neither: nothing is behind a checkpoint.
func (r *Reconciler) unverifiedSince(shardID string, st checkpoint.State) time.Time {
	r.mu.Lock()
	at, ok := r.verifiedAsOf[shardID]
	r.mu.Unlock()
	switch {
	case ok:
		return at
	case !st.WatermarkAt.IsZero():
		return st.WatermarkAt
	default:
		return st.CheckpointAt
	}
}

// keepVerifiedAsOf remembers what a walk found (unverifiedSince): oldest, or now when zero.
func (r *Reconciler) keepVerifiedAsOf(shardID string, oldest time.Time) {
	if oldest.IsZero() {
		oldest = r.now()
	}
	r.mu.Lock()
	if r.verifiedAsOf == nil {
		r.verifiedAsOf = map[string]time.Time{}
	}
	r.verifiedAsOf[shardID] = oldest
	r.mu.Unlock()
}

func (r *Reconciler) setCursor(shardID string) {
	r.mu.Lock()
	r.cursor = shardID
	r.mu.Unlock()
}

func (r *Reconciler) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-r.cfg.DeadlineMargin))
	}
	return context.WithTimeout(ctx, r.cfg.MaxRunTime)
}

func (r *Reconciler) shard(id string) recordid.Shard {
	return recordid.Shard{Group: r.cfg.Group, Stream: r.cfg.Stream, ShardID: id}
}

func (r *Reconciler) reader(shardID string, closed bool) *shardReader {
	return &shardReader{kin: r.kin, stream: r.cfg.Stream, streamARN: r.cfg.StreamARN, shardID: shardID, interval: r.cfg.ReadInterval,
		bytesPerSec: r.cfg.ReadBytesPerSecond, limit: r.cfg.PageLimit, closed: closed}
}

// listShards returns every shard of the stream still in retention, open and closed.
func listShards(ctx context.Context, kin kinesisAPI, stream, streamARN string) ([]shardInfo, error) {
	var out []shardInfo
	in := &kinesis.ListShardsInput{}
	in.StreamName, in.StreamARN = streamRef(stream, streamARN)
	for {
		page, err := kin.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("reconcile: ListShards %s: %w", stream, err)
		}
		for _, s := range page.Shards {
			info := shardInfo{id: aws.ToString(s.ShardId)}
			for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
				if aws.ToString(p) != "" {
					info.parents = append(info.parents, aws.ToString(p))
				}
			}
			if s.SequenceNumberRange != nil {
				info.startingSeq = aws.ToString(s.SequenceNumberRange.StartingSequenceNumber)
				info.endingSeq = aws.ToString(s.SequenceNumberRange.EndingSequenceNumber)
			}
			out = append(out, info)
		}
		if page.NextToken == nil {
			return out, nil
		}
		// NextToken carries the stream: ListShards rejects StreamName alongside it.
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// streamRef names the stream for a Kinesis call: by ARN when one is configured, else by name
// (the APIs take one or the other).
func streamRef(name, arn string) (streamName, streamARN *string) {
	if arn != "" {
		return nil, aws.String(arn)
	}
	return aws.String(name), nil
}

// drainedShards reports, per closed shard, whether the mapping has moved past it: some
// descendant has a checkpoint. Lambda reads a child only after its parents are read to their
// end, so from then on the closed shard's whole content is behind the consumer.
func drainedShards(shards []shardInfo, states map[string]checkpoint.State) map[string]bool {
	children := map[string][]string{}
	for _, s := range shards {
		for _, p := range s.parents {
			children[p] = append(children[p], s.id)
		}
	}
	memo := map[string]bool{}
	var visit func(id string, depth int) bool
	visit = func(id string, depth int) bool {
		if v, ok := memo[id]; ok || depth > len(shards) {
			return v
		}
		d := false
		for _, c := range children[id] {
			if states[c].Checkpoint != "" || visit(c, depth+1) {
				d = true
				break
			}
		}
		memo[id] = d
		return d
	}
	out := make(map[string]bool, len(shards))
	for _, s := range shards {
		out[s.id] = visit(s.id, 0)
	}
	return out
}

// lineageOrder sorts shards so that every parent comes before its children.
func lineageOrder(shards []shardInfo) []shardInfo {
	sorted := append([]shardInfo(nil), shards...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].id < sorted[j].id })
	return topoOrder(sorted)
}

// topoOrder orders shards so that every parent comes before its children, otherwise keeping
// the given order.
func topoOrder(sorted []shardInfo) []shardInfo {
	byID := make(map[string]shardInfo, len(sorted))
	for _, s := range sorted {
		byID[s.id] = s
	}
	var out []shardInfo
	seen := map[string]bool{}
	var visit func(s shardInfo)
	visit = func(s shardInfo) {
		if seen[s.id] {
			return
		}
		seen[s.id] = true
		for _, p := range s.parents {
			if ps, ok := byID[p]; ok {
				visit(ps)
			}
		}
		out = append(out, s)
	}
	for _, s := range sorted {
		visit(s)
	}
	return out
}

// lostSpan is a span of a shard that expired before it was verified: from (exclusive, the old
// watermark) to the first record still held (exclusive; "" while unknown). after is the stored
// verified watermark the span follows ("" when none): its identity (checkpoint.Loss).
type lostSpan struct {
	from, to  string
	after     string
	toArrival time.Time
}

// stopReason says why a page was cut.
type stopReason int

const (
	notStopped  stopReason = iota
	beyondBound            // the next record is past the checkpoint
	unsettled              // the next record is younger than the settle window
)

// verifyShard walks one shard from its watermark to its bound.
func (r *Reconciler) verifyShard(ctx context.Context, sh shardInfo, st checkpoint.State, drained bool, from startFrom) (rep ShardReport, _ error) {
	rep = ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark}
	closed := sh.endingSeq != ""
	upper := st.Checkpoint
	shard := r.shard(sh.id)
	switch {
	case closed && st.Closed:
		rep.Complete, rep.End = true, true
		return rep, nil
	case closed && st.Watermark == sh.endingSeq:
		// Verified to its end by an earlier run whose MarkClosed failed: only the mark is
		// missing. Reading after the ending sequence number would find nothing (kinesis-local
		// refuses the number outright), and nothing there is a loss.
		if err := r.cps.MarkClosed(ctx, shard, sh.endingSeq); err != nil {
			return rep, fmt.Errorf("reconcile: mark %s closed: %w", sh.id, err)
		}
		rep.Complete, rep.End = true, true
		return rep, nil
	case closed && drained:
		upper = "" // the mapping has moved on to the children: the whole shard must be accounted for
	case upper == "":
		rep.Complete = true // nothing consumed yet: nothing is behind a checkpoint
		return rep, nil
	}
	// A watermark at or past the checkpoint still reads on: records after it may be a tail the
	// mapping gave up (one GetShardIterator and one GetRecords per idle shard and pass).
	rd := r.reader(sh.id, closed)
	defer func() { rep.GetRecordsCalls = rd.calls }()
	var counters checkpoint.Counters
	defer r.addCounters(ctx, shard, &counters)

	start := st.Watermark
	// Progress an earlier pass made through empty pages after this watermark (see keepEmpty).
	stored, resume := st.EmptyThroughFor()
	var resumeAt *string
	var resumeErr error
	if resume = resume && (from.at.IsZero() || stored.Add(-emptyMargin).After(from.at)); resume {
		// Asked before the position the walk would start from, which then proves nothing expired
		// after the watermark: a later trim horizon cannot have passed the resume point unseen.
		resumeAt, resumeErr = rd.iteratorAt(ctx, stored.Add(-emptyMargin))
	}
	var lost *lostSpan
	var err error
	if start == "" && from != (startFrom{}) {
		r.log.InfoContext(ctx, "verifying a shard the mapping never checkpointed, from where its responsibility starts",
			"group", r.cfg.Group, "shard_id", sh.id, "trim_horizon", from.trimHorizon, "scope_from", from.at)
		err = r.openFrom(ctx, rd, from)
	} else {
		lost, err = r.open(ctx, rd, start, sh.startingSeq)
	}
	if err != nil {
		if ctx.Err() != nil {
			rep.Deferred = true
			if resume {
				rep.OldestUnverified = stored
			}
			return rep, nil
		}
		return rep, err
	}
	if resume && resumeErr != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, "resuming after the kept empty pages failed; reading them again from the watermark", "group", r.cfg.Group, "shard_id", sh.id, "error", resumeErr)
	}
	if resume && lost == nil && resumeErr == nil {
		r.log.InfoContext(ctx, "resuming after the empty pages an earlier pass read past the watermark",
			"group", r.cfg.Group, "shard_id", sh.id, "watermark", start, "empty_through", stored.UTC().Format(time.RFC3339Nano))
		rd.iterator, rd.ended = resumeAt, resumeAt == nil
	}
	// emptyBase is the watermark every page read since it held no record after (valid while
	// emptyOK): the base of the progress kept through empty pages.
	emptyBase, emptyOK := start, true
	// evidence: with the watermark at or past the checkpoint and its position refused, the
	// first record after it the ledger shows seen and not done (tailEvidence).
	var evidence string
	if lost != nil && start != "" && upper != "" && seqnum.Compare(start, upper) >= 0 {
		// Only a look for a tail (the watermark is at or past the checkpoint): the refusal alone
		// proves no loss (an idle shard's watermark record may expire with nothing after it),
		// the ledger's evidence of a seen, unfinished record after the watermark does. Read from
		// the trim horizon; the span stays lost only if the first record held is past that one.
		if evidence, err = r.tailEvidence(ctx, shard, start); err != nil {
			if ctx.Err() != nil {
				rep.Deferred = true
				return rep, nil
			}
			return rep, err
		}
		r.log.InfoContext(ctx, "the verified watermark's position is refused; looking for a tail from the trim horizon",
			"group", r.cfg.Group, "shard_id", sh.id, "sequence_number", start, "first_unfinished_after", evidence)
		if evidence == "" {
			lost = nil
		}
	}
	now := r.now()
	b := bounds{upper: upper, open: !closed, settled: now.Add(-r.cfg.SettleAfter), tail: now.Add(-TailAfter(r.cfg.MaxRecordAge, r.cfg.SettleAfter))}
	var lastVerifiedArrival time.Time
	deferred := func() (ShardReport, error) {
		rep.Deferred = true
		rep.OldestUnverified = lastVerifiedArrival // the next record arrived at or after it
		if emptyOK && lost == nil {
			r.keepEmpty(ctx, shard, &rep, emptyBase, rd.emptyAt)
			if resume && emptyBase == start && stored.After(rep.OldestUnverified) {
				rep.OldestUnverified = stored
			}
		}
		return rep, nil
	}
	for {
		if ctx.Err() != nil {
			return deferred()
		}
		recs, caughtUp, err := rd.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return deferred()
			}
			return rep, err
		}
		recs = after(recs, start) // from the trim horizon after a refusal: the watermark covers these
		if lost != nil && lost.to == "" && len(recs) > 0 {
			lost.to, lost.toArrival = aws.ToString(recs[0].SequenceNumber), aws.ToTime(recs[0].ApproximateArrivalTimestamp)
			if evidence != "" && seqnum.Compare(evidence, lost.to) >= 0 {
				lost = nil // the unfinished record is still held: it is verified, nothing expired unseen
			}
		}
		page, stop := b.cut(recs, &rep)
		page, stop = r.seenTail(ctx, shard, b, recs, page, stop)
		if len(page) > 0 {
			verifiedTo, failedSeq, err := r.replayCut(ctx, shard, page, upper, &rep, &counters)
			if verifiedTo != "" {
				if lost != nil && seqnum.Compare(verifiedTo, lost.to) >= 0 {
					// The advance that passes the span carries its count (one conditional write).
					// If it failed, no later advance of this run may pass the span uncounted.
					if !r.advancePastLoss(ctx, shard, verifiedTo, &rep, *lost) {
						return rep, errors.Join(err, fmt.Errorf("reconcile: count expired span of %s after %s: %w", sh.id, lost.from, errLossNotDurable))
					}
					lost = nil
				} else {
					r.advance(ctx, shard, verifiedTo, &rep)
				}
				lastVerifiedArrival = arrivalOf(page, verifiedTo)
			}
			if err != nil {
				return rep, err
			}
			if failedSeq != "" {
				rep.OldestUnverified = arrivalOf(page, failedSeq)
				rep.Deferred = ctx.Err() != nil // cut short by the budget, not by a failure
				return rep, nil                 // a record still fails: the watermark waits for it
			}
			r.report(sh.id, page, &rep)
		}
		if len(recs) > 0 {
			// Progress through empty pages counts from the last record, once the watermark is on it.
			emptyBase, emptyOK = rep.Watermark, rep.Watermark == aws.ToString(recs[len(recs)-1].SequenceNumber)
		}
		switch {
		case stop == beyondBound:
			// Everything up to the checkpoint is accounted for. A span lost after the old
			// watermark with nothing held up to the checkpoint is all of (watermark, checkpoint].
			if lost != nil {
				if err := r.settleLost(ctx, shard, &rep, lost, upper); err != nil {
					return rep, err
				}
			}
			rep.Complete = true
			return rep, nil
		case stop == unsettled:
			if lost != nil {
				r.log.WarnContext(ctx, "the trim horizon passed the verified watermark; the span is reported once the record after it is verified",
					"group", r.cfg.Group, "shard_id", sh.id, "lost_after_sequence_number", lost.from, "first_sequence_number_held", lost.to)
			}
			return rep, nil
		case closed && rd.ended:
			// A closed shard read to its end (nil NextShardIterator; an empty page is not the
			// end): all its records are accounted for. Its ending sequence number bounds all its
			// records (kinesis-local reports a smaller placeholder; the conditional advance then
			// leaves the watermark where it is).
			if lost != nil {
				// The shard is marked closed (never read again) only once its loss is counted.
				if err := r.settleLost(ctx, shard, &rep, lost, sh.endingSeq); err != nil {
					return rep, err
				}
			} else {
				r.advance(ctx, shard, sh.endingSeq, &rep)
			}
			if err := r.cps.MarkClosed(ctx, shard, sh.endingSeq); err != nil {
				return rep, fmt.Errorf("reconcile: mark %s closed: %w", sh.id, err)
			}
			rep.Complete, rep.End = true, true
			return rep, nil
		case !closed && (caughtUp || rd.ended): // ended: closed since ListShards; the next run sees it closed
			if lost != nil && upper != "" {
				if err := r.settleLost(ctx, shard, &rep, lost, upper); err != nil {
					return rep, err
				}
			}
			rep.Complete = true
			return rep, nil
		}
	}
}

// emptyMargin is how far before the kept position a pass resumes through empty pages: it
// covers a difference between the reconciler's clock and Kinesis's, from which
// MillisBehindLatest and the arrival timestamps AT_TIMESTAMP compares come, and arrival
// timestamps slightly out of order ("There are no guarantees about the timestamp accuracy, or
// that the timestamp is always increasing": Kinesis API reference, Record).
const emptyMargin = time.Second

// keepEmpty records, when a walk is cut short by its budget in a run of empty pages after the
// watermark base, the position it reached (at, from MillisBehindLatest: shardReader.emptyAt), so
// that the next pass resumes there (AT_TIMESTAMP, emptyMargin before it) instead of reading the
// stretch again from the watermark: GetRecords may take many calls to cross a portion of a shard
// without records, more than one pass's share of the shard, and a stretch read again from its
// start every pass is never crossed. The position is kept on the checkpoint item only while the
// watermark is still base (checkpoint.Store.SetEmptyThrough) and reported as the shard's oldest
// possibly unverified arrival (its verified lag). A failed write loses only progress.
func (r *Reconciler) keepEmpty(ctx context.Context, shard recordid.Shard, rep *ShardReport, base string, at time.Time) {
	if at.IsZero() {
		return
	}
	if at.After(rep.OldestUnverified) {
		rep.OldestUnverified = at // no record after base arrived before at
	}
	if _, err := r.cps.SetEmptyThrough(context.WithoutCancel(ctx), shard, checkpoint.EmptyThrough{After: base, Through: at}); err != nil {
		r.log.WarnContext(ctx, "keeping the progress through empty pages failed; the next pass reads them again", "group", shard.Group, "shard_id", shard.ShardID, "error", err)
	}
}

// open positions rd on the first record after the watermark (AFTER_SEQUENCE_NUMBER), or, for a
// shard never verified, on its first record (AT_SEQUENCE_NUMBER its starting sequence number).
// A refusal with InvalidArgumentException proves that the record after that position expired
// unverified: the span is returned and the reader reopened at the trim horizon. Any other
// refusal of the position (kinesis-local: "Unable to find record", for a number that is not a
// record) proves nothing: the reader is reopened at the trim horizon with no span, and the
// caller skips records up to the watermark.
func (r *Reconciler) open(ctx context.Context, rd *shardReader, watermark, startingSeq string) (*lostSpan, error) {
	typ, pos := types.ShardIteratorTypeAfterSequenceNumber, watermark
	if pos == "" {
		typ, pos = types.ShardIteratorTypeAtSequenceNumber, startingSeq
	}
	err := rd.open(ctx, typ, pos)
	switch {
	case errors.Is(err, errTrimmed):
		return &lostSpan{from: pos, after: watermark}, rd.open(ctx, "", "")
	case errors.Is(err, errNoRecord):
		return nil, rd.open(ctx, "", "")
	}
	return nil, err
}

// after drops the leading records at or below seq ("" keeps all).
func after(recs []types.Record, seq string) []types.Record {
	for seq != "" && len(recs) > 0 && seqnum.Compare(aws.ToString(recs[0].SequenceNumber), seq) <= 0 {
		recs = recs[1:]
	}
	return recs
}

// bounds is what a shard's walk may verify: records up to upper ("" = no bound) that arrived
// before settled, and records past upper that arrived before tail (the mapping can no longer be
// working on them: see TailAfter). open says the shard is open.
type bounds struct {
	upper         string
	open          bool
	settled, tail time.Time
}

// cut returns the leading records of recs that the bounds let the walk verify, and why it
// stopped before the end of recs. On an open shard a page ending on upper ends the walk when
// the record there is too young for anything after it to be a due tail (a closed shard is read
// on to find its end).
func (b bounds) cut(recs []types.Record, rep *ShardReport) ([]types.Record, stopReason) {
	for i, rec := range recs {
		arrival := rec.ApproximateArrivalTimestamp
		if undeliverable(rec) {
			continue // the mapping can never deliver it (undeliverable.go): due now
		}
		if b.upper != "" && seqnum.Compare(aws.ToString(rec.SequenceNumber), b.upper) > 0 {
			if arrival == nil || arrival.After(b.tail) {
				return recs[:i], beyondBound // past the checkpoint and the mapping may still be on it
			}
			continue // a tail record the mapping has given up or processed
		}
		if arrival != nil && arrival.After(b.settled) {
			rep.OldestUnverified = *arrival
			return recs[:i], unsettled
		}
	}
	if n := len(recs); n > 0 && b.open && b.upper != "" && aws.ToString(recs[n-1].SequenceNumber) == b.upper {
		// Records after the checkpoint's record arrived after it: none is a due tail while it
		// is younger than the tail bound, so there is no need to read on.
		if last := recs[n-1].ApproximateArrivalTimestamp; last == nil || last.After(b.tail) {
			return recs, beyondBound
		}
	}
	return recs, notStopped
}

// replayCut replays a page cut by bounds.cut: the records up to upper, then, only if none of
// them still fails (per-key order: a failing record holds the records after it), the tail past
// upper, counted apart as TailReplayed. Results as replayPage's, for the whole page.
func (r *Reconciler) replayCut(ctx context.Context, shard recordid.Shard, page []types.Record, upper string, rep *ShardReport, c *checkpoint.Counters) (verifiedTo, failedSeq string, err error) {
	k := len(page)
	if upper != "" {
		k = sort.Search(len(page), func(i int) bool { return seqnum.Compare(aws.ToString(page[i].SequenceNumber), upper) > 0 })
	}
	if k > 0 {
		verifiedTo, failedSeq, err = r.replayPage(ctx, shard, page[:k], rep, c, false)
		if err != nil || failedSeq != "" || k == len(page) {
			return verifiedTo, failedSeq, err
		}
	}
	tailTo, failedSeq, err := r.replayPage(ctx, shard, page[k:], rep, c, true)
	if tailTo != "" {
		verifiedTo = tailTo
	}
	return verifiedTo, failedSeq, err
}

// settleLost reports a lost span none of whose successors up to bound is held: every record
// of the shard up to bound expired unseen, so the watermark moves to bound and the span is
// counted with that move, once (only the reconciler whose advance wins counts it). A non-nil
// error means the count is not known to be durable: the caller must not mark the shard closed
// or complete, and the pass ends in error, so that the next pass finds the span again.
func (r *Reconciler) settleLost(ctx context.Context, shard recordid.Shard, rep *ShardReport, lost *lostSpan, bound string) error {
	if rep.Watermark != "" && seqnum.Compare(bound, rep.Watermark) <= 0 {
		// Nothing to advance (a closed shard whose ending sequence number, as kinesis-local
		// reports it, is below its records; it is marked closed next): the count is written on
		// its own, at once.
		return r.countLoss(ctx, shard, rep, *lost)
	}
	if !r.advancePastLoss(ctx, shard, bound, rep, *lost) {
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w", shard.ShardID, lost.from, errLossNotDurable)
	}
	return nil
}

// errLossNotDurable: the write counting a lost span failed or could not be confirmed.
var errLossNotDurable = errors.New("the write counting the span is not confirmed")

// countLoss counts a lost span with no watermark move (checkpoint.Store.CountLoss: a retried or
// unanswered write is confirmed by reading the item back, never counted twice) and reports it
// when this call's write is on the item. A non-nil error means the count is not durable.
func (r *Reconciler) countLoss(ctx context.Context, shard recordid.Shard, rep *ShardReport, s lostSpan) error {
	done, err := r.spanDone(ctx, shard, s, s.to) // nothing is passed: the span ends at the first record held, if known
	if err != nil {
		r.log.ErrorContext(ctx, "deciding whether an expired span was all done failed; it is counted by a later pass", "group", shard.Group, "shard_id", shard.ShardID,
			"lost_after_sequence_number", s.from, "error", err)
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w: %w", shard.ShardID, s.from, errLossNotDurable, err)
	}
	res, err := r.cps.CountLoss(context.WithoutCancel(ctx), shard, checkpoint.Loss{After: s.after, Done: done})
	if err != nil {
		r.log.ErrorContext(ctx, "counting an expired span failed; the shard is not final until a later pass counts it", "group", shard.Group, "shard_id", shard.ShardID,
			"lost_after_sequence_number", s.from, "error", err)
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w: %w", shard.ShardID, s.from, errLossNotDurable, err)
	}
	if res.Advanced {
		r.lost(ctx, rep, s, done)
	} else {
		r.alreadyCounted(ctx, shard, s)
	}
	return nil
}

func (r *Reconciler) alreadyCounted(ctx context.Context, shard recordid.Shard, s lostSpan) {
	r.log.InfoContext(ctx, "an expired span is already counted (or passed) by another reconciler: not counted again",
		"group", shard.Group, "shard_id", shard.ShardID, "lost_after_sequence_number", s.after)
}

// advancePastLoss moves the watermark to seq past a lost span and counts the span in the same
// conditional write (checkpoint.Store.CountLoss: only while the watermark is still the one the
// span follows and the span is not counted yet), reporting it only when this call's write
// happened (a retried write whose first attempt landed included). When another reconciler
// counted the span first (or moved the watermark past it), the span is not counted again and
// the watermark is advanced to seq plainly. It returns false when the write failed: the caller
// then stops, so that no later advance passes the span without its count.
func (r *Reconciler) advancePastLoss(ctx context.Context, shard recordid.Shard, seq string, rep *ShardReport, s lostSpan) bool {
	end, err := spanEnd(s, seq)
	var done bool
	if err == nil {
		done, err = r.spanDone(ctx, shard, s, end)
	}
	if err != nil {
		r.log.ErrorContext(ctx, "deciding whether an expired span was all done failed; the watermark stays before it until a later pass",
			"group", shard.Group, "shard_id", shard.ShardID, "lost_after_sequence_number", s.from, "error", err)
		return false
	}
	res, err := r.cps.CountLoss(context.WithoutCancel(ctx), shard, checkpoint.Loss{After: s.after, To: seq, Done: done})
	if err != nil {
		// Not applied, or applied without an answer the store could confirm: the next run
		// finds out (it reads after the stored watermark and counts the span only if its own
		// advance passes it).
		r.log.ErrorContext(ctx, "advancing the verified watermark past an expired span failed; it is retried next run",
			"group", shard.Group, "shard_id", shard.ShardID, "sequence_number", seq, "error", err)
		return false
	}
	if res.Advanced {
		rep.Watermark = seq
		r.lost(ctx, rep, s, done)
		return true
	}
	r.alreadyCounted(ctx, shard, s)
	r.advance(ctx, shard, seq, rep) // everything from the span's end to seq is accounted for
	return true
}

func arrivalOf(page []types.Record, seq string) time.Time {
	for _, rec := range page {
		if aws.ToString(rec.SequenceNumber) == seq {
			return aws.ToTime(rec.ApproximateArrivalTimestamp)
		}
	}
	return time.Time{}
}

func (r *Reconciler) report(shardID string, page []types.Record, rep *ShardReport) {
	if r.progress != nil {
		r.progress(Progress{ShardID: shardID, LastSeq: aws.ToString(page[len(page)-1].SequenceNumber),
			RecordsVerified: rep.RecordsVerified, GapsReplayed: rep.GapsReplayed})
	}
}

func (r *Reconciler) addCounters(ctx context.Context, shard recordid.Shard, c *checkpoint.Counters) {
	if *c == (checkpoint.Counters{}) {
		return
	}
	if err := r.cps.AddCounters(context.WithoutCancel(ctx), shard, *c); err != nil {
		r.log.WarnContext(ctx, "adding reconciler counters failed", "group", shard.Group, "shard_id", shard.ShardID, "error", err)
	}
}

// replayPage sends one page of Kinesis records through the pipeline. It returns the highest
// sequence number below which every record of the page is accounted for ("" if none) and the
// lowest sequence number still failing ("" if none).
// tail says the page lies past the checkpoint mirror: its replays are counted TailReplayed too.
func (r *Reconciler) replayPage(ctx context.Context, shard recordid.Shard, page []types.Record, rep *ShardReport, c *checkpoint.Counters, tail bool) (verifiedTo, failedSeq string, err error) {
	// A record inside a mapping run's batch, live or less than the settle window after its last
	// lease renewal, is left to the mapping's retries: the replay would hold them, each held retry
	// costing one of the mapping's MaximumRetryAttempts.
	batch := pipeline.Batch{Shard: shard, Records: r.unfiltered(UserRecords(shard.ShardID, page), rep, c), Source: Source,
		MappingSettled: r.now().Add(-r.cfg.SettleAfter)}
	if len(batch.Records) == 0 { // every record of the page is one the filter drops
		return aws.ToString(page[len(page)-1].SequenceNumber), "", nil
	}
	res, err := r.replay.Run(ctx, batch)
	if err != nil {
		return "", "", fmt.Errorf("reconcile: replay %s %s..%s: %w", shard.ShardID, aws.ToString(page[0].SequenceNumber), aws.ToString(page[len(page)-1].SequenceNumber), err)
	}
	gaps := res.Processed + res.Parked + res.Failed
	rep.GapsDetected += gaps
	rep.GapsReplayed += res.Processed
	if tail {
		rep.TailReplayed += res.Processed
	}
	rep.Parked += res.Parked
	rep.StillFailing += res.Failed
	c.GapsDetected += int64(gaps)
	c.GapsReplayed += int64(res.Processed)
	c.Parked += int64(res.Parked)
	switch {
	case gaps > 0 && tail:
		// Past the checkpoint mirror and older than TailAfter: the mapping gave these records
		// up (or skipped them) and nothing after them moved the checkpoint.
		r.log.WarnContext(ctx, "gaps past the checkpoint (a tail the mapping gave up)", "group", shard.Group, "shard_id", shard.ShardID,
			"gaps", gaps, "replayed", res.Processed, "parked", res.Parked, "still_failing", res.Failed, "past_checkpoint", true, "metric", "TailReplayed",
			"sequence_number", aws.ToString(page[0].SequenceNumber), "last_sequence_number", aws.ToString(page[len(page)-1].SequenceNumber))
	case gaps > 0:
		r.log.WarnContext(ctx, "gaps behind the checkpoint", "group", shard.Group, "shard_id", shard.ShardID,
			"gaps", gaps, "replayed", res.Processed, "parked", res.Parked, "still_failing", res.Failed,
			"sequence_number", aws.ToString(page[0].SequenceNumber), "last_sequence_number", aws.ToString(page[len(page)-1].SequenceNumber))
	}
	if res.LowestFailedSeq == "" {
		rep.RecordsVerified += len(batch.Records)
		return aws.ToString(page[len(page)-1].SequenceNumber), "", nil
	}
	for _, rec := range page {
		seq := aws.ToString(rec.SequenceNumber)
		if seqnum.Compare(seq, res.LowestFailedSeq) >= 0 {
			break
		}
		verifiedTo = seq
	}
	for _, u := range batch.Records {
		if seqnum.Compare(u.ID.Seq, res.LowestFailedSeq) < 0 {
			rep.RecordsVerified++
		}
	}
	return verifiedTo, res.LowestFailedSeq, nil
}

// advance moves the watermark and reports whether this call moved it.
func (r *Reconciler) advance(ctx context.Context, shard recordid.Shard, seq string, rep *ShardReport) bool {
	res, err := r.cps.AdvanceWatermark(ctx, shard, seq)
	if err != nil {
		// Not fatal: the next run re-verifies from the old watermark (the ledger skips what was done).
		r.log.WarnContext(ctx, "advancing the verified watermark failed", "group", shard.Group, "shard_id", shard.ShardID, "sequence_number", seq, "error", err)
		return false
	}
	if res.Advanced || rep.Watermark == "" || seqnum.Compare(seq, rep.Watermark) > 0 {
		rep.Watermark = seq // the stored watermark is at or past seq either way
	}
	return res.Advanced
}

// lost reports and logs a span that expired from the stream before it was verified (its count
// on the checkpoint item is written by the caller, with the watermark move that passes it).
// done: every record of it is proven done (spanDone), an ExpiredUnverified span.
func (r *Reconciler) lost(ctx context.Context, rep *ShardReport, s lostSpan, done bool) {
	if done {
		rep.ExpiredUnverified++
		attrs := []any{"group", r.cfg.Group, "stream", r.cfg.Stream, "shard_id", rep.ShardID,
			"expired_after_sequence_number", s.from, "first_sequence_number_held", s.to, "metric", "ExpiredUnverified"}
		r.log.WarnContext(ctx, "records expired from the stream before the reconciler verified them; the ledger shows every one of them done: nothing was lost, the reconciler is behind", attrs...)
		return
	}
	rep.LostSpans++
	attrs := []any{"group", r.cfg.Group, "stream", r.cfg.Stream, "shard_id", rep.ShardID,
		"lost_after_sequence_number", s.from, "first_sequence_number_held", s.to, "metric", "LostToRetention"}
	if !s.toArrival.IsZero() {
		attrs = append(attrs, "first_held_arrival", s.toArrival.UTC().Format(time.RFC3339))
	}
	r.log.ErrorContext(ctx, "records expired from the stream before they were verified: any record after the old watermark and before the first record still held is lost", attrs...)
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
