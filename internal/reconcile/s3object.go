package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// An S3 bucket as the mapping's on-failure destination: Lambda writes each given-up batch as an
// object holding the metadata and the records with their data (internal/onfailure, s3.go), and
// the bucket's ObjectCreated event notification goes to the failure queue. A range whose
// records the stream has trimmed is then replayed from the object: its records are processed,
// not lost.

// objectAPI is the S3 call the handler makes to read an on-failure object (*s3.Client).
type objectAPI interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var _ objectAPI = (*s3.Client)(nil)

// WithFailureBucket lets HandleSQS consume S3 event notifications on the failure queue: the
// objects are read from bucket only (a notification naming any other bucket is refused, never
// read), at most onfailure.MaxObjectBytes each. Without it a notification is refused.
func WithFailureBucket(client objectAPI, bucket string) HandlerOption {
	return func(h *Handler) { h.objects, h.failureBucket = client, bucket }
}

// Errors of the object path; each leaves the message for the failure queue's dead-letter queue
// (refused, logged at ERROR, never applied). All but ErrNoFailureBucket and ErrObjectTooLarge are
// counted in FailureMessageRefused: the message is not one the mapping or the failure bucket sent.
var (
	ErrNoFailureBucket = errors.New("reconcile: S3 notification on the failure queue but no failure bucket is configured")
	ErrOtherBucket     = errors.New("reconcile: S3 notification names another bucket than the failure bucket")
	ErrObjectTooLarge  = errors.New("reconcile: on-failure object larger than an invocation record can be")
	ErrOtherStream     = errors.New("reconcile: on-failure object names another stream")
	ErrOtherFunction   = errors.New("reconcile: on-failure object names another function than the mapping's")
	ErrRangeRefused    = errors.New("reconcile: on-failure range refused: not one the mapping can have given up")
	ErrNotATestEvent   = errors.New("reconcile: body with an S3 test event's Event carries other fields")
)

// testEventFields are the fields of the test message S3 sends to a destination when a
// bucket's event notification is configured (Amazon S3 User Guide, "Event message structure":
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
var testEventFields = []string{"Service", "Event", "Time", "Bucket", "RequestId", "HostId"}

// checkTestEvent accepts an S3 test event only with the documented fields alone, naming the
// failure bucket: anything else that says "s3:TestEvent" (a range or Records with it, another
// bucket's test event) is refused, never deleted as a test event.
func (h *Handler) checkTestEvent(body string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		return fmt.Errorf("%w: %v", onfailure.ErrMalformed, err)
	}
	for name := range fields {
		if !slices.Contains(testEventFields, name) {
			return fmt.Errorf("%w: %q", ErrNotATestEvent, name)
		}
	}
	var bucket string
	if err := json.Unmarshal(fields["Bucket"], &bucket); err != nil || h.objects == nil || bucket != h.failureBucket {
		return fmt.Errorf("%w: S3 test event of bucket %q (failure bucket %q)", ErrOtherBucket, bucket, h.failureBucket)
	}
	return nil
}

// handleObjectNotification consumes one failure-queue message that is an S3 event notification.
// It returns nil when every object it names is accounted for (the message may be deleted).
func (h *Handler) handleObjectNotification(ctx context.Context, msg events.SQSMessage, deadline time.Time, hasDeadline bool, total *ShardReport) error {
	objs, err := onfailure.ParseS3Notification([]byte(msg.Body))
	switch {
	case errors.Is(err, onfailure.ErrTestEvent):
		if err := h.checkTestEvent(msg.Body); err != nil {
			return err
		}
		h.log.InfoContext(ctx, "S3 test event on the failure queue (the bucket's notification was configured)", "message_id", msg.MessageId, "group", h.r.cfg.Group)
		return nil
	case err != nil:
		return err
	case h.objects == nil:
		return ErrNoFailureBucket
	}
	for _, o := range objs {
		if o.Bucket != h.failureBucket {
			return fmt.Errorf("%w: %q (failure bucket %q); not read", ErrOtherBucket, o.Bucket, h.failureBucket)
		}
		if o.Size > onfailure.MaxObjectBytes {
			return fmt.Errorf("%w: %s is %d bytes", ErrObjectTooLarge, o.Key, o.Size)
		}
		if !strings.HasPrefix(o.Key, onfailure.ObjectKeyPrefix) {
			return fmt.Errorf("%w: key %q is not under %s", onfailure.ErrMalformed, o.Key, onfailure.ObjectKeyPrefix)
		}
		m, err := h.readObject(ctx, o.Key)
		if err != nil {
			return err
		}
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if hasDeadline {
			rctx, cancel = context.WithDeadline(ctx, deadline.Add(-h.reserve))
		}
		rep, err := h.r.ReplayObject(rctx, m, h.lanes)
		cancel()
		total.add(rep.ShardReport)
		b := m.KinesisBatchInfo
		switch {
		case err == nil && rep.Refused != "":
			return fmt.Errorf("%w: object %s: %s", ErrRangeRefused, o.Key, rep.Refused)
		case err != nil:
			return fmt.Errorf("replaying on-failure object %s: %w", o.Key, err)
		case !rep.Accounted:
			return fmt.Errorf("on-failure object %s (%s %s..%s) not fully accounted for yet (%d still failing)", o.Key, b.ShardID, b.StartSequenceNumber, b.EndSequenceNumber, rep.StillFailing)
		}
		h.log.InfoContext(ctx, "on-failure object accounted for", "group", h.r.cfg.Group, "key", o.Key, "shard_id", b.ShardID,
			"condition", m.RequestContext.Condition, "start_sequence_number", b.StartSequenceNumber, "end_sequence_number", b.EndSequenceNumber,
			"records_in_object", len(m.Payload.Records), "gaps_replayed", rep.GapsReplayed, "parked", rep.Parked, "lost_spans", rep.LostSpans)
	}
	return nil
}

// readObject reads and parses one on-failure object of the failure bucket, refusing one larger
// than onfailure.MaxObjectBytes (whatever its notification said) or of another stream.
func (h *Handler) readObject(ctx context.Context, key string) (onfailure.Message, error) {
	out, err := h.objects.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(h.failureBucket), Key: aws.String(key)})
	if err != nil {
		return onfailure.Message{}, fmt.Errorf("reconcile: get on-failure object %s: %w", key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > onfailure.MaxObjectBytes {
		return onfailure.Message{}, fmt.Errorf("%w: %s is %d bytes", ErrObjectTooLarge, key, *out.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(out.Body, onfailure.MaxObjectBytes+1))
	if err != nil {
		return onfailure.Message{}, fmt.Errorf("reconcile: read on-failure object %s: %w", key, err)
	}
	if len(body) > onfailure.MaxObjectBytes {
		return onfailure.Message{}, fmt.Errorf("%w: %s", ErrObjectTooLarge, key)
	}
	m, err := onfailure.ParseObject(body)
	if err != nil {
		return onfailure.Message{}, err
	}
	b := m.KinesisBatchInfo
	own, err := h.ownStream(ctx)
	if err != nil {
		return onfailure.Message{}, err
	}
	if b.StreamName() != h.r.cfg.Stream || (own != "" && b.StreamARN != own) {
		return onfailure.Message{}, fmt.Errorf("%w: %s", ErrOtherStream, b.StreamARN)
	}
	if !sameFunction(h.function, m.RequestContext.FunctionARN) {
		return onfailure.Message{}, fmt.Errorf("%w: %s", ErrOtherFunction, m.RequestContext.FunctionARN)
	}
	return m, nil
}

// ReplayObject accounts for the range of an S3 destination's object (m from
// onfailure.ParseObject). While the stream still holds the range's first record the range is
// re-read from the stream (ReplayRange); the object's records are only a fallback, replayed
// when the stream no longer has them, then idempotently. When the stream has trimmed it, the
// object's records are replayed first, in sequence order (ReplayObjectRecords: the ledger skips
// those already done), and then ReplayFailed accounts for the rest of the range, of the
// object's lane only (FailedRange.LaneKey): later records still held, already in the ledger
// when they were the object's, and any span expired around the object's records, which it
// counts as a span whose records may be lost (in place: the watermark does not pass the other
// lanes' records, which are left to their lanes). The object proves
// what its records were, not that no other record of the shard lay between the verified
// watermark and the range (other lanes' records, records dropped unseen): that span keeps its
// LostToRetention count and alarm, but the records the object holds are processed.
//
// While the stream holds the range it is replayed as an SQS message's (ReplayFailed, with the
// mapping's ParallelizationFactor lanes): after the watermark, within the scope, bounded by the
// checkpoint, and only its batch's lane (the object's, also when the start expires during the
// read); a refusal is RangeReport.Refused.
func (r *Reconciler) ReplayObject(ctx context.Context, m onfailure.Message, lanes int) (RangeReport, error) {
	b := m.KinesisBatchInfo
	trimmed, gone, err := r.trimmedAt(ctx, b.ShardID, b.StartSequenceNumber)
	if err != nil {
		return RangeReport{ShardReport: ShardReport{ShardID: b.ShardID}}, err
	}
	if gone {
		// The shard has left the stream with all its records (a closed shard past retention):
		// the object is the only copy, and there is nothing else of the range to read. Only a
		// shard the group's state knows (the consumer or a pass has written its item) can be
		// such a shard: an object naming any other is refused.
		states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
		if err != nil {
			return RangeReport{ShardReport: ShardReport{ShardID: b.ShardID}}, fmt.Errorf("reconcile: list checkpoints: %w", err)
		}
		if !slices.ContainsFunc(states, func(st checkpoint.State) bool { return st.Shard.ShardID == b.ShardID }) {
			return RangeReport{ShardReport: ShardReport{ShardID: b.ShardID}}, fmt.Errorf("%w: shard %s is neither in the stream nor in the group's state", ErrInvalidRange, b.ShardID)
		}
		r.log.WarnContext(ctx, "on-failure range of a shard no longer in the stream; replaying it from the object",
			"group", r.cfg.Group, "shard_id", b.ShardID, "start_sequence_number", b.StartSequenceNumber,
			"end_sequence_number", b.EndSequenceNumber, "records_in_object", len(m.Payload.Records))
		return r.ReplayObjectRecords(ctx, m)
	}
	// Only the object's lane is replayed from the stream, whatever expired: the object's records
	// are one batch of one lane, so any of their partition keys names it.
	fr := FailedRange{ShardID: b.ShardID, From: b.StartSequenceNumber, To: b.EndSequenceNumber, Lanes: lanes, LaneKey: objectLaneKey(m)}
	// The object's own records pass ReplayFailed's rules before any is applied: once the stream
	// has trimmed them they are all there is to judge.
	if refused, err := r.objectRefusal(ctx, m, fr); err != nil || refused != "" {
		return RangeReport{ShardReport: ShardReport{ShardID: b.ShardID}, Refused: refused}, err
	}
	if !trimmed {
		rep, err := r.ReplayFailed(ctx, fr)
		if err != nil || rep.Refused != "" {
			return rep, err
		}
		if rep.LostSpans == 0 {
			// No span counted by this read; the stream may still have trimmed the range's start
			// meanwhile (a scheduled pass counting the span first): look again.
			if trimmed, _, err = r.trimmedAt(ctx, b.ShardID, b.StartSequenceNumber); err != nil || !trimmed {
				return rep, err
			}
		}
		// The stream trimmed the range between the look and the read: the object still has
		// the records (processed after the held ones: per-key order is not guaranteed here).
		r.log.WarnContext(ctx, "on-failure range trimmed while it was read; replaying the object's records",
			"group", r.cfg.Group, "shard_id", b.ShardID, "start_sequence_number", b.StartSequenceNumber)
		orep, err := r.ReplayObjectRecords(ctx, m)
		orep.add(rep.ShardReport)
		orep.Accounted = orep.Accounted && rep.Accounted
		return orep, err
	}
	r.log.InfoContext(ctx, "on-failure range trimmed from the stream; replaying it from the object",
		"group", r.cfg.Group, "shard_id", b.ShardID, "start_sequence_number", b.StartSequenceNumber,
		"end_sequence_number", b.EndSequenceNumber, "records_in_object", len(m.Payload.Records))
	orep, err := r.ReplayObjectRecords(ctx, m)
	if err != nil || !orep.Accounted {
		return orep, err
	}
	rep, err := r.ReplayFailed(ctx, fr)
	rep.add(orep.ShardReport)
	return rep, err
}

// objectRefusal applies ReplayFailed's rules (givenUpBounds, keep) to the object's own records:
// why the range is refused, or "" when it is not.
func (r *Reconciler) objectRefusal(ctx context.Context, m onfailure.Message, fr FailedRange) (string, error) {
	page, err := objectPage(m)
	if err != nil {
		return "", err
	}
	ctx, cancel := r.budget(ctx)
	defer cancel()
	shards, err := listShards(ctx, r.kin, r.cfg.Stream, r.cfg.StreamARN)
	if err != nil {
		return "", err
	}
	info := shardInfo{id: fr.ShardID}
	for _, sh := range shards {
		if sh.id == fr.ShardID {
			info = sh
		}
	}
	if info.startingSeq != "" && seqnum.Compare(fr.To, info.startingSeq) < 0 {
		return "the range lies below the shard's starting sequence number: the shard never held it, so the mapping cannot have given it up", nil
	}
	b, done, err := r.givenUpBounds(ctx, info, fr.From, fr.To, fr.Lanes, fr.LaneKey)
	if err != nil || done {
		return "", err
	}
	b.lane = -1 // the object is its batch: every record of it is of the batch's lane
	_, refused := b.keep(page, fr.From)
	return refused, nil
}

// objectLaneKey is the partition key of the object's first record ("" when it holds none).
func objectLaneKey(m onfailure.Message) string {
	if m.Payload == nil || len(m.Payload.Records) == 0 {
		return ""
	}
	return m.Payload.Records[0].Kinesis.PartitionKey
}

// trimmedAt reports whether Kinesis refuses AT_SEQUENCE_NUMBER seq as older than the trim
// horizon (the record has expired), and gone when the shard itself is not found (it left the
// stream with its records).
func (r *Reconciler) trimmedAt(ctx context.Context, shardID, seq string) (trimmed, gone bool, _ error) {
	rd := r.reader(shardID, false)
	err := rd.open(ctx, types.ShardIteratorTypeAtSequenceNumber, seq)
	var nf *types.ResourceNotFoundException
	switch {
	case errors.Is(err, errTrimmed):
		return true, false, nil
	case errors.Is(err, errNoRecord):
		return false, false, nil // proves nothing: ReplayRange reads from the trim horizon
	case errors.As(err, &nf):
		return false, true, nil
	}
	return false, false, err
}

// ReplayObjectRecords replays the records of an S3 destination's object (m from
// onfailure.ParseObject) through the pipeline, in sequence order, as ReplayRange replays a
// page read from the stream: the ledger skips the records already processed or parked (by
// record id), so replaying an object twice, or after the stream path, processes nothing twice.
// Accounted: every record of the object is processed or parked. The watermark is not moved.
func (r *Reconciler) ReplayObjectRecords(ctx context.Context, m onfailure.Message) (RangeReport, error) {
	b := m.KinesisBatchInfo
	rep := RangeReport{ShardReport: ShardReport{ShardID: b.ShardID}}
	shard := r.shard(b.ShardID)
	if err := (recordid.Shard{Group: r.cfg.Group, Stream: r.cfg.Stream, ShardID: b.ShardID}).Validate(); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrInvalidRange, err)
	}
	page, err := objectPage(m)
	if err != nil {
		return rep, err
	}
	ctx, cancel := r.budget(ctx)
	defer cancel()
	var counters checkpoint.Counters
	defer r.addCounters(ctx, shard, &counters)
	_, failedSeq, err := r.replayPage(ctx, shard, page, &rep.ShardReport, &counters, false)
	if err != nil {
		return rep, err
	}
	if failedSeq != "" {
		rep.OldestUnverified = arrivalOf(page, failedSeq)
		return rep, nil
	}
	r.report(b.ShardID, page, &rep.ShardReport)
	rep.Accounted = true
	return rep, nil
}

// objectPage is the object's records as a page read from the stream would hold them.
func objectPage(m onfailure.Message) ([]types.Record, error) {
	if m.Payload == nil || len(m.Payload.Records) == 0 {
		return nil, fmt.Errorf("%w: the object holds no records", ErrInvalidRange)
	}
	page := make([]types.Record, 0, len(m.Payload.Records))
	for _, er := range m.Payload.Records {
		k := er.Kinesis
		if err := seqnum.Validate(k.SequenceNumber); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidRange, err)
		}
		page = append(page, types.Record{SequenceNumber: aws.String(k.SequenceNumber), PartitionKey: aws.String(k.PartitionKey),
			Data: k.Data, ApproximateArrivalTimestamp: aws.Time(k.ApproximateArrivalTimestamp.Time)})
	}
	return page, nil
}
