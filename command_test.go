package gapless_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

// TestReconcilerRedrivesThroughItsOwnProcess: a service's reconciler, built with its own
// Process and nothing else in its main, answers the operator's redrive command: the parked
// record and the record of its key held behind it (ON_PARK=hold-key) go through that Process,
// in order, after the fix, and the key is released. Nothing reaches a target queue (there is
// none).
func TestReconcilerRedrivesThroughItsOwnProcess(t *testing.T) {
	t.Parallel()
	st := newStack()
	st.env["MAX_RECORD_ATTEMPTS"] = "1"
	st.env["ON_PARK"] = "hold-key"
	ctx := context.Background()
	var mu sync.Mutex
	broken := true
	var applied []string
	process := func(_ context.Context, r gapless.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return errors.New("the table is missing")
		}
		applied = append(applied, string(r.Data))
		return nil
	}
	opts := []gapless.Option{gapless.WithGetenv(st.getenv), gapless.WithAWSConfig(st.aws), gapless.WithOutput(&syncBuffer{})}
	consumer, err := gapless.NewConsumer(ctx, process, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := consumer.Handle(ctx, st.put("head", "behind")); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("consumer: %+v, %v; want both records parked (the head, then its key's next behind it)", resp, err)
	}
	if n := parkedCount(t, st); n != 2 {
		t.Fatalf("%d parked messages, want 2", n)
	}

	mu.Lock()
	broken = false // the fix
	mu.Unlock()
	reconciler, err := gapless.NewReconciler(ctx, process, opts...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := reconciler.Handle(ctx, json.RawMessage(`{"gapless":{"version":1,"command":"redrive","group":"example"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := out.(reconcile.CommandResponse)
	if !ok {
		t.Fatalf("answer %T %+v: the command did not run", out, out)
	}
	r := resp.Gapless.Redrive
	if !resp.Gapless.Done || resp.Gapless.OnPark != "hold-key" || r == nil || r.Received != 2 || r.Processed != 2 || r.Released != 1 || r.Left+r.Held != 0 {
		t.Fatalf("answer %+v, redrive %+v: want both processed and the key released", resp.Gapless, r)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(applied, []string{"head", "behind"}) {
		t.Errorf("the service's Process applied %q, want the head, then the record behind it", applied)
	}
	if n := parkedCount(t, st); n != 0 {
		t.Errorf("%d parked messages left", n)
	}
}

// parkedCount is the parked queue's depth (visible and in flight).
func parkedCount(t *testing.T, st *stack) int {
	t.Helper()
	out, err := sqs.NewFromConfig(st.aws).GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(st.env["PARKED_QUEUE_URL"]), AttributeNames: []sqstypes.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range out.Attributes {
		var k int
		if err := json.Unmarshal([]byte(v), &k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}
