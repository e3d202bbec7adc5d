package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

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

	release    releaseAPI
	function   string // WithConsumerFunction
	lanes      int    // WithLanes
	minAttempt time.Duration
	reserve    time.Duration
	queueURLs  sync.Map     // event source ARN -> queue URL
	streamARN  atomic.Value // the stream's ARN from Kinesis (see ownStream)
	cmds       commands     // operator commands (command.go)

	objects       objectAPI // WithFailureBucket (s3object.go)
	failureBucket string

	verify verifyQueue // WithVerifyQueue (work.go)
}

// releaseAPI is what the handler needs to put an untried on-failure message back on its queue
// (*sqs.Client).
type releaseAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ releaseAPI = (*sqs.Client)(nil)

// HandlerOption configures a Handler.
type HandlerOption func(*Handler)

// WithRelease lets HandleSQS release the messages of a batch it had no time to try: each goes
// back to its queue (named by the record's eventSourceARN) as a fresh message, and the original
// is reported as done, so a message never spends a receive — and never moves toward the failure
// queue's dead-letter queue — without a real attempt at its range. Without it (or when the
// send fails) an untried message is reported as failed, which costs it a receive.
func WithRelease(c releaseAPI) HandlerOption { return func(h *Handler) { h.release = c } }

// WithMinAttempt sets the least time left before the invocation's deadline for HandleSQS to
// start on another message of the batch (default 30s); the rest are released. The first
// message is always tried.
func WithMinAttempt(d time.Duration) HandlerOption { return func(h *Handler) { h.minAttempt = d } }

// WithReleaseReserve sets the time kept, before the invocation's deadline, for releasing the
// untried messages after a replay (default 2s): a replay's context ends that much earlier.
func WithReleaseReserve(d time.Duration) HandlerOption { return func(h *Handler) { h.reserve = d } }

// WithConsumerFunction names the function the mapping invokes (CONSUMER_FUNCTION_ARN: its ARN,
// or its name): a message whose requestContext.functionArn names another function is refused.
// Unset, any function is accepted.
func WithConsumerFunction(fn string) HandlerOption { return func(h *Handler) { h.function = fn } }

// WithLanes sets the mapping's ParallelizationFactor (PARALLELIZATION_FACTOR): a range is
// replayed only in the lane of the batch the mapping gave up (see ReplayFailed).
func WithLanes(n int) HandlerOption { return func(h *Handler) { h.lanes = n } }

// NewHandler wires a Handler.
func NewHandler(r *Reconciler, emit Emitter, log *slog.Logger, opts ...HandlerOption) *Handler {
	h := &Handler{r: r, emit: emit, log: log, minAttempt: 30 * time.Second, reserve: 2 * time.Second}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Summary is the scheduled pass's response (visible in `gapless invoke` and the console).
type Summary struct {
	RecordsVerified int `json:"recordsVerified"`
	GapsDetected    int `json:"gapsDetected"`
	GapsReplayed    int `json:"gapsReplayed"`
	TailReplayed    int `json:"tailReplayed"` // the part of gapsReplayed past the checkpoint
	Parked          int `json:"parked"`
	StillFailing    int `json:"stillFailing"`
	LostToRetention int `json:"lostToRetention"`
	// ExpiredUnverified: spans that expired before they were verified, every record of them
	// proven done (not a loss: the reconciler is behind).
	ExpiredUnverified int     `json:"expiredUnverified"`
	Filtered          int     `json:"filtered,omitempty"` // records the record filter drops (not gaps)
	VerifiedLagSec    float64 `json:"verifiedLagSeconds"`
	ShardsDeferred    int     `json:"shardsDeferred"`
	// ShardsQueued: with a verify queue, the shards whose walk this pass queued (each is walked
	// by an invocation of its own; ShardsDeferred are those waiting for a parent, or whose
	// message could not be sent).
	ShardsQueued    int `json:"shardsQueued,omitempty"`
	GetRecordsCalls int `json:"getRecordsCalls"`
}

// ErrUnknownEvent is returned by Handle for an event that is neither an SQS event nor a
// schedule (for example a Kinesis event sent to the wrong function).
var ErrUnknownEvent = errors.New("reconcile: unknown event")

// Handle dispatches on the event's shape: an object with a "gapless" member is an operator
// command (HandleCommand); an SQS event (Records[].eventSource "aws:sqs") carries
// on-failure messages; any other object without Records (an EventBridge scheduled event, or {}
// from a manual invoke) starts a scheduled pass.
func (h *Handler) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		Records []struct {
			EventSource string `json:"eventSource"`
		} `json:"Records"`
		Source     string          `json:"source"`
		DetailType string          `json:"detail-type"`
		Gapless    json.RawMessage `json:"gapless"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		h.log.ErrorContext(ctx, "invocation payload is not a JSON object", "group", h.r.cfg.Group, "error", err)
		return nil, fmt.Errorf("%w: %v", ErrUnknownEvent, err)
	}
	if probe.Gapless != nil {
		return h.HandleCommand(ctx, probe.Gapless)
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
	if h.verify.client != nil {
		return h.coordinate(ctx)
	}
	rep, err := h.r.Run(ctx)
	sum := Summary{
		RecordsVerified: rep.RecordsVerified, GapsDetected: rep.GapsDetected, GapsReplayed: rep.GapsReplayed,
		TailReplayed: rep.TailReplayed, Parked: rep.Parked, StillFailing: rep.StillFailing, LostToRetention: rep.LostToRetention,
		ExpiredUnverified: rep.ExpiredUnverified, Filtered: rep.Filtered, VerifiedLagSec: rep.VerifiedLag.Seconds(), GetRecordsCalls: rep.GetRecordsCalls,
	}
	for _, s := range rep.Shards {
		if s.Deferred {
			sum.ShardsDeferred++
		}
	}
	h.emitShardLags(rep) // before the run's line: it stays the last one written
	h.emitReport(rep.ShardReport(), rep.VerifiedLag.Seconds())
	h.log.InfoContext(ctx, "reconciler pass", "group", h.r.cfg.Group, "stream", h.r.cfg.Stream, "summary", sum, "error", err)
	return sum, err
}

// HandleSQS replays the ranges named by on-failure messages, in order, and answers with a
// partial batch response (the SQS event source has FunctionResponseTypes
// [ReportBatchItemFailures]): only the messages it names are retried by SQS, and after
// maxReceiveCount receives a message moves to the failure queue's dead-letter queue.
//
// A message is reported as failed when it is malformed, names another stream, or a real attempt
// at its range failed or left it not fully accounted for: every such case is an ERROR line with
// the message id. A message must not reach the dead-letter queue without real attempts, so one
// replay that spends the invocation's time must not fail the others untried: once less than the
// minimum attempt time (WithMinAttempt) is left before the deadline, the remaining messages are
// released (WithRelease) — sent again to their queue as fresh messages, receive count zero —
// and reported as done. The first message of a batch is always tried, so every invocation
// attempts at least one range. Replays end WithReleaseReserve before the deadline to leave time
// for the releases. A release that fails reports the message as failed (it costs a receive but
// is never lost); a crash after a release leaves both copies, and the second replay of a range
// finds it accounted for.
func (h *Handler) HandleSQS(ctx context.Context, ev events.SQSEvent) events.SQSEventResponse {
	var resp events.SQSEventResponse
	var total ShardReport
	refused, workRefused := 0, 0
	deadline, hasDeadline := ctx.Deadline()
	for i, msg := range ev.Records {
		fail := func(reason string, args ...any) {
			h.log.ErrorContext(ctx, reason, append([]any{"message_id", msg.MessageId, "group", h.r.cfg.Group}, args...)...)
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
		}
		if h.isVerifyQueue(msg.EventSourceARN) {
			// A shard's walk (work.go). The event source's BatchSize is 1: a second message of
			// one batch waits for its own invocation, never released (a release would lose
			// its message group).
			if i > 0 {
				fail("verify message not tried: one walk per invocation (the event source's BatchSize is 1); it will be retried")
				continue
			}
			done, ref := h.handleWork(ctx, msg, &total)
			if ref {
				workRefused++
			}
			if !done {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
			}
			continue
		}
		if i > 0 && hasDeadline && time.Until(deadline) < h.minAttempt {
			for _, rest := range ev.Records[i:] {
				if h.isVerifyQueue(rest.EventSourceARN) {
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rest.MessageId})
					continue
				}
				if err := h.releaseMessage(ctx, rest); err != nil {
					h.log.ErrorContext(ctx, "on-failure message not tried and not released: it will be retried (this costs it a receive)",
						"message_id", rest.MessageId, "group", h.r.cfg.Group, "error", err)
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rest.MessageId})
					continue
				}
				h.log.InfoContext(ctx, "on-failure message not tried in this invocation: released to its queue without counting a receive",
					"message_id", rest.MessageId, "group", h.r.cfg.Group)
			}
			break
		}
		if onfailure.IsS3Notification([]byte(msg.Body)) {
			// An S3 on-failure destination's object, named by the bucket's event notification
			// (s3object.go).
			if err := h.handleObjectNotification(ctx, msg, deadline, hasDeadline, &total); err != nil {
				if errors.Is(err, ErrOtherStream) || errors.Is(err, ErrOtherFunction) || errors.Is(err, ErrRangeRefused) ||
					errors.Is(err, ErrOtherBucket) || errors.Is(err, ErrNotATestEvent) {
					refused++ // not the mapping's or the failure bucket's: FailureMessageRefused, as for a message
				}
				fail("S3 notification on the failure queue not accounted for: it will be retried or left for the dead-letter queue", "error", err)
			}
			continue
		}
		m, err := onfailure.Parse([]byte(msg.Body))
		if err != nil {
			fail("malformed on-failure message: left for the dead-letter queue", "error", err)
			continue
		}
		b := m.KinesisBatchInfo
		refuse := func(reason string, args ...any) {
			refused++
			fail("on-failure message refused: "+reason+"; left for the dead-letter queue", append([]any{"stream_arn", b.StreamARN,
				"function_arn", m.RequestContext.FunctionARN, "shard_id", b.ShardID, "start_sequence_number", b.StartSequenceNumber,
				"end_sequence_number", b.EndSequenceNumber, "metric", MetricFailureMessageRefused}, args...)...)
		}
		own, err := h.ownStream(ctx)
		switch {
		case err != nil:
			fail("the stream's ARN is unknown: the message is retried", "error", err)
			continue
		case own != "" && b.StreamARN != own:
			refuse("it names another stream", "own_stream_arn", own)
			continue
		case own == "" && b.StreamName() != h.r.cfg.Stream:
			refuse("it names another stream", "stream", b.StreamName())
			continue
		case !sameFunction(h.function, m.RequestContext.FunctionARN):
			refuse("it names another function than the mapping's", "own_function", h.function)
			continue
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if hasDeadline {
			rctx, cancel = context.WithDeadline(ctx, deadline.Add(-h.reserve))
		}
		rep, err := h.r.ReplayFailed(rctx, FailedRange{ShardID: b.ShardID, From: b.StartSequenceNumber, To: b.EndSequenceNumber, Lanes: h.lanes})
		cancel()
		total.add(rep.ShardReport)
		switch {
		case err == nil && rep.Refused != "":
			refuse(rep.Refused, "gaps_replayed", rep.GapsReplayed)
		case err != nil:
			fail("replaying an on-failure range failed; it will be retried", "shard_id", b.ShardID,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber, "error", err)
		case !rep.Accounted:
			fail("on-failure range not fully accounted for yet; it will be retried", "shard_id", b.ShardID,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber, "still_failing", rep.StillFailing)
		default:
			h.log.InfoContext(ctx, "on-failure range accounted for", "shard_id", b.ShardID, "condition", m.RequestContext.Condition,
				"start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber,
				"batch_size", b.BatchSize, "gaps_replayed", rep.GapsReplayed, "parked", rep.Parked)
		}
	}
	extra := []metrics.Metric{{Name: MetricFailureMessageRefused, Value: float64(refused), Unit: metrics.Count}}
	if h.verify.client != nil {
		extra = append(extra, metrics.Metric{Name: MetricVerifyMessageRefused, Value: float64(workRefused), Unit: metrics.Count})
	}
	h.emitReport(total, -1, extra...)
	return resp
}

// MetricExpiredUnverified counts the spans that expired from the stream before the reconciler
// verified them and whose every record is proven done (spanDone): not a loss, a reconciler
// that is behind. LostToRetention counts the others.
const MetricExpiredUnverified = "ExpiredUnverified"

// MetricFailureMessageRefused counts the failure-queue messages HandleSQS refused: not of the
// mapping's stream (by full ARN) or function, or naming a range the mapping cannot have given
// up (see ReplayFailed).
const MetricFailureMessageRefused = "FailureMessageRefused"

// describer is the Kinesis call that names the stream's ARN when the configuration does not
// (*kinesis.Client).
type describer interface {
	DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// ownStream returns the stream's full ARN: Config.StreamARN, or the one Kinesis names for
// Config.Stream (asked once). "" when the Kinesis client cannot say (then only the name is
// compared).
func (h *Handler) ownStream(ctx context.Context) (string, error) {
	if h.r.cfg.StreamARN != "" {
		return h.r.cfg.StreamARN, nil
	}
	if v, ok := h.streamARN.Load().(string); ok {
		return v, nil
	}
	d, ok := h.r.kin.(describer)
	if !ok {
		return "", nil
	}
	out, err := d.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(h.r.cfg.Stream)})
	if err != nil {
		return "", fmt.Errorf("reconcile: DescribeStreamSummary %s: %w", h.r.cfg.Stream, err)
	}
	arn := aws.ToString(out.StreamDescriptionSummary.StreamARN)
	h.streamARN.Store(arn)
	return arn, nil
}

// sameFunction reports whether got (a message's requestContext.functionArn) names the function
// want (a function name, or its ARN; "" accepts any). Qualifiers (a version or alias) are
// ignored: they are the same function.
func sameFunction(want, got string) bool {
	if want == "" {
		return true
	}
	parts := strings.Split(got, ":")
	if len(parts) < 7 || len(parts) > 8 || parts[0] != "arn" || parts[2] != "lambda" || parts[5] != "function" {
		return false
	}
	if !strings.HasPrefix(want, "arn:") {
		return parts[6] == want
	}
	w := strings.Split(want, ":")
	return len(w) >= 7 && strings.Join(w[:7], ":") == strings.Join(parts[:7], ":")
}

// ErrNoRelease is wrapped by a release that cannot be made (no SQS client, or a record without
// an SQS eventSourceARN).
var ErrNoRelease = errors.New("reconcile: cannot release the message")

// releaseMessage sends msg's body again to the queue it came from. The send gets its own short
// context: it runs after the replays, close to the deadline.
func (h *Handler) releaseMessage(ctx context.Context, msg events.SQSMessage) error {
	if h.release == nil {
		return fmt.Errorf("%w: no SQS client (WithRelease)", ErrNoRelease)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	url, err := h.queueURL(ctx, msg.EventSourceARN)
	if err != nil {
		return err
	}
	_, err = h.release.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(msg.Body)})
	if err != nil {
		return fmt.Errorf("reconcile: release message %s to %s: %w", msg.MessageId, url, err)
	}
	return nil
}

// queueURL resolves an SQS queue ARN (arn:aws:sqs:<region>:<account>:<name>) to its URL, once.
func (h *Handler) queueURL(ctx context.Context, arn string) (string, error) {
	if u, ok := h.queueURLs.Load(arn); ok {
		return u.(string), nil
	}
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[2] != "sqs" || parts[5] == "" {
		return "", fmt.Errorf("%w: eventSourceARN %q is not an SQS queue ARN", ErrNoRelease, arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := h.release.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("reconcile: queue URL of %s: %w", arn, err)
	}
	url := aws.ToString(out.QueueUrl)
	h.queueURLs.Store(arn, url)
	return url, nil
}

func (h *Handler) emitReport(s ShardReport, lagSeconds float64, extra ...metrics.Metric) {
	if h.emit == nil {
		return
	}
	ms := []metrics.Metric{
		{Name: "GapsDetected", Value: float64(s.GapsDetected), Unit: metrics.Count},
		{Name: "GapsReplayed", Value: float64(s.GapsReplayed), Unit: metrics.Count},
		{Name: "TailReplayed", Value: float64(s.TailReplayed), Unit: metrics.Count},
		{Name: "RecordsVerified", Value: float64(s.RecordsVerified), Unit: metrics.Count},
		{Name: "RecordsParked", Value: float64(s.Parked), Unit: metrics.Count},
		{Name: "LostToRetention", Value: float64(s.LostSpans), Unit: metrics.Count},
		{Name: MetricExpiredUnverified, Value: float64(s.ExpiredUnverified), Unit: metrics.Count},
	}
	if s.Filtered > 0 { // only with a record filter
		ms = append(ms, metrics.Metric{Name: "RecordsFiltered", Value: float64(s.Filtered), Unit: metrics.Count})
	}
	if lagSeconds >= 0 {
		ms = append(ms, metrics.Metric{Name: "VerifiedLagSeconds", Value: lagSeconds, Unit: metrics.Seconds})
	}
	ms = append(ms, extra...)
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
	s.TailReplayed += o.TailReplayed
	s.Parked += o.Parked
	s.StillFailing += o.StillFailing
	s.LostSpans += o.LostSpans
	s.ExpiredUnverified += o.ExpiredUnverified
	s.Filtered += o.Filtered
	s.GetRecordsCalls += o.GetRecordsCalls
}
