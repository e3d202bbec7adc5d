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
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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

// Sources of a batch, written to the ledger and to parked messages.
const (
	SourceConsumer   = "consumer"
	SourceReconciler = "reconciler"
	SourceRedrive    = "redrive"
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
}

// Entry is what one run did, written to the ledger in one call.
type Entry struct {
	First, Last string        // the batch's sequence range
	Done        []recordid.ID // processed, parked or business-key duplicates in this run, sorted
	Parked      []recordid.ID // subset of Done parked in this run
	ParkedByRef []recordid.ID // subset of Parked parked without payload
	Failed      []recordid.ID // failed attempts in this run (each listing is one attempt), parked ones included
	Source      string
	Nonce       string // the run's marker nonce: the entry completes the marker (empty: none)
	// Parks are the parks of this run's Parked records (their receipts), recorded with them.
	Parks []ParkRecord
}

// ParkRecord is one park the ledger records: the record and its park's receipt.
type ParkRecord struct {
	ID      recordid.ID
	Receipt park.Receipt
}

// ParkView is implemented by the Views of a ledger that records parks (DedupeLedger,
// pipelinetest.Ledger): every recorded park of id.
type ParkView interface {
	ParkReceipts(id recordid.ID) []park.Receipt
}

// Marker is an invocation's in-flight marker: written before Process runs (in parallel with the
// Lookup), naming the exact records it is about to work on and its deadline. The entry of the
// same Nonce completes it; a marker past Deadline (plus DeadGrace) without one is a dead
// invocation.
type Marker struct {
	Nonce       string
	First, Last string        // the batch's range
	IDs         []recordid.ID // sorted
	Started     time.Time
	Deadline    time.Time
	Source      string
}

// MarkerState is a marker found by a Lookup.
type MarkerState struct {
	Marker         // IDs: only those inside the looked-up range
	Size      int  // number of ids the marker names in all
	Completed bool // an entry of the same nonce exists
	// CompletedAt is when that entry was written (the run's end; zero: not known, an entry
	// written without the time).
	CompletedAt time.Time
}

// Marking is implemented by ledgers that keep in-flight markers (DedupeLedger,
// pipelinetest.Ledger). A Ledger without it runs without markers: crashes are then not counted.
type Marking interface {
	// Mark writes m; a second Mark of the same nonce replaces it.
	Mark(ctx context.Context, shard recordid.Shard, m Marker) error
	// Unmark deletes m (nothing when absent).
	Unmark(ctx context.Context, shard recordid.Shard, m Marker) error
}

// MarkerView is implemented by the Views of a Marking ledger: the markers overlapping the range.
type MarkerView interface {
	Markers() []MarkerState
}

// Ledger is the part of the ledger (internal/dedupe) the pipeline uses.
type Ledger interface {
	// Lookup returns the state of every record of shard with a sequence number in [first, last].
	// Records the ledger never saw are not done and have 0 attempts.
	Lookup(ctx context.Context, shard recordid.Shard, first, last string) (View, error)
	// Record stores one entry. When it returns nil the entry is durable.
	Record(ctx context.Context, shard recordid.Shard, e Entry) error
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

// Why a record is not started (plan.kind).
type planKind uint8

const (
	planRun      planKind = iota // run through Process (in the window)
	planSkip                     // done per the ledger
	planHeld                     // another invocation's live marker holds it (or an earlier record of its key)
	planIsolated                 // beyond the isolation window
	planDead                     // proven killer: park without running
	planHoldKey                  // its partition key is held: park behind the head without running (hold.go)
)

type outcome struct {
	status    status
	attempted bool
	byRef     bool
	parkErr   bool
	deadline  bool
	abandoned bool
	held      bool
	isolated  bool
	died      bool      // parked for dead attempts
	heldKey   bool      // parked behind its key's hold without running (hold.go)
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
// (docs/benchmarks.md, "Memory of the batched bridge"). The hold head, set only for records
// parked (its hold head and park receipt), is therefore a pointer (48 bytes an outcome instead of 80).

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
	mk.marking, _ = p.ledger.(Marking)
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
	if mk.marking != nil {
		markWG.Go(func() { mk.write(ctx, mine) })
	}
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
			outcomes[i] = outcome{status: statusFailed, held: true, err: ErrInFlight}
			continue
		case planIsolated:
			outcomes[i] = outcome{status: statusFailed, isolated: true, err: ErrIsolating}
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

// markerRun is one Run's marker: written, maybe narrowed, released when no entry completes it.
type markerRun struct {
	p       *Pipeline
	marking Marking
	shard   recordid.Shard
	mine    Marker    // as first written
	cur     Marker    // as last written (narrowed, renewed)
	limit   time.Time // the invocation's own deadline: no lease goes past it
	log     *slog.Logger
	failed  bool // a Mark call failed (the marker may or may not exist)
	gone    bool // released, or never written
	// whole, when set, is the batch whose every id cur names (cur.IDs is then nil, rebuilt
	// for each renewal).
	whole *Batch
}

// renew extends the marker's lease every half lease while records run, until stop is called
// (before the entry write or the release, so a late renewal can never recreate a released
// marker). Nothing is written for runs shorter than half a lease.
func (m *markerRun) renew(ctx context.Context) (stop func()) {
	if m.marking == nil || m.gone || !m.cur.Deadline.Before(m.limit) {
		return func() {}
	}
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(m.p.lease / 2)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mk := m.cur
			mk.Deadline = earliest(m.limit, m.p.now().Add(m.p.lease))
			if m.whole != nil {
				mk.IDs = batchIDs(m.whole)
			}
			err := m.marking.Mark(ctx, m.shard, mk)
			if m.whole != nil {
				mk.IDs = nil
			}
			if err != nil {
				m.log.WarnContext(ctx, "in-flight marker lease not renewed: another invocation may take this run for dead",
					"sequence_number", mk.First, "last_sequence_number", mk.Last, "error", err)
				continue
			}
			m.cur = mk
			if !mk.Deadline.Before(m.limit) {
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

func (m *markerRun) write(ctx context.Context, mk Marker) {
	if err := m.marking.Mark(ctx, m.shard, mk); err != nil {
		m.failed = true
		m.log.WarnContext(ctx, "in-flight marker not written: a crash of this invocation would not be counted",
			"sequence_number", mk.First, "last_sequence_number", mk.Last, "error", err)
	}
}

func (m *markerRun) narrow(ctx context.Context, ids []recordid.ID, res *Result) {
	if m.marking == nil {
		return
	}
	if len(ids) == 0 {
		m.release(ctx)
		return
	}
	mk := m.cur
	mk.IDs = ids
	m.whole = nil
	m.failed = false
	m.write(ctx, mk)
	if m.failed {
		res.MarkerWriteFailures++
	}
	m.cur = mk
}

// release deletes the marker, best effort, on a path that writes no entry with its nonce.
func (m *markerRun) release(ctx context.Context) {
	if m.marking == nil || m.gone {
		return
	}
	m.gone = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := m.marking.Unmark(ctx, m.shard, m.mine); err != nil {
		m.log.WarnContext(ctx, "in-flight marker not released: it will read as one dead attempt of its records",
			"sequence_number", m.mine.First, "last_sequence_number", m.mine.Last, "error", err)
	}
}

// plan is what the ledger's markers decide before anything runs.
type plan struct {
	kinds []planKind
	// Per record, allocated only when a dead marker names a record of the batch (nil on the
	// happy path, where they would be 24 bytes a record of live heap for the whole run; read
	// them through deathsOf, soloOf, minDeadOf):
	deaths     []int // dead markers naming the record
	solo       []int // the part of deaths whose marker named only this record
	minDead    []int // size of the smallest dead marker naming the record
	narrow     []recordid.ID
	window     int // isolation window (0: not isolating)
	runnable   int
	headDeaths int
	headSeq    string
	dead, live int                    // foreign markers seen (not completed)
	ended      int                    // the part of dead proven ended by the lane rule before their lease ran out
	heads      map[string]recordid.ID // held partition keys -> head (hold.go)
}

// plan classifies the batch's records (see the package comment, "In-flight markers").
func (p *Pipeline) plan(b *Batch, view View, mine Marker) *plan {
	n := len(b.Records)
	pl := &plan{kinds: make([]planKind, n)}
	held := make([]bool, n)
	if mv, ok := view.(MarkerView); ok {
		now := p.now()
		for _, m := range mv.Markers() {
			if m.Nonce == mine.Nonce {
				continue
			}
			if p.yieldsTo(b, m) {
				// The whole range of the mapping's batch, not only the ids the marker names: a
				// run names only what it attempts, and the rest of its batch (records not
				// started, isolated, behind a failed record of their key) is retried too.
				for i, r := range b.Records {
					if seqnum.Compare(r.ID.Seq, m.First) >= 0 && seqnum.Compare(r.ID.Seq, m.Last) <= 0 {
						held[i] = true
					}
				}
				continue
			}
			if m.Completed {
				continue
			}
			dead := !now.Before(m.Deadline.Add(DeadGrace))
			if !dead && laneEnded(m, mine, b) {
				dead = true
				pl.ended++
			}
			if dead {
				pl.dead++
			} else {
				pl.live++
				if !earlier(m.Marker, mine) {
					continue // it started after us: it yields to us, not we to it
				}
			}
			for _, id := range m.IDs {
				i, ok := b.index(id)
				if !ok {
					continue
				}
				if dead {
					if pl.deaths == nil {
						pl.deaths, pl.solo, pl.minDead = make([]int, n), make([]int, n), make([]int, n)
					}
					pl.deaths[i]++
					if pl.minDead[i] == 0 || m.Size < pl.minDead[i] {
						pl.minDead[i] = m.Size
					}
					if m.Size == 1 {
						pl.solo[i]++
					}
				} else {
					held[i] = true
				}
			}
		}
	}
	heldKeys := map[string]bool{}
	var runnable []int
	for i := range b.Records {
		r := &b.Records[i]
		switch {
		case view.Done(r.ID):
			pl.kinds[i] = planSkip
		case held[i] || heldKeys[r.PartitionKey]:
			pl.kinds[i] = planHeld
			heldKeys[r.PartitionKey] = true
		case pl.soloOf(i) > 0 && view.Attempts(r.ID)+pl.soloOf(i) >= p.cfg.MaxRecordAttempts:
			pl.kinds[i] = planDead
		default:
			runnable = append(runnable, i)
		}
	}
	pl.runnable = len(runnable)
	isolated := false
	if len(runnable) > 0 {
		head := runnable[0]
		pl.headDeaths, pl.headSeq = pl.deathsOf(head), b.Records[head].ID.Seq
		if pl.headDeaths > 0 {
			// Bisect: half of the smallest dead run that held the head, at least one record.
			w := min(len(runnable), max(1, (pl.minDeadOf(head)+1)/2))
			pl.window = w
			end := runnable[w-1]
			for _, i := range runnable[w:] {
				pl.kinds[i] = planIsolated
				isolated = true
			}
			for i := end + 1; i < n; i++ {
				if pl.kinds[i] == planDead {
					pl.kinds[i] = planIsolated // parked in key order, once the window reaches it
				}
			}
		}
	}
	anyHeld := false
	for i := range n {
		anyHeld = anyHeld || pl.kinds[i] == planHeld
	}
	if pl.window > 0 || isolated || anyHeld {
		var ids []recordid.ID
		for i := range n {
			if pl.kinds[i] == planRun {
				ids = append(ids, b.Records[i].ID)
			}
		}
		if len(ids) < len(mine.IDs) {
			pl.narrow = ids
		}
		if ids == nil {
			pl.narrow = []recordid.ID{}
		}
	}
	return pl
}

// laneEnded reports whether m, a marker whose lease has not yet run out, belongs to an
// invocation that has ended all the same: both runs are the mapping's (SourceConsumer), m
// started first, b lies inside m's batch (a retry is the same batch, a half of it or the rest
// after a partial failure) and m names a record of b. Records of one partition key go to one
// of the shard's concurrent batches (ParallelizationFactor keys them by partition-key hash and
// orders them per key), and the mapping invokes each one batch at a time: "the next batching window begins as
// soon as the previous function invocation completes"
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventsourcemapping.html#invocation-eventsourcemapping-batching),
// and a failed batch blocks its records until it is retried: "Event source mappings that read
// from streams retry the entire batch of items. Repeated errors block processing of the
// affected shard until the error is resolved or the items expire"
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-retries.html).
// So an uncompleted marker of the mapping naming a record this invocation holds is the trace
// of an invocation of the same batch stream that died: it is a death now, not after its lease.
//
// What the rule cannot tell apart is a second mapping on the same stream and group (a mapping
// being replaced) running the same record at the same moment: its live marker is then taken for
// a death. That costs this run a narrower window and a possible duplicate, and a record one
// attempt short of MaxRecordAttempts may be parked (with its payload) one attempt early; it
// never marks a record done that is not. Replays (the reconciler, redrive) are not invocations
// of a batch stream: their markers, and the consumer's as they see them, keep the lease.
func laneEnded(m MarkerState, mine Marker, b *Batch) bool {
	if m.Source != SourceConsumer || mine.Source != SourceConsumer || b.Source != SourceConsumer || !earlier(m.Marker, mine) {
		return false
	}
	if m.First == "" || m.Last == "" || seqnum.Compare(mine.First, m.First) < 0 || seqnum.Compare(mine.Last, m.Last) > 0 {
		return false
	}
	for _, id := range m.IDs {
		if _, ok := b.index(id); ok {
			return true
		}
	}
	return false
}

// earlier orders markers by start time, then nonce: of two live markers on one record, the
// earlier one runs it and the other skips it.
// index finds id among b's records (sorted by id).
func (b *Batch) index(id recordid.ID) (int, bool) {
	return slices.BinarySearchFunc(b.Records, id, func(r Record, id recordid.ID) int { return recordid.Compare(r.ID, id) })
}

// yieldsTo reports whether replay batch b leaves the records of mapping marker m to the
// mapping (Batch.MappingSettled), measured from the run's last sign of life, after which the
// mapping retries what the run failed. The marker's deadline is capped by the invocation's own
// deadline, so the deadline less the lease can be the run's start however long the run lived:
//   - a completed run's end is its entry's write (CompletedAt), taken no earlier than the
//     deadline less the lease (its start or last renewal) and no later than the deadline plus
//     DeadGrace; an entry without the time falls back to the deadline less the lease (at most
//     half a lease before its end);
//   - a run that never completed (it crashed, hung or timed out) may have lived until its
//     deadline, and the mapping retries only after the invocation ended and a new sandbox
//     started: its deadline plus DeadGrace (when the marker reads as dead).
func (p *Pipeline) yieldsTo(b *Batch, m MarkerState) bool {
	if b.MappingSettled.IsZero() || b.Source == SourceConsumer || m.Source != SourceConsumer {
		return false
	}
	switch {
	case !m.Completed:
		return !m.Deadline.Add(DeadGrace).Before(b.MappingSettled)
	case !m.CompletedAt.IsZero():
		// A run ends after its last renewal and by its deadline: a writer's clock far off (or
		// a time someone else wrote) neither releases the records earlier than the deadline
		// less the lease would nor holds them past the deadline plus DeadGrace.
		end := m.CompletedAt
		if renewed := m.Deadline.Add(-p.lease); end.Before(renewed) {
			end = renewed
		}
		if limit := m.Deadline.Add(DeadGrace); end.After(limit) {
			end = limit
		}
		return !end.Before(b.MappingSettled)
	default:
		return !m.Deadline.Add(-p.lease).Before(b.MappingSettled)
	}
}

func earlier(a, b Marker) bool {
	if !a.Started.Equal(b.Started) {
		return a.Started.Before(b.Started)
	}
	return a.Nonce < b.Nonce
}

// attempts is id's failed attempts so far: recorded failures plus deaths it suffered alone.
func (pl *plan) attempts(view View, i int, id recordid.ID) int {
	return view.Attempts(id) + pl.soloOf(i)
}

// deathsOf, soloOf and minDeadOf read the per-record death counts (0 when no dead marker named
// a record of the batch).
func (pl *plan) deathsOf(i int) int  { return at(pl.deaths, i) }
func (pl *plan) soloOf(i int) int    { return at(pl.solo, i) }
func (pl *plan) minDeadOf(i int) int { return at(pl.minDead, i) }

func at(s []int, i int) int {
	if s == nil {
		return 0
	}
	return s[i]
}

// processContext ends half a margin before ctx's deadline, leaving the rest for the writes.
func (p *Pipeline) processContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && p.cfg.DeadlineMargin > 0 {
		return context.WithDeadline(ctx, dl.Add(-p.cfg.DeadlineMargin/2))
	}
	return context.WithCancel(ctx)
}

// batchRun is the shared state of one Run's workers. Workers hand each record's outcome over
// under mu; once Run has given up waiting (abandoned), late outcomes are dropped, so a Process
// still running can never write into what Run tallies.
type batchRun struct {
	p        *Pipeline
	b        *Batch
	view     View
	plan     *plan
	outcomes []outcome
	log      *slog.Logger
	stopped  atomic.Bool // the deadline was reached: start nothing more

	mu        sync.Mutex
	abandoned bool
	running   map[int]bool // records whose Process (or parking) is under way

	// Batch-sink progress (progress.go), touched by the waves loop only.
	saved   time.Time // the run's start or its last saving of progress
	unsaved []int     // records sent since then
}

// wait waits for the workers, but not past a quarter margin before ctx's deadline: a Process
// that ignores its context must not turn into a function timeout that loses the whole batch.
func (r *batchRun) wait(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	dl, ok := ctx.Deadline()
	if !ok {
		<-done
		return
	}
	t := time.NewTimer(max(dl.Sub(r.p.now())-r.p.cfg.DeadlineMargin/4, 0))
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	r.mu.Lock()
	r.abandoned = true
	running := r.running
	r.running = nil
	r.mu.Unlock()
	for i := range r.outcomes {
		o := &r.outcomes[i]
		if o.status != statusPending {
			continue
		}
		if !running[i] {
			*o = outcome{status: statusFailed, err: ErrDeadline, deadline: true}
			continue
		}
		rec := &r.b.Records[i]
		*o = outcome{abandoned: true, attempted: true, err: ErrAbandoned, attempts: r.plan.attempts(r.view, i, rec.ID) + 1}
		r.p.recordLogger(r.log, rec).ErrorContext(ctx, "process did not return before the deadline: counted as a failed attempt and abandoned",
			"attempts", o.attempts, "max_attempts", r.p.cfg.MaxRecordAttempts)
		r.finishFailed(ctx, rec, o)
	}
}

func (r *batchRun) isAbandoned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abandoned
}

// begin marks record i as running; false when Run has abandoned the batch.
func (r *batchRun) begin(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abandoned {
		return false
	}
	r.running[i] = true
	return true
}

// hand stores record i's outcome; false when Run has abandoned the batch (the outcome is dropped).
func (r *batchRun) hand(i int, o outcome) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abandoned {
		return false
	}
	delete(r.running, i)
	r.outcomes[i] = o
	return true
}

func (r *batchRun) lane(ctx, procCtx context.Context, lane []int) {
	blocked := false
	var behind recordid.ID // hold-key: the head this lane's key is held behind
	for _, i := range lane {
		var o outcome
		ran := false
		switch {
		case blocked:
			o.status, o.err = statusFailed, ErrKeyBlocked
		case r.isHeld(i, behind):
			if !r.begin(i) {
				return
			}
			r.parkHeld(ctx, &r.b.Records[i], i, behind, &o)
			ran = true
		case r.plan.kinds[i] == planDead:
			if !r.begin(i) {
				return
			}
			r.parkDead(ctx, &r.b.Records[i], i, &o)
			ran = true
		case r.deadlineNear(ctx):
			o.status, o.err, o.deadline = statusFailed, ErrDeadline, true // sticky: the rest follow
		default:
			if !r.begin(i) {
				return
			}
			r.record(ctx, procCtx, &r.b.Records[i], i, &o)
			ran = true
		}
		if !r.hand(i, o) {
			return
		}
		if ran {
			blocked = o.status == statusFailed
			behind = r.nextBehind(&o, behind)
		}
	}
}

func (r *batchRun) deadlineNear(ctx context.Context) bool {
	if r.stopped.Load() {
		return true
	}
	near := ctx.Err() != nil
	if dl, ok := ctx.Deadline(); ok && dl.Sub(r.p.now()) < r.p.cfg.DeadlineMargin {
		near = true
	}
	if near && !r.stopped.Swap(true) {
		r.log.WarnContext(ctx, "deadline near: starting no more records", "margin", r.p.cfg.DeadlineMargin.String())
	}
	return near
}

// parkDead parks a record whose attempts were used up by invocations that died running it.
func (r *batchRun) parkDead(ctx context.Context, rec *Record, i int, o *outcome) {
	o.attempted, o.died, o.err = false, true, ErrDied
	o.attempts = r.plan.attempts(r.view, i, rec.ID)
	r.p.recordLogger(r.log, rec).ErrorContext(ctx, "record killed the invocations that ran it: parking it without running it again",
		"attempts", o.attempts, "dead_attempts", r.plan.deathsOf(i), "max_attempts", r.p.cfg.MaxRecordAttempts)
	r.finishFailed(ctx, rec, o)
	if o.status == statusFailed {
		o.died = false
	}
}

// record runs one record and sets its outcome.
func (r *batchRun) record(ctx, procCtx context.Context, rec *Record, i int, o *outcome) {
	p := r.p
	log := r.log // with the record's attributes, built only when a line is written
	if r.log.Enabled(ctx, slog.LevelDebug) || rec.DecodeErr != nil {
		log = r.p.recordLogger(r.log, rec)
	}
	err := rec.DecodeErr
	if err == nil {
		if p.keyPath != nil {
			if key, ok := businessKey(rec.Data, p.keyPath); !ok {
				log.DebugContext(ctx, "no business key in payload: processing without key dedupe", "dedupe_key", p.cfg.DedupeKey)
			} else {
				dup, cerr := p.claimer.Claim(procCtx, r.b.Shard.Group, key, rec.ID)
				switch {
				case errors.Is(cerr, ErrRecordFault):
					// The record's own fault: an attempt like a failed Process (counted below),
					// so the record is parked after the maximum instead of blocking its key.
					err = fmt.Errorf("claim business key: %w", cerr)
				case cerr != nil:
					// Not the record's fault: fail it (retried later) without counting an attempt,
					// and never skip it.
					r.p.recordLogger(r.log, rec).ErrorContext(ctx, "business-key claim failed: record left failed", "error", cerr)
					o.status, o.err = statusFailed, fmt.Errorf("claim business key: %w", cerr)
					return
				case dup:
					r.p.recordLogger(r.log, rec).InfoContext(ctx, "business-key duplicate skipped", "dedupe_key", p.cfg.DedupeKey)
					o.status = statusKeyDup
					return
				}
			}
		}
		if err == nil {
			if err = p.call(procCtx, r.log, rec); err == nil {
				o.status = statusProcessed
				return
			}
		}
	}
	o.attempted, o.err = true, err
	o.attempts = r.plan.attempts(r.view, i, rec.ID) + 1
	r.finishFailed(ctx, rec, o)
}

// finishFailed logs a failed attempt and parks the record when its attempts are used up.
func (r *batchRun) finishFailed(ctx context.Context, rec *Record, o *outcome) {
	p := r.p
	log := r.p.recordLogger(r.log, rec)
	err := o.err
	attrs := []any{"attempts", o.attempts, "max_attempts", p.cfg.MaxRecordAttempts, "error", err.Error()}
	if p.cfg.LogPayloads {
		attrs = append(attrs, "data", payloadForLog(rec.Data))
	}
	if o.attempts < p.cfg.MaxRecordAttempts || (!o.abandoned && r.isAbandoned()) {
		// (A worker returning after Run gave up on it: Run has counted this attempt and parks
		// the record itself; this outcome is dropped.)
		log.WarnContext(ctx, "record failed", attrs...)
		o.status = statusFailed
		return
	}
	heldBehind, ok := r.holdHead(ctx, rec, o) // hold-key: the hold is written before the park
	if !ok {
		return
	}
	pr, perr := p.parker.Park(ctx, park.Record{
		ID: rec.ID, Shard: r.b.Shard, PartitionKey: rec.PartitionKey, ArrivalTime: rec.ArrivalTime,
		Data: rec.Data, Attempts: o.attempts, LastError: err.Error(), Source: r.b.Source, HeldBehind: heldBehind,
		GroupPerRecord: p.holder != nil, // the hold orders a held key's records (park.Record)
	})
	switch {
	case perr != nil:
		log.ErrorContext(ctx, "record failed and could not be parked: left failed", append(attrs, "park_error", perr.Error())...)
		o.status, o.parkErr = statusFailed, true
	default:
		log.WarnContext(ctx, "record parked", append(attrs, "message_id", pr.MessageID, "park_id", pr.Receipt.ParkID)...)
		o.status = statusParked
		if o.parked == nil {
			o.parked = &parkedAs{}
		}
		o.parked.receipt = pr.Receipt
	}
}

// recordLogger adds a record's attributes to l; the partition key as park.KeyLogAttrs logs it
// (as is only with Config.LogPayloads, otherwise a short digest).
func (p *Pipeline) recordLogger(l *slog.Logger, rec *Record) *slog.Logger {
	return l.With("sequence_number", rec.ID.Seq, "sub_sequence_number", rec.ID.Sub).With(park.KeyLogAttrs(rec.PartitionKey, p.cfg.LogPayloads)...)
}

// call runs Process, turning a panic into an error.
func (p *Pipeline) call(ctx context.Context, log *slog.Logger, rec *Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			p.recordLogger(log, rec).ErrorContext(ctx, "process panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", ErrPanic, v)
		}
	}()
	return p.process(ctx, *rec)
}

// tally fills res from the outcomes and returns the ledger entry.
func (p *Pipeline) tally(b *Batch, outcomes []outcome, res *Result) Entry {
	e := Entry{First: b.Records[0].ID.Seq, Last: b.Records[len(b.Records)-1].ID.Seq, Source: b.Source}
	for i, o := range outcomes {
		id := b.Records[i].ID
		switch o.status {
		case statusSkipped:
			res.DuplicatesSkipped++
		case statusKeyDup:
			res.DuplicatesSkipped++
			res.KeyDuplicates++
			e.Done = append(e.Done, id)
		case statusProcessed:
			res.Processed++
			e.Done = append(e.Done, id)
		case statusParked:
			res.Parked++
			e.Done = append(e.Done, id)
			e.Parked = append(e.Parked, id)
			if o.parked != nil && o.parked.receipt.ParkID != "" {
				// The park itself, in the entry that counts the record done (the ledger is the
				// authority for what was parked: redrive acts only on messages it confirms).
				e.Parks = append(e.Parks, ParkRecord{ID: id, Receipt: o.parked.receipt})
			}
			switch {
			case o.heldKey:
				res.HeldParked++ // not run: no attempt
			case o.died:
				res.DeadParked++ // its last attempt was a death, counted by the marker
			default:
				e.Failed = append(e.Failed, id) // its last attempt failed too
			}
			if o.abandoned {
				res.Abandoned++
			}
			if o.byRef {
				res.ParkedByRef++
				e.ParkedByRef = append(e.ParkedByRef, id)
			}
		default: // statusFailed (statusPending cannot survive the lanes)
			res.Failed++
			if res.LowestFailedSeq == "" {
				res.LowestFailedSeq = id.Seq
			}
			if o.attempted {
				res.FailedAttempts++
				e.Failed = append(e.Failed, id)
			}
			if o.deadline {
				res.DeadlineSkipped++
			}
			switch {
			case o.held:
				res.InFlightSkipped++
			case o.isolated:
				res.Isolated++
			case o.abandoned:
				res.Abandoned++
			}
			if o.parkErr {
				res.ParkFailures++
			}
			res.Failures = append(res.Failures, Failure{ID: id, Err: o.err, Attempted: o.attempted, Attempts: o.attempts})
		}
	}
	return e
}

// advance moves the checkpoint to the highest sequence number below which every record of the
// batch is done. Its outcome is logged and counted, never acted on.
func (p *Pipeline) advance(ctx context.Context, log *slog.Logger, b *Batch, outcomes []outcome, res *Result) {
	target := ""
	for i := 0; i < len(b.Records); {
		seq, done := b.Records[i].ID.Seq, true
		for ; i < len(b.Records) && b.Records[i].ID.Seq == seq; i++ { // sub-records share a sequence
			if outcomes[i].status == statusFailed {
				done = false
			}
		}
		if !done {
			break
		}
		target = seq
	}
	if target == "" {
		return
	}
	res.CheckpointSeq = target
	adv, err := p.checkpoint.Advance(ctx, b.Shard, target)
	switch {
	case err != nil:
		res.CheckpointWriteFailures++
		log.WarnContext(ctx, "checkpoint write failed (counted; records are unaffected)", "sequence_number", target, "error", err)
	case !adv.Advanced:
		res.CheckpointRaceLost = true
		log.InfoContext(ctx, "checkpoint race lost: another writer is at or past this batch (records are unaffected)",
			"sequence_number", target, "stored_sequence_number", adv.Previous)
	default:
		res.CheckpointAdvanced = true
	}
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
