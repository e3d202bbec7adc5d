// Package consumer is the Lambda handler behind the Kinesis event-source mapping: it validates
// and de-aggregates the event, runs it through the batch pipeline, and answers Lambda with a
// partial batch response (ReportBatchItemFailures) naming the lowest failed sequence number.
//
// Response rules (Lambda developer guide, "Configuring partial batch response with Kinesis"):
// a nil or empty batchItemFailures is complete success; an empty or null itemIdentifier is
// complete failure; with several failures Lambda checkpoints at the lowest and retries from it.
// This handler always returns either nil (all records done) or exactly one failure whose
// identifier is a sequence number of the event, never an empty string.
package consumer

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// Metric names written after every invocation (namespace Gapless, dimension Group).
const (
	MetricRecordsProcessed        = "RecordsProcessed"
	MetricDuplicatesSkipped       = "DuplicatesSkipped"
	MetricRecordsFailed           = "RecordsFailed"
	MetricRecordsParked           = "RecordsParked"
	MetricRecordsParkedByRef      = "RecordsParkedByRef"
	MetricCheckpointWriteFailures = "CheckpointWriteFailures"
	MetricCheckpointRacesLost     = "CheckpointRacesLost"
	MetricLedgerWriteFailures     = "LedgerWriteFailures"
	MetricRecordsRejected         = "RecordsRejected"
	// MetricRecordsOfAnotherStream counts records refused because their eventSourceARN names
	// another stream than STREAM_ARN (see WithStreamARN).
	MetricRecordsOfAnotherStream = "RecordsOfAnotherStream"
	// In-flight markers (docs/consumer.md): records skipped because another live invocation
	// holds them, records not run while isolating a killer, calls abandoned at the deadline,
	// records parked because invocations died running them, dead markers seen, and marker
	// writes that failed.
	MetricRecordsHeld         = "RecordsHeld"
	MetricRecordsIsolated     = "RecordsIsolated"
	MetricRecordsAbandoned    = "RecordsAbandoned"
	MetricRecordsParkedDead   = "RecordsParkedDead"
	MetricDeadInvocations     = "DeadInvocations"
	MetricMarkerWriteFailures = "MarkerWriteFailures"
	// MetricRecordsDeferred counts the Kinesis records of an event left out of its batch by the
	// bound on user records (DefaultMaxBatchUserRecords): Lambda redelivers them.
	MetricRecordsDeferred = "RecordsDeferred"
)

// Handler handles Kinesis events for one consumer group.
type Handler struct {
	pipeline    *pipeline.Pipeline
	group       string
	log         *slog.Logger
	metrics     *metrics.Emitter
	logPayloads bool
	stream      string         // STREAM_NAME, "" when not configured (see buildPlan)
	streamARN   string         // STREAM_ARN, "" when not configured (see WithStreamARN)
	filter      *filter.Filter // RECORD_FILTER (see WithFilter)
	maxUsers    int            // user records per batch (WithMaxBatchUserRecords)
}

// WithMaxBatchUserRecords bounds the user records of one batch (default
// DefaultMaxBatchUserRecords; tests). Records past the bound are redelivered, not attempted.
func WithMaxBatchUserRecords(n int) Option { return func(h *Handler) { h.maxUsers = n } }

// Option configures a Handler.
type Option func(*Handler)

// WithMetrics sets the EMF emitter (default: none). The Lambda main passes
// metrics.New(os.Stdout, metrics.Namespace, []metrics.Dimension{{metrics.DimensionGroup, group}}).
func WithMetrics(e *metrics.Emitter) Option { return func(h *Handler) { h.metrics = e } }

// WithLogPayloads includes payloads in the log lines about rejected records (LOG_PAYLOADS).
func WithLogPayloads(on bool) Option { return func(h *Handler) { h.logPayloads = on } }

// WithStream names the stream the function's mapping reads (STREAM_NAME): events whose
// eventSourceARN names no stream (SAM's sample events) are taken to come from it, and records
// of another stream are rejected, naming both.
func WithStream(name string) Option { return func(h *Handler) { h.stream = name } }

// WithStreamARN names, by full ARN, the stream the function's mapping reads (STREAM_ARN): a
// record whose eventSourceARN names another stream (a same-named stream of another account or
// region included; an enhanced fan-out consumer's ARN counts as its stream's) is refused. It
// is not the group's record, so it is left out of the batch: never processed, never written to
// the ledger or the checkpoint mirror (its shard id and sequence number could equal one of the
// group's own records, which the ledger would then skip), and it does not fail the batch: no
// retry can make it the group's, and failing would hold the shard of whoever sent it (another
// mapping on this function, or a direct invocation). Each is an ERROR line and counted
// (RecordsOfAnotherStream). Records whose ARN names no stream are left to WithStream's rule.
func WithStreamARN(arn string) Option { return func(h *Handler) { h.streamARN = arn } }

// NewHandler returns the handler for group (GAPLESS_GROUP). logger should be NewLogger's (JSON,
// request_id from the Lambda context); nil discards logs.
func NewHandler(p *pipeline.Pipeline, group string, logger *slog.Logger, opts ...Option) *Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{pipeline: p, group: group, log: logger}
	for _, o := range opts {
		o(h)
	}
	return h
}

// HandleJSON is the handler registered with lambda.Start: it decodes the payload record by
// record (see decodeEvent), so one malformed record cannot make the whole invocation fail
// before any record is looked at. It returns an error only for a payload that is not a JSON
// object, or when no record has a sequence number to report (ErrUnreportable).
func (h *Handler) HandleJSON(ctx context.Context, raw json.RawMessage) (events.KinesisEventResponse, error) {
	recs, err := decodeEvent(raw)
	if err != nil {
		h.log.ErrorContext(ctx, "invocation payload is not a Kinesis event", "group", h.group, "error", err)
		return events.KinesisEventResponse{}, err
	}
	return h.handle(ctx, &recs)
}

// Handle handles an event already decoded by the Lambda runtime.
func (h *Handler) Handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	recs := fromEvent(ev)
	return h.handle(ctx, &recs)
}

// handle runs the event's records; it drops *recs once the batch is built.
func (h *Handler) handle(ctx context.Context, recs *[]inRecord) (events.KinesisEventResponse, error) {
	start := time.Now()
	foreign := h.refuseForeign(ctx, recs)
	maxUsers := h.maxUsers
	if maxUsers <= 0 {
		maxUsers = DefaultMaxBatchUserRecords
	}
	pl := buildPlanBounded(h.group, h.stream, *recs, maxUsers)
	// The batch holds what the pipeline needs (sequence number, key, data): the event's records
	// (event ids, ARNs: ~300 bytes a record) are garbage from here on, before the sink's garbage
	// sizes the heap (docs/benchmarks.md, "Memory for one large batch").
	n := len(*recs)
	*recs = nil
	b := &pl.batch
	log := h.log.With("group", h.group, "stream", b.Shard.Stream, "shard_id", b.Shard.ShardID)
	b.Records = h.unfiltered(ctx, log, b.Records)
	if n == 0 {
		if foreign > 0 {
			h.emit(ctx, log, b, pipeline.Result{}, false, 0, 0, foreign)
			log.InfoContext(ctx, "no record of the event is of this function's stream: nothing to do", "refused", foreign)
		} else {
			log.InfoContext(ctx, "empty event: nothing to do")
		}
		return events.KinesisEventResponse{}, nil
	}
	for _, rj := range pl.rejected {
		attrs := []any{"position", rj.rec.pos, "sequence_number", rj.rec.seq, "event_id", rj.rec.eventID,
			"event_source_arn", rj.rec.arn, "reason", rj.reason, "reported_failure", pl.firstID}
		if h.logPayloads {
			attrs = append(attrs, "data", string(rj.rec.data))
		}
		log.ErrorContext(ctx, "record rejected: not processable in this batch; failing the batch from its first record so Lambda retries it", attrs...)
	}
	for _, r := range pl.dropped {
		log.WarnContext(ctx, "sequence number delivered twice in one event with identical content: processed once", "sequence_number", r.seq, "position", r.pos)
	}
	if pl.unordered {
		log.WarnContext(ctx, "event records were not in sequence order: sorted before processing")
	}
	if pl.cutAt != "" {
		log.WarnContext(ctx, "batch bound reached: the rest of the event is left for Lambda to redeliver, not attempted",
			"max_user_records", maxUsers, "user_records", len(b.Records), "records_left_out", pl.cut, "first_left_out", pl.cutAt)
	}
	for _, r := range b.Records {
		if r.DecodeErr != nil {
			log.ErrorContext(ctx, "malformed record: counted as a failed attempt (parked after the maximum)",
				append([]any{"sequence_number", r.ID.Seq, "error", r.DecodeErr.Error()}, park.KeyLogAttrs(r.PartitionKey, h.logPayloads)...)...)
		}
	}

	var res pipeline.Result
	var runErr error
	if len(b.Records) > 0 {
		res, runErr = h.pipeline.Run(ctx, *b)
	}
	failure := ""
	switch {
	case runErr != nil:
		// The ledger did not record the batch: nothing may be reported done. Report the first
		// record so Lambda redelivers all of it.
		failure = pl.firstID
		log.ErrorContext(ctx, "batch failed as a whole", "error", runErr, "reported_failure", failure)
	case len(pl.rejected) > 0:
		failure = pl.firstID
	case res.LowestFailedSeq != "":
		failure = res.LowestFailedSeq // below cutAt: every record of the batch is
	case pl.cutAt != "":
		failure = pl.cutAt
	}
	h.emit(ctx, log, b, res, runErr != nil, len(pl.rejected), pl.cut, foreign)

	attrs := []any{"records", n, "user_records", len(b.Records), "processed", res.Processed,
		"duplicates_skipped", res.DuplicatesSkipped, "failed", res.Failed, "parked", res.Parked,
		"parked_by_ref", res.ParkedByRef, "rejected", len(pl.rejected), "malformed", pl.malformed,
		"checkpoint", res.CheckpointSeq, "checkpoint_advanced", res.CheckpointAdvanced,
		"checkpoint_race_lost", res.CheckpointRaceLost, "reported_failure", failure,
		"held", res.InFlightSkipped, "isolated", res.Isolated, "abandoned", res.Abandoned,
		"dead_markers", res.DeadMarkers, "isolation_window", res.IsolationWindow, "other_stream_refused", foreign,
		"duration_ms", time.Since(start).Milliseconds()}
	if failure == "" && (runErr != nil || len(pl.rejected) > 0 || res.Failed > 0) {
		// Only possible when no record of the event has any sequence number: return an error so
		// Lambda retries the invocation whole rather than report an empty identifier (which it
		// would also read as total failure, but an error says why).
		log.ErrorContext(ctx, "batch fails but no record has a sequence number to report: failing the invocation", attrs...)
		return events.KinesisEventResponse{}, ErrUnreportable
	}
	if failure == "" {
		log.InfoContext(ctx, "batch done", attrs...)
		return events.KinesisEventResponse{}, nil // nil BatchItemFailures marshals to null: complete success
	}
	log.WarnContext(ctx, "batch partially failed: Lambda retries from the reported sequence number", attrs...)
	return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: failure}}}, nil
}

// refuseForeign removes from *recs the records whose eventSourceARN names another stream than
// the configured STREAM_ARN (see WithStreamARN), logging each, and returns how many.
func (h *Handler) refuseForeign(ctx context.Context, recs *[]inRecord) int {
	if h.streamARN == "" {
		return 0
	}
	kept := (*recs)[:0]
	refused := 0
	for _, r := range *recs {
		if _, names := streamOf(r.arn); names && streamARNOf(r.arn) != h.streamARN {
			refused++
			h.log.ErrorContext(ctx, "record of another stream refused: not processed, not recorded, not failed",
				"group", h.group, "event_source_arn", clip(r.arn), "stream_arn", h.streamARN,
				"sequence_number", clip(r.seq), "event_id", clip(r.eventID), "metric", MetricRecordsOfAnotherStream)
			continue
		}
		kept = append(kept, r)
	}
	*recs = kept
	return refused
}

func (h *Handler) emit(ctx context.Context, log *slog.Logger, b *pipeline.Batch, res pipeline.Result, ledgerFailed bool, rejected, cut, foreign int) {
	if h.metrics == nil {
		return
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	failed := res.Failed
	if ledgerFailed {
		// Nothing of the batch is recorded done: all of it will be redelivered.
		res = pipeline.Result{}
		failed = len(b.Records)
	}
	err := h.metrics.Emit(
		metrics.Metric{Name: MetricRecordsProcessed, Value: float64(res.Processed)},
		metrics.Metric{Name: MetricDuplicatesSkipped, Value: float64(res.DuplicatesSkipped)},
		metrics.Metric{Name: MetricRecordsFailed, Value: float64(failed + rejected)},
		metrics.Metric{Name: MetricRecordsParked, Value: float64(res.Parked)},
		metrics.Metric{Name: MetricRecordsParkedByRef, Value: float64(res.ParkedByRef)},
		metrics.Metric{Name: MetricCheckpointWriteFailures, Value: float64(res.CheckpointWriteFailures)},
		metrics.Metric{Name: MetricCheckpointRacesLost, Value: b2f(res.CheckpointRaceLost)},
		metrics.Metric{Name: MetricLedgerWriteFailures, Value: b2f(ledgerFailed)},
		metrics.Metric{Name: MetricRecordsRejected, Value: float64(rejected)},
		metrics.Metric{Name: MetricRecordsDeferred, Value: float64(cut)},
		metrics.Metric{Name: MetricRecordsOfAnotherStream, Value: float64(foreign)},
		metrics.Metric{Name: MetricRecordsHeld, Value: float64(res.InFlightSkipped)},
		metrics.Metric{Name: MetricRecordsIsolated, Value: float64(res.Isolated)},
		metrics.Metric{Name: MetricRecordsAbandoned, Value: float64(res.Abandoned)},
		metrics.Metric{Name: MetricRecordsParkedDead, Value: float64(res.DeadParked)},
		metrics.Metric{Name: MetricDeadInvocations, Value: float64(res.DeadMarkers)},
		metrics.Metric{Name: MetricMarkerWriteFailures, Value: float64(res.MarkerWriteFailures)},
	)
	if err != nil {
		log.WarnContext(ctx, "metrics not written", "error", err)
	}
}
