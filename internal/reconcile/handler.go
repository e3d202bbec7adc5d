package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// Emitter writes metric lines (metrics.Emitter in the function).
type Emitter interface {
	Emit(ms ...metrics.Metric) error
}

// Handler is the reconciler function's entry point: an EventBridge schedule event starts a
// scheduled pass; an SQS event carries the mapping's on-failure messages.
type Handler struct {
	r    *Reconciler
	emit Emitter
	log  *slog.Logger
}

// NewHandler wires a Handler.
func NewHandler(r *Reconciler, emit Emitter, log *slog.Logger) *Handler {
	return &Handler{r: r, emit: emit, log: log}
}

// Summary is the scheduled pass's response (visible in `gapless invoke` and the console).
type Summary struct {
	RecordsVerified int     `json:"recordsVerified"`
	GapsDetected    int     `json:"gapsDetected"`
	GapsReplayed    int     `json:"gapsReplayed"`
	Parked          int     `json:"parked"`
	StillFailing    int     `json:"stillFailing"`
	LostToRetention int     `json:"lostToRetention"`
	VerifiedLagSec  float64 `json:"verifiedLagSeconds"`
	ShardsDeferred  int     `json:"shardsDeferred"`
	GetRecordsCalls int     `json:"getRecordsCalls"`
}

// ErrUnknownEvent is returned by Handle for an event that is neither an SQS event nor a
// schedule (for example a Kinesis event sent to the wrong function).
var ErrUnknownEvent = errors.New("reconcile: unknown event")

// Handle dispatches on the event's shape: an SQS event (Records[].eventSource "aws:sqs") carries
// on-failure messages; any other object without Records (an EventBridge scheduled event, or {}
// from a manual invoke) starts a scheduled pass.
func (h *Handler) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		Records []struct {
			EventSource string `json:"eventSource"`
		} `json:"Records"`
		Source     string `json:"source"`
		DetailType string `json:"detail-type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		h.log.ErrorContext(ctx, "invocation payload is not a JSON object", "group", h.r.cfg.Group, "error", err)
		return nil, fmt.Errorf("%w: %v", ErrUnknownEvent, err)
	}
	if len(probe.Records) > 0 {
		if probe.Records[0].EventSource != "aws:sqs" {
			h.log.ErrorContext(ctx, "event records are not SQS messages", "group", h.r.cfg.Group, "event_source", probe.Records[0].EventSource)
			return nil, fmt.Errorf("%w: records from %q", ErrUnknownEvent, probe.Records[0].EventSource)
		}
		var ev events.SQSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("reconcile: decode SQS event: %w", err)
		}
		return h.HandleSQS(ctx, ev), nil
	}
	h.log.DebugContext(ctx, "scheduled pass", "group", h.r.cfg.Group, "source", probe.Source, "detail_type", probe.DetailType)
	return h.HandleSchedule(ctx)
}

// HandleSchedule runs one scheduled pass and emits its metrics.
func (h *Handler) HandleSchedule(ctx context.Context) (Summary, error) {
	rep, err := h.r.Run(ctx)
	sum := Summary{
		RecordsVerified: rep.RecordsVerified, GapsDetected: rep.GapsDetected, GapsReplayed: rep.GapsReplayed,
		Parked: rep.Parked, StillFailing: rep.StillFailing, LostToRetention: rep.LostToRetention,
		VerifiedLagSec: rep.VerifiedLag.Seconds(), GetRecordsCalls: rep.GetRecordsCalls,
	}
	for _, s := range rep.Shards {
		if s.Deferred {
			sum.ShardsDeferred++
		}
	}
	h.emitReport(rep.ShardReport(), rep.VerifiedLag.Seconds())
	h.log.InfoContext(ctx, "reconciler pass", "group", h.r.cfg.Group, "stream", h.r.cfg.Stream, "summary", sum, "error", err)
	return sum, err
}

// HandleSQS replays the ranges named by on-failure messages. A message is reported as failed
// (so SQS redelivers it, and after maxReceiveCount moves it to the failure queue's DLQ) when it
// is malformed, names another stream, or its range is not yet fully accounted for. Nothing is
// dropped silently: every such case is an ERROR log line with the message id.
func (h *Handler) HandleSQS(ctx context.Context, ev events.SQSEvent) events.SQSEventResponse {
	var resp events.SQSEventResponse
	var total ShardReport
	for _, msg := range ev.Records {
		fail := func(reason string, args ...any) {
			h.log.ErrorContext(ctx, reason, append([]any{"message_id", msg.MessageId, "group", h.r.cfg.Group}, args...)...)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
		}
		m, err := onfailure.Parse([]byte(msg.Body))
		if err != nil {
			fail("malformed on-failure message: left for the dead-letter queue", "error", err)
			continue
		}
		b := m.KinesisBatchInfo
		if b.StreamName() != h.r.cfg.Stream {
			fail("on-failure message names another stream: left for the dead-letter queue", "stream", b.StreamName())
			continue
		}
		rep, err := h.r.ReplayRange(ctx, b.ShardID, b.StartSequenceNumber, b.EndSequenceNumber)
		total.add(rep.ShardReport)
		switch {
		case err != nil:
			fail("replaying an on-failure range failed; it will be retried", "shard_id", b.ShardID,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber, "error", err)
		case !rep.Accounted:
			fail("on-failure range not fully accounted for yet; it will be retried", "shard_id", b.ShardID,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber, "still_failing", rep.StillFailing)
		default:
			h.log.InfoContext(ctx, "on-failure range accounted for", "shard_id", b.ShardID, "condition", m.RequestContext.Condition,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber,
				"gaps_replayed", rep.GapsReplayed, "parked", rep.Parked)
		}
	}
	h.emitReport(total, -1)
	return resp
}

func (h *Handler) emitReport(s ShardReport, lagSeconds float64) {
	if h.emit == nil {
		return
	}
	ms := []metrics.Metric{
		{Name: "GapsDetected", Value: float64(s.GapsDetected), Unit: metrics.Count},
		{Name: "GapsReplayed", Value: float64(s.GapsReplayed), Unit: metrics.Count},
		{Name: "RecordsVerified", Value: float64(s.RecordsVerified), Unit: metrics.Count},
		{Name: "RecordsParked", Value: float64(s.Parked), Unit: metrics.Count},
		{Name: "LostToRetention", Value: float64(s.LostSpans), Unit: metrics.Count},
	}
	if lagSeconds >= 0 {
		ms = append(ms, metrics.Metric{Name: "VerifiedLagSeconds", Value: lagSeconds, Unit: metrics.Seconds})
	}
	if err := h.emit.Emit(ms...); err != nil {
		h.log.Warn("emitting metrics failed", "error", err)
	}
}

// ShardReport sums a run's shard reports into one (for metrics).
func (rep Report) ShardReport() ShardReport {
	var s ShardReport
	for _, sr := range rep.Shards {
		s.add(sr)
	}
	return s
}

func (s *ShardReport) add(o ShardReport) {
	s.RecordsVerified += o.RecordsVerified
	s.GapsDetected += o.GapsDetected
	s.GapsReplayed += o.GapsReplayed
	s.Parked += o.Parked
	s.StillFailing += o.StillFailing
	s.LostSpans += o.LostSpans
	s.GetRecordsCalls += o.GetRecordsCalls
}
