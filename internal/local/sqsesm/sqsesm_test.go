package sqsesm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.SQS)) }

func TestConfigRefusesWhatLambdaRefuses(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "QueueURL"},
		{Config{QueueURL: "q", BatchSize: 11}, "BatchSize 11"},
		{Config{QueueURL: "q", MaximumConcurrency: 1}, "MaximumConcurrency 1"},
		{Config{QueueURL: "q", MaximumConcurrency: 1001}, "MaximumConcurrency 1001"},
		{Config{QueueURL: "q", FunctionTimeout: -time.Second}, "FunctionTimeout"},
	} {
		_, err := New(context.Background(), nil, tc.cfg, nil)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrConfig naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestFailedIDs(t *testing.T) {
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a"}, {MessageId: "b"}, {MessageId: "c"}}}
	fail := func(ids ...string) events.SQSEventResponse {
		var r events.SQSEventResponse
		for _, id := range ids {
			r.BatchItemFailures = append(r.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		resp   events.SQSEventResponse
		err    error
		want   []string
		wantOK bool
	}{
		{"success deletes all", fail(), nil, nil, true},
		{"partial failure keeps only the named", fail("b"), nil, []string{"b"}, true},
		{"function error keeps the batch", fail(), errors.New("boom"), []string{"a", "b", "c"}, false},
		{"empty itemIdentifier keeps the batch", fail(""), nil, []string{"a", "b", "c"}, false},
		{"unknown itemIdentifier keeps the batch", fail("a", "zz"), nil, []string{"a", "b", "c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := failedIDs(ev, tc.resp, tc.err)
			var ids []string
			for id := range got {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, tc.want) || ok != tc.wantOK {
				t.Errorf("failedIDs = %v, %v; want %v, %v", ids, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestOnTheStack runs the mapping over a real FIFO queue: every message reaches the function
// with its message group, at most MaximumConcurrency invocations run at once, a message the
// function fails comes back after the visibility timeout and is deleted once it succeeds.
func TestOnTheStack(t *testing.T) {
	c := stacktest.SQS(t)
	url := stacktest.Queue(t, "sqsesm", true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameVisibilityTimeout): "1"}}); err != nil {
		t.Fatal(err)
	}
	const groups, perGroup = 4, 3
	for g := range groups {
		for i := range perGroup {
			body := fmt.Sprintf("g%d-%d", g, i)
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body),
				MessageGroupId: aws.String(fmt.Sprintf("g%d", g)), MessageDeduplicationId: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var (
		mu                 sync.Mutex
		seen               = map[string]int{}
		running, maxSeen   int
		badGroup, badARN   []string
		firstAttemptOfG0_0 = true
	)
	fn := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		mu.Lock()
		running++
		maxSeen = max(maxSeen, running)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // long enough for concurrent pollers to overlap
		mu.Lock()
		defer mu.Unlock()
		running--
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			if g := r.Attributes["MessageGroupId"]; g != r.Body[:2] {
				badGroup = append(badGroup, r.Body+" in group "+g)
			}
			if r.EventSource != "aws:sqs" || r.EventSourceARN == "" || r.EventSourceARN[:12] != "arn:aws:sqs:" {
				badARN = append(badARN, r.EventSource+" "+r.EventSourceARN)
			}
			if _, ok := ctx.Deadline(); !ok {
				t.Error("invocation has no deadline")
			}
			if r.Body == "g0-0" && firstAttemptOfG0_0 {
				firstAttemptOfG0_0 = false
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
				continue
			}
			seen[r.Body]++
		}
		return resp, nil
	}
	m, err := New(ctx, c, Config{QueueURL: url, BatchSize: 1, MaximumConcurrency: 2, FunctionTimeout: 5 * time.Second}, fn)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	for m.Stats.Deleted.Load() < groups*perGroup && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		for i := range perGroup {
			if b := fmt.Sprintf("g%d-%d", g, i); seen[b] != 1 {
				t.Errorf("%s processed %d times, want once", b, seen[b])
			}
		}
	}
	if len(badGroup) > 0 || len(badARN) > 0 {
		t.Errorf("records without their group %v or queue ARN %v", badGroup, badARN)
	}
	if maxSeen > 2 {
		t.Errorf("%d invocations ran at once, MaximumConcurrency is 2", maxSeen)
	}
	if maxSeen < 2 {
		t.Errorf("invocations never overlapped (max %d): the pollers are not concurrent", maxSeen)
	}
	if got := m.Stats.Failed.Load(); got != 1 {
		t.Errorf("Stats.Failed = %d, want 1 (g0-0's first attempt)", got)
	}
	if got := m.Stats.Invocations.Load(); got != groups*perGroup+1 {
		t.Errorf("Stats.Invocations = %d, want %d", got, groups*perGroup+1)
	}
	if m.Stats.Busy() < time.Duration(groups*perGroup)*50*time.Millisecond {
		t.Errorf("Stats.Busy = %v, want at least the invocations' sleeps", m.Stats.Busy())
	}
}
