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
)

// The fan-out on the local stack: the coordinator queues both shards of a stream on a real FIFO
// queue (the shard as message group), each message received from it is one shard's walk, and
// every gap of both shards is replayed once; the shards' items record verifiedAsOf, the queue
// is empty at the end, and a forged message (another group) is refused and stays on the queue.
func TestFanOutOnTheStack(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2)
	all := s.putN(60, "fan", keyMod(11), nil)
	byShard := map[string][]put{}
	for _, p := range all {
		byShard[p.shard] = append(byShard[p.shard], p)
	}
	if len(byShard) != 2 {
		t.Fatalf("records on %d shards, want 2", len(byShard))
	}
	cons := s.pipeline(newRecorder().process, 3)
	var missing []put
	for _, recs := range byShard {
		// Every third record is skipped by the consumer; the last moves the checkpoint.
		var batch []put
		for i, p := range recs {
			if i%3 == 1 && i < len(recs)-1 {
				missing = append(missing, p)
				continue
			}
			batch = append(batch, p)
		}
		s.consume(cons, batch)
	}
	queueURL := stacktest.Queue(t, "verify", true)
	attrs, err := s.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	queueARN := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	rec := newRecorder()
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, discard(), WithVerifyQueue(s.sqs, queueURL))
	if !h.isVerifyQueue(queueARN) {
		t.Fatalf("the handler does not take %s (the queue's ARN) for its verify queue %s", queueARN, queueURL)
	}

	sum, err := h.HandleSchedule(context.Background())
	if err != nil || sum.ShardsQueued != 2 {
		t.Fatalf("coordinator: %+v, %v", sum, err)
	}
	if _, err := s.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageGroupId: aws.String("forged"),
		MessageDeduplicationId: aws.String("forged"), MessageBody: aws.String(fmt.Sprintf(
			`{"gapless":{"version":1,"command":"verify","group":"other","stream":%q,"verify":{"shardId":%q}}}`, s.stream, all[0].shard))}); err != nil {
		t.Fatal(err)
	}
	// The event source, BatchSize 1: receive, invoke, delete what succeeded.
	var walked []string
	refused := 0
	deadline := time.Now().Add(time.Minute)
	for empty := 0; empty < 2 && time.Now().Before(deadline); {
		out, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 1,
			WaitTimeSeconds: 1, VisibilityTimeout: 2, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		m := out.Messages[0]
		group := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
		msg := events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), EventSource: "aws:sqs",
			EventSourceARN: queueARN, Attributes: map[string]string{"MessageGroupId": group}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp := h.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{msg}})
		cancel()
		if len(resp.BatchItemFailures) > 0 {
			if group != "forged" {
				t.Fatalf("walk of %s failed", group)
			}
			refused++
			// Left on the queue; kept out of sight for the rest of the test.
			if _, err := s.sqs.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(queueURL),
				ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 300}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		walked = append(walked, group)
		if _, err := s.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(walked)
	if want := s.shardIDs(); !slices.Equal(walked, want) {
		t.Errorf("walked %v, want each shard once: %v", walked, want)
	}
	if refused != 1 {
		t.Errorf("the forged message was refused %d times, want 1", refused)
	}
	left, err := s.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil || left.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] != "1" {
		t.Errorf("messages left in flight: %v, %v; want the refused one, still on the queue", left.Attributes, err)
	}
	checkOnce(t, "replayed", rec.counts(), idsOf(missing))
	for id, recs := range byShard {
		st := s.state(id)
		if st.Watermark != recs[len(recs)-1].seq || st.VerifiedAsOf.IsZero() {
			t.Errorf("%s: watermark %s (want %s), verifiedAsOf %v", id, st.Watermark, recs[len(recs)-1].seq, st.VerifiedAsOf)
		}
	}
}
