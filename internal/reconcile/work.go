package reconcile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The verify queue (fanout.go). With WithVerifyQueue a scheduled pass is a coordinator: it
// queues one message per shard ready to be walked, and the same function, consuming the queue,
// walks one shard per message. A message is a verify command (command.go) for this group and
// stream, sent with the shard as its message group:
//
//	{"gapless": {"version": 1, "command": "verify", "group": "orders", "stream": "orders",
//	             "verify": {"shardId": "shardId-000000000000"}}}
//
// It is a claim, never trusted on its word: a message that is malformed, of another version,
// group or stream, whose message group is not its shard, or that names a shard the stream does
// not list is refused (an ERROR line, VerifyMessageRefused, and a batch item failure: it stays
// on the queue and reaches the dead-letter queue after maxReceiveCount receives, never deleted
// unread). A message that passes only asks for a walk, and a walk applies nothing it has not
// confirmed against the stream and the ledger, so a forged one costs reads, never a record.

// MetricVerifyMessageRefused counts the verify-queue messages refused (see above).
const MetricVerifyMessageRefused = "VerifyMessageRefused"

// verifyQueueAPI is what the coordinator and the walkers need of the verify queue
// (*sqs.Client).
type verifyQueueAPI interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ verifyQueueAPI = (*sqs.Client)(nil)

// verifyQueue is what WithVerifyQueue gives the Handler.
type verifyQueue struct {
	client          verifyQueueAPI
	url             string
	account, name   string // from the URL's path: a record's eventSourceARN must name them
	maxSendAttempts int
}

// WithVerifyQueue makes scheduled passes coordinators that queue each shard's walk on the FIFO
// queue at queueURL (VERIFY_QUEUE_URL), and makes HandleSQS walk the shard of each message
// that comes from that queue (by eventSourceARN).
func WithVerifyQueue(c verifyQueueAPI, queueURL string) HandlerOption {
	return func(h *Handler) {
		q := verifyQueue{client: c, url: queueURL, maxSendAttempts: 3}
		if u, err := url.Parse(queueURL); err == nil {
			parts := strings.Split(strings.Trim(u.Path, "/"), "/")
			if len(parts) == 2 {
				q.account, q.name = parts[0], parts[1]
			}
		}
		h.verify = q
	}
}

// isVerifyQueue reports whether arn (a record's eventSourceARN, arn:aws:sqs:region:account:name)
// is the verify queue's.
func (h *Handler) isVerifyQueue(arn string) bool {
	if h.verify.name == "" {
		return false
	}
	parts := strings.Split(arn, ":")
	return len(parts) == 6 && parts[2] == "sqs" && parts[5] == h.verify.name && parts[4] == h.verify.account
}

// workItem is one message to send: the shard to walk and why (its deduplication identity).
type workItem struct {
	shardID string
	dedup   string // what makes this message distinct from others for the same shard
}

// dedupID is the message's MessageDeduplicationId: a hash of the group, stream, shard and
// reason (at most 128 characters: 64 hex digits). SQS drops a message whose id it has seen in
// the last five minutes ("Exactly-once processing in Amazon SQS",
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-exactly-once-processing.html),
// so two coordinators in one minute, or a walker retried after a crash, queue a shard once.
func (h *Handler) dedupID(w workItem) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{h.r.cfg.Group, h.r.cfg.Stream, w.shardID, w.dedup}, "\x00")))
	return hex.EncodeToString(sum[:])
}

// sendWork queues items, ten per SendMessageBatch (the most a call takes), each attempt
// resending only the entries the last one failed. It returns how many were queued and an error
// naming the shards it could not queue (the next pass queues them again).
func (h *Handler) sendWork(ctx context.Context, items []workItem) (int, error) {
	sent := 0
	var errs []error
	for len(items) > 0 {
		n := min(len(items), 10)
		chunk := items[:n]
		items = items[n:]
		for attempt := 1; len(chunk) > 0; attempt++ {
			in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(h.verify.url)}
			for i, w := range chunk {
				body, err := json.Marshal(CommandEvent{Gapless: &Command{Version: CommandVersion, Command: CommandVerify,
					Group: h.r.cfg.Group, Stream: h.r.cfg.Stream, Verify: &VerifyCommand{ShardID: w.shardID}}})
				if err != nil {
					return sent, fmt.Errorf("reconcile: encode verify message: %w", err)
				}
				in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)),
					MessageBody: aws.String(string(body)), MessageGroupId: aws.String(w.shardID),
					MessageDeduplicationId: aws.String(h.dedupID(w))})
			}
			out, err := h.verify.client.SendMessageBatch(ctx, in)
			var retry []workItem
			if err != nil {
				retry = chunk
			} else {
				sent += len(out.Successful)
				for _, f := range out.Failed {
					i, _ := strconv.Atoi(aws.ToString(f.Id))
					if i >= 0 && i < len(chunk) {
						retry = append(retry, chunk[i])
					}
					err = errors.Join(err, fmt.Errorf("%s: %s %s", chunk[i].shardID, aws.ToString(f.Code), aws.ToString(f.Message)))
				}
			}
			if len(retry) > 0 && (attempt >= h.verify.maxSendAttempts || ctx.Err() != nil) {
				var ids []string
				for _, w := range retry {
					ids = append(ids, w.shardID)
				}
				errs = append(errs, fmt.Errorf("reconcile: queue the walk of %s on %s: %w", strings.Join(ids, ", "), h.verify.url, err))
				break
			}
			chunk = retry
		}
	}
	return sent, errors.Join(errs...)
}

// coordinate is a scheduled pass with a verify queue: plan, report every shard's lag from its
// stored state, and queue the walk of every shard that is ready.
func (h *Handler) coordinate(ctx context.Context) (Summary, error) {
	plan, err := h.r.Plan(ctx)
	if err != nil {
		h.log.ErrorContext(ctx, "reconciler pass: listing the shards failed; no walk queued", "group", h.r.cfg.Group, "stream", h.r.cfg.Stream, "error", err)
		return Summary{}, err
	}
	now := h.r.now()
	var items []workItem
	waiting := 0
	window := strconv.FormatInt(now.Unix()/60, 10)
	for _, s := range plan.Shards {
		switch {
		case s.Closed:
		case s.Ready:
			items = append(items, workItem{shardID: s.ShardID, dedup: "pass " + window})
		default:
			waiting++
		}
	}
	queued, err := h.sendWork(ctx, items)
	rep := plan.Report(now)
	sum := Summary{VerifiedLagSec: rep.VerifiedLag.Seconds(), ShardsQueued: queued, ShardsDeferred: waiting + len(items) - queued}
	h.emitShardLags(rep)
	h.emitReport(rep.ShardReport(), rep.VerifiedLag.Seconds())
	h.log.InfoContext(ctx, "reconciler pass (coordinator): each ready shard's walk queued", "group", h.r.cfg.Group, "stream", h.r.cfg.Stream,
		"shards", len(plan.Shards), "summary", sum, "error", err)
	return sum, err
}

// errWorkRefused marks a verify message refused as a claim (counted VerifyMessageRefused).
var errWorkRefused = errors.New("verify message refused")

// parseWork decodes a verify-queue message and checks it against this function and the
// message's own attributes.
func (h *Handler) parseWork(msg events.SQSMessage) (VerifyCommand, error) {
	var ev struct {
		Gapless json.RawMessage `json:"gapless"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(msg.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil || ev.Gapless == nil || dec.More() {
		return VerifyCommand{}, fmt.Errorf("%w: the body is not one {\"gapless\": {...}} object (%v)", errWorkRefused, err)
	}
	c, err := parseCommand(ev.Gapless)
	switch {
	case err != nil:
		return VerifyCommand{}, fmt.Errorf("%w: %v", errWorkRefused, err)
	case c.Command != CommandVerify:
		return VerifyCommand{}, fmt.Errorf("%w: command %q on the verify queue (only %s)", errWorkRefused, c.Command, CommandVerify)
	case c.Group != h.r.cfg.Group || c.Stream != h.r.cfg.Stream:
		return VerifyCommand{}, fmt.Errorf("%w: for group %q on stream %q; this function is group %q on stream %q",
			errWorkRefused, c.Group, c.Stream, h.r.cfg.Group, h.r.cfg.Stream)
	case msg.Attributes["MessageGroupId"] != c.Verify.ShardID:
		// The message group is what keeps one walker per shard: a message in another group
		// would walk the shard beside that group's.
		return VerifyCommand{}, fmt.Errorf("%w: message group %q is not its shard %q", errWorkRefused, msg.Attributes["MessageGroupId"], c.Verify.ShardID)
	}
	return *c.Verify, nil
}

// handleWork walks the shard of one verify-queue message. It reports whether the message is
// done (deleted) and whether it was refused. After a walk it queues what comes next: the same
// shard again when the walk ran out of time, the shard's children when it reached its end. A
// send that fails is logged and the message is still done: the next scheduled pass queues
// every ready shard, so the walk waits one schedule period at most.
func (h *Handler) handleWork(ctx context.Context, msg events.SQSMessage, total *ShardReport) (done, refused bool) {
	c, err := h.parseWork(msg)
	if err != nil {
		h.log.ErrorContext(ctx, "verify message refused; left for the dead-letter queue", "message_id", msg.MessageId, "group", h.r.cfg.Group,
			"message_group_id", msg.Attributes["MessageGroupId"], "metric", MetricVerifyMessageRefused, "error", err)
		return false, true
	}
	run, err := h.r.RunShard(ctx, c.ShardID)
	total.add(run.Report)
	h.emitShardRun(run)
	switch {
	case errors.Is(err, ErrShardNotInStream):
		h.log.ErrorContext(ctx, "verify message refused: the stream does not list its shard; left for the dead-letter queue", "message_id", msg.MessageId,
			"group", h.r.cfg.Group, "shard_id", c.ShardID, "metric", MetricVerifyMessageRefused, "error", err)
		return false, true
	case err != nil:
		h.log.ErrorContext(ctx, "walking a shard failed; the message is retried", "message_id", msg.MessageId, "group", h.r.cfg.Group,
			"shard_id", c.ShardID, "error", err)
		return false, false
	}
	var next []workItem
	switch {
	case run.More:
		next = append(next, workItem{shardID: c.ShardID, dedup: "more " + msg.MessageId})
	case run.Report.End:
		for _, child := range run.Children {
			next = append(next, workItem{shardID: child, dedup: "child of " + c.ShardID})
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), workSendTimeout)
	defer cancel()
	if _, err := h.sendWork(sctx, next); err != nil {
		h.log.WarnContext(ctx, "queueing the next walk failed: the next scheduled pass queues it", "group", h.r.cfg.Group, "shard_id", c.ShardID, "error", err)
	}
	h.log.InfoContext(ctx, "shard walked", "group", h.r.cfg.Group, "shard_id", c.ShardID, "waiting_for_parents", run.Waiting,
		"more", run.More, "complete", run.Report.Complete, "end", run.Report.End, "stuck", run.Report.Stuck,
		"records_verified", run.Report.RecordsVerified, "gaps_replayed", run.Report.GapsReplayed, "children", run.Children)
	return true, false
}

// emitShardRun writes one walk's VerifiedLagSeconds for its shard.
func (h *Handler) emitShardRun(run ShardRun) {
	h.emitShardLags(Report{Shards: []ShardReport{run.Report}})
}

// workSendTimeout bounds the sends after a walk (they run after the walk's budget).
const workSendTimeout = 10 * time.Second
