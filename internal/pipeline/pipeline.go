// Package pipeline runs one batch of one shard through the user's Process function with the
// guarantees gapless is built on. The consumer function runs every Lambda batch through it; the
// reconciler runs its replays through the same code.
//
// Per batch (the in-flight marker design is in docs/consumer.md):
//
//  1. One ledger Lookup for [first, last] of the batch, and beside it (in parallel, no added
//     round trip) the run's in-flight Marker: the exact records it is about to work on and a
//     lease deadline, renewed while records run. Records already done (processed or parked by
//     anyone) are skipped and counted as duplicates avoided; failed-attempt counts come back
//     with it, and so do the other runs' markers. A live marker of a run that started earlier
//     holds its records: they fail, not attempted (ErrInFlight), as do later records of their
//     keys (a mapping run first waits a few seconds for such a marker to complete, looking the
//     range up again: WithHeldWait); a replay also leaves alone the records in the range of a mapping run's
//     marker until Batch.MappingSettled is past the run's last sign of life. A dead marker (past its lease plus DeadGrace without an
//     entry of its nonce) is a death of every record it names: an attempt for a record it named alone, suspicion
//     otherwise. When the first runnable record has died, only a prefix runs (half the
//     smallest dead run that held it; the rest fail with ErrIsolating), the marker rewritten
//     to name exactly that prefix; a record whose attempts, its own deaths included, reach
//     Config.MaxRecordAttempts is parked without running again (ErrDied).
//  2. Records not done run through Process concurrently across partition keys (at most
//     Config.MaxConcurrency keys at once) and strictly in sequence order within a key. A failure
//     stops its key for the rest of the batch: the later records of that key are failed too, but
//     they were not attempted.
//  3. Deadline: no record is started when less than Config.DeadlineMargin remains before the
//     context's deadline; Process gets a context ending half a margin before it, so the ledger and
//     checkpoint writes keep time to run. Records not started are failed, not attempted. Run
//     stops waiting a quarter margin before the deadline: a Process still running (one that
//     ignores its context) is a failed attempt (ErrAbandoned) and its late outcome is dropped.
//  4. A panic in Process is recovered into a failure of that record (value and stack logged).
//  5. A failed attempt bumps the record's attempt count; at Config.MaxRecordAttempts the record is
//     parked (internal/park) and counts as done, so its key continues. If parking fails the record
//     stays failed.
//  6. Optional business-key dedupe (Config.DedupeKey): before Process the record claims the key's
//     value; a key claimed by another record id is a duplicate: skipped, counted, recorded done.
//  7. One ledger write for what this run did, with the marker's nonce (it completes the
//     marker; a run that writes no entry deletes its marker instead), and beside it, in parallel,
//     when Batch.AdvanceCheckpoint is set, one conditional checkpoint advance to the highest
//     sequence number below which every record of the batch is done: two sequential round trips
//     per batch in all. If the ledger write fails, Run returns an error wrapping ErrLedger and the
//     caller must fail the whole batch (the checkpoint may have moved: that only makes records
//     come again, see finish). A checkpoint error or lost race is logged and counted in the
//     Result and never changes what is reported done or failed: the checkpoint does not decide
//     processing.
package pipeline

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Errors.
var (
	// ErrLedger wraps a failed ledger lookup or write: nothing of the batch may be reported done.
	ErrLedger = errors.New("pipeline: ledger unavailable")
	// ErrInvalidBatch: the batch breaks the contract of Batch (a caller bug).
	ErrInvalidBatch = errors.New("pipeline: invalid batch")
	// ErrInvalidConfig: Config.Validate failed.
	ErrInvalidConfig = errors.New("pipeline: invalid config")
	// ErrPanic wraps a panic recovered from Process.
	ErrPanic = errors.New("pipeline: process panicked")
	// ErrDeadline is the failure of records not started because the deadline was near.
	ErrDeadline = errors.New("pipeline: not started, deadline near")
	// ErrKeyBlocked is the failure of records not started because an earlier record of the same
	// partition key failed in this batch.
	ErrKeyBlocked = errors.New("pipeline: not started, an earlier record of its partition key failed")
	// ErrAbandoned is the failure of a record whose Process had not returned when the deadline
	// margin was reached: Run stopped waiting for it and counted a failed attempt.
	ErrAbandoned = errors.New("pipeline: process did not return before the deadline")
	// ErrInFlight is the failure of records not started because another live invocation's
	// in-flight marker holds them (or an earlier record of their partition key).
	ErrInFlight = errors.New("pipeline: not started, held in flight by another invocation")
	// ErrIsolating is the failure of records not started because earlier invocations died on
	// this batch and only a prefix of it runs until the culprit is found.
	ErrIsolating = errors.New("pipeline: not started, isolating a record that killed earlier invocations")
	// ErrDied is the last error of a record parked because the invocations that ran it died
	// (crash, kill, timeout): its message is what the parked message carries.
	ErrDied = errors.New("invocation died: timeout/crash")
	// ErrRecordFault: a Claimer wraps it in an error the record itself causes (a business key
	// that can never be claimed). Such a failure counts as an attempt, so the record is parked
	// after MaxRecordAttempts; any other claim error (a throttle, an outage) counts nothing.
	ErrRecordFault = errors.New("pipeline: the record's own fault")
)

// In-flight marker timing.
const (
	// DeadGrace is added to a marker's deadline before it counts as dead: clock skew between
	// the invocation that wrote it and the one reading it.
	DeadGrace = 2 * time.Second
	// NoDeadlineHold bounds the run of a Run whose context has no deadline (the CLI's replay):
	// its marker's lease is renewed at most this long.
	NoDeadlineHold = 15 * time.Minute
	// DefaultMarkerLease is how long a marker holds its records without renewal: a run longer
	// than half of it renews the marker every half lease; one that dies is taken for dead a
	// lease (plus DeadGrace) after its last renewal, not at the end of its function timeout.
	DefaultMarkerLease = 10 * time.Second
	// releaseTimeout bounds the best-effort delete of a marker no entry will complete.
	releaseTimeout = 2 * time.Second
)

// Sources of a batch, written to the ledger and to parked messages: the ledger's own names.
const (
	SourceConsumer   = dedupe.SourceConsumer
	SourceReconciler = dedupe.SourceReconciler
	SourceRedrive    = dedupe.SourceRedrive
)

// Record is one user record: a Kinesis record, or one user record of a KPL aggregate.
type Record struct {
	ID           recordid.ID
	PartitionKey string
	Data         []byte
	ArrivalTime  time.Time
	// DecodeErr marks a record that could not be decoded (malformed data, corrupt KPL aggregate):
	// it counts as a failed attempt without calling Process, so it is parked after
	// MaxRecordAttempts with its raw bytes in Data.
	DecodeErr error
}

// Batch is records of one shard in sequence order (by sequence number, then sub-index; ids
// unique), all with ID.ShardID == Shard.ShardID.
type Batch struct {
	Shard   recordid.Shard
	Records []Record
	// Source is SourceConsumer, SourceReconciler or SourceRedrive.
	Source string
	// AdvanceCheckpoint asks for the checkpoint advance at the end (the consumer sets it; replays
	// behind the checkpoint do not).
	AdvanceCheckpoint bool
	// MappingSettled (replays only; zero: off): a record inside the range of a mapping run's
	// marker is held (ErrInFlight) until MappingSettled has passed the run's end (yieldsTo):
	// for a completed run the write of its entry (MarkerState.CompletedAt); for a run that
	// never completed (crashed, hung, timed out) its deadline plus DeadGrace, since it may have
	// lived until then and the mapping retries only after. The mapping may still be retrying the record
	// (another lane moved the checkpoint past it, or a backlog made it older than the settle
	// window), and a replay running it meanwhile holds the mapping's retries instead: each of
	// those, answered in milliseconds, costs one of the mapping's MaximumRetryAttempts, and the
	// mapping gives the batch up with the killer or poison record it was isolating. The
	// reconciler sets now minus its settle window, by its own clock.
	MappingSettled time.Time
}

// ProcessFunc is the user's business logic for one record. It must be safe for concurrent use
// (records of different partition keys run at once). An error fails the record; it is retried
// by a later invocation and parked after MaxRecordAttempts failures.
type ProcessFunc func(ctx context.Context, r Record) error

// View is what the ledger knows about a batch's range.
type View interface {
	// Done reports whether id was processed or parked by an earlier invocation.
	Done(id recordid.ID) bool
	// Attempts is the number of failed attempts recorded for id (0 if none).
	Attempts(id recordid.ID) int
	// Markers are the in-flight markers overlapping the range.
	Markers() []MarkerState
}

// Entry is what one run did, written to the ledger in one call: Done (processed, parked or
// business-key duplicates, sorted), the subsets Parked and ParkedByRef, Failed (one listing is
// one failed attempt), and Nonce, the run's marker nonce, which the entry completes. The type is
// the ledger's (internal/dedupe), so what the pipeline decides is what is stored.
type Entry = dedupe.Entry

// ParkRecord is one park the ledger records: the record and its park's receipt.
type ParkRecord = dedupe.Park

// ParkView is implemented by the Views of a ledger that records parks (DedupeLedger,
// pipelinetest.Ledger): every recorded park of id.
type ParkView interface {
	ParkReceipts(id recordid.ID) []park.Receipt
}

// Marker is an invocation's in-flight marker: written before Process runs (in parallel with the
// Lookup), naming the exact records it is about to work on and its deadline. The entry of the
// same Nonce completes it; a marker past Deadline (plus DeadGrace) without one is a dead
// invocation. Its IDs are sorted. The type is the ledger's (internal/dedupe).
type Marker = dedupe.Marker

// MarkerState is a marker found by a Lookup: IDs only those inside the looked-up range, Size
// the number it names in all, Completed when an entry of its nonce exists (CompletedAt: when
// it was written; zero when not known).
type MarkerState = dedupe.MarkerState

// Ledger is the part of the ledger (internal/dedupe) the pipeline uses.
type Ledger interface {
	// Lookup returns the state of every record of shard with a sequence number in [first, last].
	// Records the ledger never saw are not done and have 0 attempts.
	Lookup(ctx context.Context, shard recordid.Shard, first, last string) (View, error)
	// Record stores one entry. When it returns nil the entry is durable.
	Record(ctx context.Context, shard recordid.Shard, e Entry) error
	// Mark writes an in-flight marker; a second Mark of the same nonce replaces it. Markers
	// are how a crash is counted: a ledger that keeps none (a no-op Mark) runs blind to deaths,
	// and says so where it is built.
	Mark(ctx context.Context, shard recordid.Shard, m Marker) error
	// Unmark deletes m (nothing when absent).
	Unmark(ctx context.Context, shard recordid.Shard, m Marker) error
}

// Claimer claims business keys (Config.DedupeKey).
type Claimer interface {
	// Claim claims key in group for id. duplicate is true when another record id owns the key;
	// a claim already owned by id (a retry) is not a duplicate.
	Claim(ctx context.Context, group, key string, id recordid.ID) (duplicate bool, err error)
}

// Checkpointer is the checkpoint mirror (internal/checkpoint).
type Checkpointer interface {
	// Advance moves shard's checkpoint to seq if it is higher. A lost race (the checkpoint is
	// already at or past seq) is Advanced=false with a nil error.
	Advance(ctx context.Context, shard recordid.Shard, seq string) (Advance, error)
}

// Advance is the outcome of Checkpointer.Advance.
type Advance struct {
	Advanced bool
	Previous string // the stored value that won a lost race, when the store knows it
}

// Parker parks records (internal/park).
type Parker interface {
	Park(ctx context.Context, r park.Record) (park.Result, error)
}

var _ Parker = (*park.Parker)(nil)

// Config is the pipeline's tuning, from the function's typed configuration.
type Config struct {
	MaxRecordAttempts int           // failures before a record is parked (>= 1)
	MaxConcurrency    int           // partition keys processed at once (>= 1)
	DeadlineMargin    time.Duration // stop starting records when less remains (>= 0)
	DedupeKey         string        // dot path of a JSON field; empty disables business-key dedupe
	LogPayloads       bool          // include payloads in failure logs
}

// DefaultConfig returns the documented defaults (docs/design.md, Environment).
func DefaultConfig() Config {
	return Config{MaxRecordAttempts: 5, MaxConcurrency: 16, DeadlineMargin: 3 * time.Second}
}

// Validate checks the ranges above.
func (c Config) Validate() error {
	switch {
	case c.MaxRecordAttempts < 1:
		return fmt.Errorf("%w: MaxRecordAttempts %d < 1", ErrInvalidConfig, c.MaxRecordAttempts)
	case c.MaxConcurrency < 1:
		return fmt.Errorf("%w: MaxConcurrency %d < 1", ErrInvalidConfig, c.MaxConcurrency)
	case c.DeadlineMargin < 0:
		return fmt.Errorf("%w: DeadlineMargin %v < 0", ErrInvalidConfig, c.DeadlineMargin)
	case c.DedupeKey != "" && (strings.HasPrefix(c.DedupeKey, ".") || strings.HasSuffix(c.DedupeKey, ".") || strings.Contains(c.DedupeKey, "..")):
		return fmt.Errorf("%w: DedupeKey %q is not a dot path", ErrInvalidConfig, c.DedupeKey)
	}
	return nil
}

// Pipeline runs batches. It is safe for concurrent use by several Runs.
type Pipeline struct {
	ledger     Ledger
	checkpoint Checkpointer
	parker     Parker
	process    ProcessFunc
	batch      *batchSink // WithBatchSink (batch.go); when set, process is unused
	claimer    Claimer
	cfg        Config
	keyPath    []string
	log        *slog.Logger
	now        func() time.Time
	lease      time.Duration
	// endedConfirm: the wait before the lane rule takes a lease-live marker for dead (progress.go).
	endedConfirm time.Duration
	// progressEvery: how much sink time a batch-sink run risks before it saves its progress (progress.go).
	progressEvery time.Duration
	// heldWait: the longest wait for a marker that holds records of a mapping run (progress.go).
	heldWait time.Duration
	holder   Holder // ON_PARK=hold-key (hold.go); nil: continue
}

// Option configures a Pipeline.
type Option func(*Pipeline)

// WithLogger sets the logger (default: discard). Log calls pass the Run context, so a handler
// that reads the Lambda request id from it (see internal/consumer) adds request_id.
func WithLogger(l *slog.Logger) Option { return func(p *Pipeline) { p.log = l } }

// WithClaimer sets the business-key claimer, required when Config.DedupeKey is set.
func WithClaimer(c Claimer) Option { return func(p *Pipeline) { p.claimer = c } }

// WithMarkerLease sets the in-flight marker lease (default DefaultMarkerLease; tests).
func WithMarkerLease(d time.Duration) Option { return func(p *Pipeline) { p.lease = d } }

// WithClock replaces time.Now for the deadline check (tests).
func WithClock(now func() time.Time) Option { return func(p *Pipeline) { p.now = now } }

// New returns a Pipeline. All of ledger, checkpointer, parker and process are required (process may
// be nil when WithBatchSink is given).
func New(ledger Ledger, checkpointer Checkpointer, parker Parker, process ProcessFunc, cfg Config, opts ...Option) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{
		ledger: ledger, checkpoint: checkpointer, parker: parker, process: process, cfg: cfg,
		log: slog.New(slog.DiscardHandler), now: time.Now, lease: DefaultMarkerLease, endedConfirm: DefaultEndedConfirm, heldWait: DefaultHeldWait,
		progressEvery: DefaultProgressEvery,
	}
	for _, o := range opts {
		o(p)
	}
	switch {
	case ledger == nil || checkpointer == nil || parker == nil || (process == nil && p.batch == nil):
		return nil, fmt.Errorf("%w: ledger, checkpointer, parker and process are all required", ErrInvalidConfig)
	case p.lease <= 0:
		return nil, fmt.Errorf("%w: marker lease %v <= 0", ErrInvalidConfig, p.lease)
	case cfg.DedupeKey != "" && p.claimer == nil:
		return nil, fmt.Errorf("%w: DedupeKey %q set without a claimer (WithClaimer)", ErrInvalidConfig, cfg.DedupeKey)
	}
	if cfg.DedupeKey != "" {
		p.keyPath = strings.Split(cfg.DedupeKey, ".")
	}
	return p, nil
}

// Failure is one record of the batch that is not done.
type Failure struct {
	ID  recordid.ID
	Err error
	// Attempted: Process ran (or the record failed to decode) and failed; counted as an attempt.
	// False for records not started (deadline, key blocked) or whose business-key claim failed
	// for a reason other than the record's own (ErrRecordFault).
	Attempted bool
	Attempts  int // attempts so far including this one, when Attempted
}

// Result says what a Run did. Every record of the batch is in exactly one of Processed,
// DuplicatesSkipped, Parked or Failed.
type Result struct {
	Records           int
	Processed         int // Process succeeded in this run
	DuplicatesSkipped int // skipped as already done (ledger) or as a business-key duplicate
	KeyDuplicates     int // the business-key part of DuplicatesSkipped
	Parked            int // parked in this run (done)
	ParkedByRef       int // the part of Parked sent without payload
	Failed            int // not done: retried later from LowestFailedSeq
	FailedAttempts    int // the part of Failed that counted as an attempt
	DeadlineSkipped   int // the part of Failed not started because the deadline was near
	ParkFailures      int // records due for parking whose SQS send failed (they stay failed)
	// LowestFailedSeq is the Kinesis sequence number of the lowest failed record ("" if none).
	LowestFailedSeq string
	// Failures lists the failed records in sequence order.
	Failures []Failure
	// Checkpoint: the sequence the run tried to advance to ("" when it did not try), whether it
	// moved, whether another writer was already at or past it, and whether the write failed.
	CheckpointSeq           string
	CheckpointAdvanced      bool
	CheckpointRaceLost      bool
	CheckpointWriteFailures int
	// LedgerWritten: the run's entry was stored (false when there was nothing to record).
	LedgerWritten bool

	// In-flight markers (see the package comment).
	InFlightSkipped     int // the part of Failed held by another live invocation's marker
	Isolated            int // the part of Failed beyond the isolation window
	Abandoned           int // the part of Failed (or Parked) whose Process did not return in time
	DeadParked          int // the part of Parked parked for deaths without running
	IsolationWindow     int // records run while isolating (0: not isolating)
	DeadMarkers         int // dead markers of other invocations seen on the batch
	LiveMarkers         int // live markers of other invocations seen on the batch
	EndedMarkers        int // the part of DeadMarkers taken for dead before their lease ran out (laneEnded)
	MarkerWriteFailures int // marker writes that failed (a crash would then go uncounted)

	// Key holds (ON_PARK=hold-key, hold.go).
	HeldParked  int // the part of Parked parked behind a held key without running
	HoldRereads int // key holds read again after the Lookup (a parked record of a key read as not held)
}

type status uint8

const (
	statusPending status = iota
	statusSkipped        // done per the ledger
	statusKeyDup         // business-key duplicate
	statusProcessed
	statusParked
	statusFailed
)

// why is the one reason an outcome carries beside its status: why a failed record was not
// done, or how a parked one came to be parked. It decides which count of the Result the
// record adds to (tally); err says the same to the caller (the sentinel named on each).
type why uint8

const (
	whyNone      why = iota
	whyHeld          // failed, not attempted: another run's live marker holds it (ErrInFlight)
	whyIsolated      // failed, not attempted: beyond the isolation window (ErrIsolating)
	whyDeadline      // failed, not attempted: not started before the deadline margin (ErrDeadline)
	whyAbandoned     // failed or parked: Process did not return before the run gave up on it (ErrAbandoned)
	whyDied          // parked without running: its attempts were deaths (ErrDied)
	whyHeldKey       // parked without running, behind its key's hold (hold.go)
)

type outcome struct {
	status    status
	why       why
	attempted bool      // Process ran (a failed attempt when failed)
	byRef     bool      // parked without its payload
	parkErr   bool      // due for parking, and the park (or its key's hold) could not be written
	parked    *parkedAs // set once parked, or once its key's hold is written (hold-key)
	attempts  int
	err       error
}

// parkedAs is what a parked record's outcome carries beyond its status.
type parkedAs struct {
	head    recordid.ID  // the head of its key's hold (hold-key; zero: none)
	receipt park.Receipt // what the ledger records of the park (park.Result.Receipt)
}

// An outcome is kept per record of the batch for the whole run: at 10,000 records every byte of
// it is 10 KB of live heap during the sends, and the collector's heap goal is twice the live heap
// (docs/benchmarks.md, "Why the batched bridge's memory stays above 3×"). What only parked records need (the hold
// head and the park receipt) is therefore behind a pointer, and the reason is one byte, not a
// flag per reason: 40 bytes an outcome (80 with both inline).

// Run processes b. Records are reported done only when Run returns a nil error; an error (always
// wrapping ErrLedger or ErrInvalidBatch) means the caller must fail the whole batch.
func (p *Pipeline) Run(ctx context.Context, b Batch) (Result, error) {
	if err := b.validate(); err != nil {
		return Result{}, err
	}
	res := Result{Records: len(b.Records)}
	if len(b.Records) == 0 {
		return res, nil
	}
	log := p.log.With("group", b.Shard.Group, "stream", b.Shard.Stream, "shard_id", b.Shard.ShardID, "source", b.Source)
	first, last := b.Records[0].ID.Seq, b.Records[len(b.Records)-1].ID.Seq

	// The marker goes out in parallel with the lookup: no sequential round trip is added.
	mk := &markerRun{p: p, shard: b.Shard, log: log}
	mk.marking = p.ledger
	// Milliseconds, as the ledger stores it: two invocations compare start times exactly.
	started := time.UnixMilli(p.now().UnixMilli())
	limit, ok := ctx.Deadline()
	if !ok {
		limit = started.Add(NoDeadlineHold)
	}
	// The marker is a lease: it reads as dead after the lease unless renewed while Process runs,
	// so the retry after a crash waits for the lease, not for the whole function timeout.
	deadline := earliest(limit, started.Add(p.lease))
	mine := Marker{Nonce: newNonce(), First: first, Last: last, IDs: batchIDs(&b), Started: started, Deadline: deadline, Source: b.Source}
	mk.mine, mk.cur, mk.limit = mine, mine, limit
	holds := p.readHolds(ctx, &b) // beside the lookup too (hold.go)
	var markWG sync.WaitGroup
	markWG.Go(func() { mk.write(ctx, mine) })
	view, err := p.ledger.Lookup(ctx, b.Shard, first, last)
	markWG.Wait()
	if mk.failed {
		res.MarkerWriteFailures++
	}
	if err != nil {
		mk.release(ctx)
		return res, fmt.Errorf("%w: lookup %s [%s, %s]: %w", ErrLedger, b.Shard, first, last, err)
	}
	view = p.confirmEnded(ctx, &b, view, mine, first, last) // progress.go
	view = p.awaitHolders(ctx, &b, view, mine, first, last)

	heads, err := holds.wait(ctx, &b, view, &res)
	if err != nil {
		mk.release(ctx)
		return res, fmt.Errorf("%w: key holds %s [%s, %s]: %w", ErrLedger, b.Shard, first, last, err)
	}
	pl := p.plan(&b, view, mine)
	applyHolds(&b, view, pl, heads)
	res.IsolationWindow, res.DeadMarkers, res.LiveMarkers, res.EndedMarkers = pl.window, pl.dead, pl.live, pl.ended
	if pl.narrow != nil {
		// Isolating or racing: the marker must name exactly what this run will attempt, or a
		// death would blame records it never ran. One more round trip, only on this path.
		mk.narrow(ctx, pl.narrow, &res)
	}
	// The marker's copy of every id of the batch is written; only a renewal writes it again,
	// and the batch holds the same ids: drop the copy (40 bytes a record of live heap during
	// the sends) and rebuild it for a renewal (markerRun.whole).
	mine.IDs = nil
	mk.mine.IDs = nil
	if len(mk.cur.IDs) == len(b.Records) {
		mk.cur.IDs, mk.whole = nil, &b
	}
	if pl.window > 0 {
		log.WarnContext(ctx, "isolating records that died with earlier invocations: running only a prefix of the batch",
			"dead_attempts", pl.headDeaths, "window", pl.window, "runnable", pl.runnable, "sequence_number", pl.headSeq)
	}

	outcomes := make([]outcome, len(b.Records))
	keys := make(map[string]int) // partition key -> index in lanes
	var lanes [][]int
	for i := range b.Records {
		r := &b.Records[i]
		switch pl.kinds[i] {
		case planSkip:
			outcomes[i].status = statusSkipped
			continue
		case planHeld:
			outcomes[i] = outcome{status: statusFailed, why: whyHeld, err: ErrInFlight}
			continue
		case planIsolated:
			outcomes[i] = outcome{status: statusFailed, why: whyIsolated, err: ErrIsolating}
			continue
		}
		k, ok := keys[r.PartitionKey]
		if !ok {
			k = len(lanes)
			keys[r.PartitionKey] = k
			lanes = append(lanes, nil)
		}
		lanes[k] = append(lanes[k], i)
	}

	if len(lanes) > 0 {
		procCtx, cancel := p.processContext(ctx)
		defer cancel()
		run := &batchRun{p: p, b: &b, view: view, plan: pl, outcomes: outcomes, log: log, running: map[int]bool{}, saved: p.now()}
		var wg sync.WaitGroup
		if p.batch != nil {
			wg.Go(func() { run.waves(ctx, procCtx, lanes) }) // the batch sink (batch.go)
		} else {
			work := make(chan []int, len(lanes))
			for _, lane := range lanes { // lanes in order of their first record: oldest work first
				work <- lane
			}
			close(work)
			for range min(p.cfg.MaxConcurrency, len(lanes)) {
				wg.Go(func() {
					for lane := range work {
						run.lane(ctx, procCtx, lane)
					}
				})
			}
		}
		stopRenew := mk.renew(ctx)
		run.wait(ctx, &wg)
		stopRenew()
	}

	entry := p.tally(&b, outcomes, &res)
	if err := p.finish(ctx, log, &b, outcomes, entry, mk, mine.Nonce, &res); err != nil {
		return res, err
	}
	return res, nil
}

func batchIDs(b *Batch) []recordid.ID {
	ids := make([]recordid.ID, len(b.Records))
	for i := range b.Records {
		ids[i] = b.Records[i].ID
	}
	return ids
}

func (b *Batch) validate() error {
	if err := b.Shard.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidBatch, err)
	}
	switch b.Source {
	case SourceConsumer, SourceReconciler, SourceRedrive:
	default:
		return fmt.Errorf("%w: source %q", ErrInvalidBatch, b.Source)
	}
	for i := range b.Records {
		id := b.Records[i].ID
		if err := seqnum.Validate(id.Seq); err != nil {
			return fmt.Errorf("%w: record %d: %v", ErrInvalidBatch, i, err)
		}
		if id.ShardID != b.Shard.ShardID {
			return fmt.Errorf("%w: record %s is not of shard %s", ErrInvalidBatch, id, b.Shard.ShardID)
		}
		if i > 0 && recordid.Compare(b.Records[i-1].ID, id) >= 0 {
			return fmt.Errorf("%w: record %s does not follow %s", ErrInvalidBatch, id, b.Records[i-1].ID)
		}
	}
	return nil
}

// businessKey extracts the value at path from a JSON object payload. Strings, numbers and
// booleans are keys; a missing field, another type, or a payload that is not JSON is "no key".
func businessKey(data []byte, path []string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	for _, name := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[name]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

func payloadForLog(data []byte) string {
	const max = 2048
	if len(data) > max {
		data = data[:max]
	}
	if utf8.Valid(data) {
		return string(data)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(data)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func newNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
