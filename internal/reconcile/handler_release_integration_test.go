package reconcile

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// failureQueues is a failure queue with a dead-letter queue after maxReceive receives, as the
// template configures them.
type failureQueues struct {
	url, arn, dlq string
}

func newFailureQueues(t *testing.T, s *stack, maxReceive int) failureQueues {
	t.Helper()
	ctx := context.Background()
	arnOf := func(url string) string {
		attrs, err := s.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		return attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	}
	dlq := stacktest.Queue(t, "failure-dlq", false)
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arnOf(dlq), maxReceive)
	fq, err := s.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.Name(t, "failure")),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameRedrivePolicy): policy}})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(fq.QueueUrl)
	return failureQueues{url: url, arn: arnOf(url), dlq: dlq}
}

// poll is Lambda's SQS event source for one invocation: receive up to 10 messages, invoke with
// them (the function timeout as ctx deadline), delete what the partial batch response does not
// name and make the rest visible again at once. It returns the messages received.
func (q failureQueues) poll(t *testing.T, s *stack, h *Handler, timeout time.Duration) int {
	t.Helper()
	ctx := context.Background()
	out, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10,
		WaitTimeSeconds: 1, VisibilityTimeout: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) == 0 {
		return 0
	}
	var ev events.SQSEvent
	for _, m := range out.Messages {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), EventSource: "aws:sqs", EventSourceARN: q.arn, AWSRegion: "us-east-1"})
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	resp := h.HandleSQS(ictx, ev)
	cancel()
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, m := range out.Messages {
		var err error
		if failed[aws.ToString(m.MessageId)] {
			_, err = s.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle})
		} else {
			_, err = s.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return len(out.Messages)
}

func (q failureQueues) dead(t *testing.T, s *stack) []string {
	t.Helper()
	d, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.dlq), MaxNumberOfMessages: 10,
		WaitTimeSeconds: 0, VisibilityTimeout: 60})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range d.Messages {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

// One SQS batch of on-failure messages whose first range hangs (its record's Process blocks
// until the invocation's time is up) must not fail the other messages untried: before, each
// invocation spent all its time on the first message and reported the others failed without
// an attempt, so after maxReceiveCount they reached the dead-letter queue unreplayed. Now they
// are released untried and replayed by later invocations; only real attempts count.
func TestUntriedFailureMessagesAreReleasedNotDeadLettered(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all := s.putN(30, "t", keyMod(3), nil)
	hang := all[0].id()
	rec := newRecorder()
	rec.fail = func(ctx context.Context, r pipeline.Record) error {
		if r.ID == hang {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	q := newFailureQueues(t, s, 2)
	bodies := []string{
		failureMessage(t, s.stream, all[0].shard, all[0].seq, all[9].seq, 10),
		failureMessage(t, s.stream, all[0].shard, all[10].seq, all[19].seq, 10),
		failureMessage(t, s.stream, all[0].shard, all[20].seq, all[29].seq, 10),
	}
	for _, b := range bodies {
		if _, err := s.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var logs logBuffer
	r := s.reconciler(s.pipeline(rec.process, 5), Config{DeadlineMargin: 500 * time.Millisecond}, WithLogger(logs.logger()))
	h := NewHandler(r, nil, logs.logger(), WithRelease(s.sqs), WithMinAttempt(4*time.Second), WithReleaseReserve(300*time.Millisecond))

	deadline := time.Now().Add(150 * time.Second)
	done := func() bool {
		c := rec.counts()
		for _, p := range all[10:] {
			if c[p.id()] == 0 {
				return false
			}
		}
		return true
	}
	var dead []string
	for time.Now().Before(deadline) && !(done() && len(dead) > 0) {
		q.poll(t, s, h, 8*time.Second)
		dead = append(dead, q.dead(t, s)...)
	}
	for _, b := range bodies[1:] {
		if slices.Contains(dead, b) {
			t.Errorf("a message whose range was never tried reached the dead-letter queue: %s", b)
		}
	}
	checkOnce(t, "ranges after the hanging one", onlyIDs(rec.counts(), idsOf(all[10:])), idsOf(all[10:]))
	if !containsLine(logs.lines("INFO"), "released to its queue without counting a receive") {
		t.Errorf("no release was logged")
	}
	if t.Failed() {
		for _, l := range logs.lines("ERROR") {
			t.Logf("ERROR %v %v", l["msg"], l["error"])
		}
	}
}

// onlyIDs keeps the counts of ids.
func onlyIDs(counts map[recordid.ID]int, ids []recordid.ID) map[recordid.ID]int {
	out := map[recordid.ID]int{}
	for _, id := range ids {
		if n, ok := counts[id]; ok {
			out[id] = n
		}
	}
	return out
}
