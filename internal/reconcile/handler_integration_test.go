package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// failureMessage builds an on-failure message in AWS's format for recs[from..to].
func failureMessage(t *testing.T, stream, shardID, first, last string, n int) string {
	t.Helper()
	m := onfailure.Message{
		RequestContext:  onfailure.RequestContext{RequestID: "c1d0e5b2-0000-4000-8000-000000000001", FunctionARN: "arn:aws:lambda:us-east-1:000000000000:function:consumer", Condition: onfailure.ConditionRetryAttemptsExhausted, ApproximateInvokeCount: 3},
		ResponseContext: &onfailure.ResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST", FunctionError: "Unhandled"},
		Version:         "1.0",
		Timestamp:       time.Now().UTC().Format(time.RFC3339Nano),
		KinesisBatchInfo: onfailure.BatchInfo{
			ShardID: shardID, StartSequenceNumber: first, EndSequenceNumber: last,
			ApproximateArrivalOfFirstRecord: time.Now().UTC().Format(time.RFC3339Nano),
			ApproximateArrivalOfLastRecord:  time.Now().UTC().Format(time.RFC3339Nano),
			BatchSize:                       n, StreamARN: "arn:aws:kinesis:us-east-1:000000000000:stream/" + stream,
		},
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sqsEvent(bodies ...string) events.SQSEvent {
	var ev events.SQSEvent
	for i, b := range bodies {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("msg-%d", i), Body: b, EventSource: "aws:sqs"})
	}
	return ev
}

// emf collects the metric lines an Emitter writes.
type emf struct{ buf logBuffer }

func (e *emf) emitter() *metrics.Emitter {
	return metrics.New(&e.buf, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: "g"}})
}

func (e *emf) last(t *testing.T) metrics.Line {
	t.Helper()
	e.buf.mu.Lock()
	defer e.buf.mu.Unlock()
	var last metrics.Line
	sc := bufio.NewScanner(bytes.NewReader(e.buf.b.Bytes()))
	n := 0
	for sc.Scan() {
		l, err := metrics.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("metric line: %v", err)
		}
		last, n = l, n+1
	}
	if n == 0 {
		t.Fatal("no metric line written")
	}
	return last
}

func TestFailureQueueMessagesReplayExactlyTheirRange(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, _ := gapped(t, s, 30, func(i int) bool { return i < 5 || i >= 25 })
	shardID := all[0].shard
	rec := newRecorder()
	var logs logBuffer
	var m emf
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4}, WithLogger(logs.logger())), m.emitter(), logs.logger())
	ctx := context.Background()
	valid := failureMessage(t, s.stream, shardID, all[10].seq, all[19].seq, 10)

	t.Run("range", func(t *testing.T) {
		resp := h.HandleSQS(ctx, sqsEvent(valid))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", resp.BatchItemFailures)
		}
		checkOnce(t, "replay", rec.counts(), idsOf(all[10:20]))
		if l := m.last(t); l.Values["GapsReplayed"] != 10 || l.Values["GapsDetected"] != 10 || l.Dimensions["Group"] != "g" {
			t.Errorf("metrics %v %v", l.Values, l.Dimensions)
		}
	})
	t.Run("duplicate message replays nothing", func(t *testing.T) {
		resp := h.HandleSQS(ctx, sqsEvent(valid))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", resp.BatchItemFailures)
		}
		if n := len(rec.delivered()); n != 10 {
			t.Errorf("%d deliveries after the duplicate, want 10", n)
		}
		if l := m.last(t); l.Values["GapsReplayed"] != 0 || l.Values["RecordsVerified"] != 10 {
			t.Errorf("metrics %v", l.Values)
		}
	})
	t.Run("malformed and foreign messages fail with an ERROR line", func(t *testing.T) {
		foreign := failureMessage(t, "another-stream", shardID, all[10].seq, all[19].seq, 10)
		resp := h.HandleSQS(ctx, sqsEvent(`{"KinesisBatchInfo": {"shardId": ""}}`, "not json", foreign, valid))
		var ids []string
		for _, f := range resp.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		if !slices.Equal(ids, []string{"msg-0", "msg-1", "msg-2"}) {
			t.Fatalf("batch item failures %v, want msg-0..2", ids)
		}
		errs := logs.lines("ERROR")
		for _, id := range ids {
			if !slices.ContainsFunc(errs, func(l map[string]any) bool { return l["message_id"] == id }) {
				t.Errorf("no ERROR line for %s", id)
			}
		}
		if !containsLine(errs, "malformed on-failure message") || !containsLine(errs, "another stream") {
			t.Errorf("ERROR lines do not say why: %v", errs)
		}
	})
	t.Run("expired start is counted lost", func(t *testing.T) {
		// Through internal/local/retention: the range's first records expired before anyone read them.
		s := newStack(t, 1)
		expire := s.trimmed()
		gone := s.putN(2, "gone", keyMod(3), nil)
		expire()
		held := s.putN(2, "held", keyMod(3), nil)
		var m emf
		h := NewHandler(s.reconciler(s.pipeline(newRecorder().process, 3), Config{PageLimit: 4}), m.emitter(), discard())
		resp := h.HandleSQS(ctx, sqsEvent(failureMessage(t, s.stream, gone[0].shard, gone[0].seq, held[1].seq, 4)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", resp.BatchItemFailures)
		}
		if l := m.last(t); l.Values["LostToRetention"] != 1 || l.Values["GapsReplayed"] != 2 {
			t.Errorf("metrics %v, want LostToRetention 1 and the 2 records held replayed", l.Values)
		}
		if st := s.state(gone[0].shard); st.LostToRetention != 1 {
			t.Errorf("lostToRetention on the item %d", st.LostToRetention)
		}
	})
}

// TestFailureQueueDeadLetter drives real SQS queues the way Lambda's SQS poller does (receive,
// invoke, delete what the partial batch response does not name): a malformed message ends in
// the failure queue's DLQ after maxReceiveCount receives; a valid one is deleted.
func TestFailureQueueDeadLetter(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, _ := gapped(t, s, 10, func(i int) bool { return i == 9 })
	ctx := context.Background()
	dlq := stacktest.Queue(t, "failure-dlq", false)
	attrs, err := s.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"2"}`, attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])
	fq, err := s.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.Name(t, "failure")),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameRedrivePolicy): policy}})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"{not a message", failureMessage(t, s.stream, all[0].shard, all[0].seq, all[8].seq, 9)} {
		if _, err := s.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: fq.QueueUrl, MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	var logs logBuffer
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, logs.logger())
	deadline := time.Now().Add(45 * time.Second)
	var dead []string
	for time.Now().Before(deadline) && len(dead) == 0 {
		out, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: fq.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 1})
		if err != nil {
			t.Fatal(err)
		}
		var ev events.SQSEvent
		for _, msg := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(msg.MessageId), ReceiptHandle: aws.ToString(msg.ReceiptHandle), Body: aws.ToString(msg.Body), EventSource: "aws:sqs"})
		}
		failed := map[string]bool{}
		for _, f := range h.HandleSQS(ctx, ev).BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, msg := range ev.Records {
			if !failed[msg.MessageId] {
				if _, err := s.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: fq.QueueUrl, ReceiptHandle: aws.String(msg.ReceiptHandle)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		d, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, WaitTimeSeconds: 0})
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range d.Messages {
			dead = append(dead, aws.ToString(msg.Body))
		}
		if len(out.Messages) == 0 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	if !slices.Equal(dead, []string{"{not a message"}) {
		t.Fatalf("dead-letter queue holds %q, want only the malformed message", dead)
	}
	checkOnce(t, "valid range", rec.counts(), idsOf(all[:9]))
	if n := len(logs.lines("ERROR")); n < 2 {
		t.Errorf("%d ERROR lines for a message received twice before dead-lettering", n)
	}
}
