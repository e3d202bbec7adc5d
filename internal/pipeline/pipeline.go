// Package pipeline runs one batch of one shard through the user's Process function with the
// guarantees gapless is built on. The consumer function runs every Lambda batch through it; the
// reconciler runs its replays through the same code.
//
// Per batch (SPEC "Consumer invocation"):
//
//  1. One ledger Lookup for [first, last] of the batch: records already done (processed or
//     parked by anyone) are skipped and counted as duplicates avoided; failed-attempt counts come
//     back with it.
//  2. Records not done run through Process concurrently across partition keys (at most
//     Config.MaxConcurrency keys at once) and strictly in sequence order within a key. A failure
//     stops its key for the rest of the batch: the later records of that key are failed too, but
//     they were not attempted.
//  3. Deadline: no record is started when less than Config.DeadlineMargin remains before the
//     context's deadline; Process gets a context ending half a margin before it, so the ledger and
//     checkpoint writes keep time to run. Records not started are failed, not attempted.
//  4. A panic in Process is recovered into a failure of that record (value and stack logged).
//  5. A failed attempt bumps the record's attempt count; at Config.MaxRecordAttempts the record is
//     parked (internal/park) and counts as done, so its key continues. If parking fails the record
//     stays failed.
//  6. Optional business-key dedupe (Config.DedupeKey): before Process the record claims the key's
//     value; a key claimed by another record id is a duplicate: skipped, counted, recorded done.
//  7. One ledger write for what this run did. If it fails, Run returns an error wrapping ErrLedger
//     and the caller must fail the whole batch. Then, when Batch.AdvanceCheckpoint is set, one
//     conditional checkpoint advance to the highest sequence number below which every record of
//     the batch is done. A checkpoint error or lost race is logged and counted in the Result and
//     never changes what is reported done or failed: the checkpoint does not decide processing.
package pipeline

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
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
	claimer    Claimer
	cfg        Config
	keyPath    []string
	log        *slog.Logger
	now        func() time.Time
}

// Option configures a Pipeline.
type Option func(*Pipeline)

// WithLogger sets the logger (default: discard). Log calls pass the Run context, so a handler
// that reads the Lambda request id from it (see internal/consumer) adds request_id.
func WithLogger(l *slog.Logger) Option { return func(p *Pipeline) { p.log = l } }

// WithClaimer sets the business-key claimer, required when Config.DedupeKey is set.
func WithClaimer(c Claimer) Option { return func(p *Pipeline) { p.claimer = c } }

// WithClock replaces time.Now for the deadline check (tests).
func WithClock(now func() time.Time) Option { return func(p *Pipeline) { p.now = now } }

// New returns a Pipeline. All of ledger, checkpointer, parker and process are required.
func New(ledger Ledger, checkpointer Checkpointer, parker Parker, process ProcessFunc, cfg Config, opts ...Option) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{
		ledger: ledger, checkpoint: checkpointer, parker: parker, process: process, cfg: cfg,
		log: slog.New(slog.DiscardHandler), now: time.Now,
	}
	for _, o := range opts {
		o(p)
	}
	switch {
	case ledger == nil || checkpointer == nil || parker == nil || process == nil:
		return nil, fmt.Errorf("%w: ledger, checkpointer, parker and process are all required", ErrInvalidConfig)
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
	// False for records not started (deadline, key blocked) or whose business-key claim failed.
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

type outcome struct {
	status    status
	attempted bool
	byRef     bool
	parkErr   bool
	deadline  bool
	attempts  int
	err       error
}

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
	view, err := p.ledger.Lookup(ctx, b.Shard, first, last)
	if err != nil {
		return res, fmt.Errorf("%w: lookup %s [%s, %s]: %w", ErrLedger, b.Shard, first, last, err)
	}

	outcomes := make([]outcome, len(b.Records))
	keys := make(map[string]int) // partition key -> index in lanes
	var lanes [][]int
	for i := range b.Records {
		r := &b.Records[i]
		if view.Done(r.ID) {
			outcomes[i].status = statusSkipped
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
		run := &batchRun{p: p, b: &b, view: view, outcomes: outcomes, log: log}
		work := make(chan []int)
		var wg sync.WaitGroup
		for range min(p.cfg.MaxConcurrency, len(lanes)) {
			wg.Go(func() {
				for lane := range work {
					run.lane(ctx, procCtx, lane)
				}
			})
		}
		for _, lane := range lanes { // lanes in order of their first record: oldest work first
			work <- lane
		}
		close(work)
		wg.Wait()
	}

	entry := p.tally(&b, outcomes, &res)
	if len(entry.Done)+len(entry.Failed) > 0 {
		if err := p.ledger.Record(ctx, b.Shard, entry); err != nil {
			log.ErrorContext(ctx, "ledger write failed: the whole batch will be retried",
				"sequence_number", first, "last_sequence_number", last, "error", err)
			return res, fmt.Errorf("%w: record %s [%s, %s]: %w", ErrLedger, b.Shard, first, last, err)
		}
		res.LedgerWritten = true
	}
	if b.AdvanceCheckpoint {
		p.advance(ctx, log, &b, outcomes, &res)
	}
	return res, nil
}

// processContext ends half a margin before ctx's deadline, leaving the rest for the writes.
func (p *Pipeline) processContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && p.cfg.DeadlineMargin > 0 {
		return context.WithDeadline(ctx, dl.Add(-p.cfg.DeadlineMargin/2))
	}
	return context.WithCancel(ctx)
}

// batchRun is the shared state of one Run's workers. Each record index is written by exactly
// one worker (its partition key's lane), so outcomes needs no lock.
type batchRun struct {
	p        *Pipeline
	b        *Batch
	view     View
	outcomes []outcome
	log      *slog.Logger
	stopped  atomic.Bool // the deadline was reached: start nothing more
}

func (r *batchRun) lane(ctx, procCtx context.Context, lane []int) {
	blocked := false
	for _, i := range lane {
		o := &r.outcomes[i]
		switch {
		case blocked:
			o.status, o.err = statusFailed, ErrKeyBlocked
			continue
		case r.deadlineNear(ctx):
			o.status, o.err, o.deadline = statusFailed, ErrDeadline, true // sticky: the rest follow
			continue
		}
		r.record(ctx, procCtx, &r.b.Records[i], o)
		blocked = o.status == statusFailed
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

// record runs one record and sets its outcome.
func (r *batchRun) record(ctx, procCtx context.Context, rec *Record, o *outcome) {
	p := r.p
	log := r.log // with the record's attributes, built only when a line is written
	if r.log.Enabled(ctx, slog.LevelDebug) || rec.DecodeErr != nil {
		log = recordLogger(r.log, rec)
	}
	err := rec.DecodeErr
	if err == nil {
		if p.keyPath != nil {
			if key, ok := businessKey(rec.Data, p.keyPath); !ok {
				log.DebugContext(ctx, "no business key in payload: processing without key dedupe", "dedupe_key", p.cfg.DedupeKey)
			} else {
				dup, cerr := p.claimer.Claim(procCtx, r.b.Shard.Group, key, rec.ID)
				if cerr != nil {
					// Not the record's fault: fail it (retried later) without counting an attempt,
					// and never skip it.
					recordLogger(r.log, rec).ErrorContext(ctx, "business-key claim failed: record left failed", "error", cerr)
					o.status, o.err = statusFailed, fmt.Errorf("claim business key: %w", cerr)
					return
				}
				if dup {
					recordLogger(r.log, rec).InfoContext(ctx, "business-key duplicate skipped", "dedupe_key", p.cfg.DedupeKey)
					o.status = statusKeyDup
					return
				}
			}
		}
		if err = p.call(procCtx, r.log, rec); err == nil {
			o.status = statusProcessed
			return
		}
	}
	log = recordLogger(r.log, rec)
	o.attempted, o.err = true, err
	o.attempts = r.view.Attempts(rec.ID) + 1
	attrs := []any{"attempts", o.attempts, "max_attempts", p.cfg.MaxRecordAttempts, "error", err.Error()}
	if p.cfg.LogPayloads {
		attrs = append(attrs, "data", payloadForLog(rec.Data))
	}
	if o.attempts < p.cfg.MaxRecordAttempts {
		log.WarnContext(ctx, "record failed", attrs...)
		o.status = statusFailed
		return
	}
	pr, perr := p.parker.Park(ctx, park.Record{
		ID: rec.ID, Shard: r.b.Shard, PartitionKey: rec.PartitionKey, ArrivalTime: rec.ArrivalTime,
		Data: rec.Data, Attempts: o.attempts, LastError: err.Error(), Source: r.b.Source,
	})
	switch {
	case perr != nil:
		log.ErrorContext(ctx, "record failed and could not be parked: left failed", append(attrs, "park_error", perr.Error())...)
		o.status, o.parkErr = statusFailed, true
	default:
		log.WarnContext(ctx, "record parked", append(attrs, "message_id", pr.MessageID)...)
		o.status = statusParked
	}
}

func recordLogger(l *slog.Logger, rec *Record) *slog.Logger {
	return l.With("sequence_number", rec.ID.Seq, "sub_sequence_number", rec.ID.Sub, "partition_key", rec.PartitionKey)
}

// call runs Process, turning a panic into an error.
func (p *Pipeline) call(ctx context.Context, log *slog.Logger, rec *Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			recordLogger(log, rec).ErrorContext(ctx, "process panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
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
			e.Failed = append(e.Failed, id) // its last attempt failed too
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
