package reconcile

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// releaseQueue is a function-typed SQS fake for releases.
type releaseQueue struct {
	mu      sync.Mutex
	sendErr error
	urlOf   []string // GetQueueUrl calls: queue name and owner
	sent    []string // bodies, to the URL below
	sentTo  []string
}

func (f *releaseQueue) GetQueueUrl(_ context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urlOf = append(f.urlOf, aws.ToString(in.QueueName)+"@"+aws.ToString(in.QueueOwnerAWSAccountId))
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.local/" + aws.ToString(in.QueueName))}, nil
}

func (f *releaseQueue) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sendErr != nil {
		return nil, f.sendErr
	}
	f.sent = append(f.sent, aws.ToString(in.MessageBody))
	f.sentTo = append(f.sentTo, aws.ToString(in.QueueUrl))
	return &sqs.SendMessageOutput{MessageId: aws.String("new")}, nil
}

// With less than the minimum attempt time left, every message after the first is released
// (sent back to its queue, not reported) — or, when it cannot be, reported failed.
func TestHandleSQSReleasesWhatItHasNoTimeFor(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 3, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{DeadlineMargin: time.Millisecond})
	const arn = "arn:aws:sqs:us-east-1:123456789012:orders-failure"
	ev := events.SQSEvent{}
	for i, body := range []string{"first is always tried (malformed: fails)", "b1", "b2"} {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: []string{"m0", "m1", "m2"}[i], Body: body,
			EventSource: "aws:sqs", EventSourceARN: arn})
	}
	failedIDs := func(resp events.SQSEventResponse) []string {
		var ids []string
		for _, f := range resp.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		return ids
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name       string
		release    *releaseQueue
		wantFailed []string
		wantSent   []string
	}{
		{"released", &releaseQueue{}, []string{"m0"}, []string{"b1", "b2"}},
		{"send fails: reported failed", &releaseQueue{sendErr: errors.New("throttled")}, []string{"m0", "m1", "m2"}, nil},
		{"no SQS client: reported failed", nil, []string{"m0", "m1", "m2"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := []HandlerOption{WithMinAttempt(2 * time.Minute)}
			if tc.release != nil {
				opts = append(opts, WithRelease(tc.release))
			}
			h := NewHandler(u.r, nil, discard(), opts...)
			resp := h.HandleSQS(ctx, ev)
			if got := failedIDs(resp); !slices.Equal(got, tc.wantFailed) {
				t.Fatalf("batch item failures %v, want %v", got, tc.wantFailed)
			}
			if tc.release == nil {
				return
			}
			if !slices.Equal(tc.release.sent, tc.wantSent) {
				t.Fatalf("released %v, want %v", tc.release.sent, tc.wantSent)
			}
			for _, to := range tc.release.sentTo {
				if to != "https://sqs.local/orders-failure" {
					t.Fatalf("released to %s", to)
				}
			}
			if len(tc.release.urlOf) != 1 || tc.release.urlOf[0] != "orders-failure@123456789012" {
				t.Fatalf("GetQueueUrl calls %v, want one for orders-failure of 123456789012", tc.release.urlOf)
			}
		})
	}
}
