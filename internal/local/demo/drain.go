package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// drainLoop receives and deletes a queue's messages into t until stop is closed, then until the
// queue holds no message at all, visible or in flight, for 3 seconds (bounded by a minute), or
// until ctx ends.
func (v *variant) drainLoop(ctx context.Context, stop <-chan struct{}, url string, t *loadgen.Tally, decode func(string) (string, []byte, error)) {
	c := drainClient{c: v.e.direct.sqs, errs: &v.drainErrs, log: v.log}
	for ctx.Err() == nil {
		select {
		case <-stop:
			v.drainFinal(ctx, c, url, t, decode)
			return
		default:
		}
		if _, err := loadgen.Drain(ctx, c, url, time.Second, t, decode); err != nil && ctx.Err() == nil {
			v.log.Warn("draining a queue failed; retrying", "queue_url", url, "error", err.Error())
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// drainFinal drains url until it is empty and nothing is in flight. A receive whose response
// was lost on the way (it happens under load) leaves its messages invisible until their
// visibility timeout ends: stopping at the first quiet moment would count them as lost.
func (v *variant) drainFinal(ctx context.Context, c drainClient, url string, t *loadgen.Tally, decode func(string) (string, []byte, error)) {
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for round := 0; final.Err() == nil; round++ {
		before := t.Unique() + t.Duplicates()
		_, _ = loadgen.Drain(final, c, url, 3*time.Second, t, decode)
		if round > 0 {
			v.lateDrained.Add(int64(t.Unique() + t.Duplicates() - before))
		}
		visible, inFlight, err := queueDepth(final, v.e.direct.sqs, url)
		if err == nil && visible == 0 && inFlight == 0 {
			return
		}
		if err := ctxtime.Sleep(final, time.Second); err != nil {
			return
		}
	}
}

// drainVisibility is how long a message received by the drain stays invisible: short, so that
// messages of a receive whose response was lost come back quickly.
const drainVisibility = 5

// drainClient is the SQS client loadgen.Drain uses: every receive asks for a short visibility
// timeout, and receive errors are counted.
type drainClient struct {
	c    *sqs.Client
	errs *atomic.Int64
	log  *slog.Logger
}

func (d drainClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	in.VisibilityTimeout = drainVisibility
	out, err := d.c.ReceiveMessage(ctx, in, opts...)
	if err != nil && ctx.Err() == nil {
		d.errs.Add(1)
		d.log.Warn("demo drain: receive failed; its messages come back after the visibility timeout",
			"queue_url", aws.ToString(in.QueueUrl), "error", err.Error())
	}
	return out, err
}

func (d drainClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return d.c.DeleteMessageBatch(ctx, in, opts...)
}

// queueDepth returns the messages visible and in flight in a queue.
func queueDepth(ctx context.Context, c *sqs.Client, url string) (visible, inFlight int, err error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		return 0, 0, err
	}
	visible, err1 := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, err2 := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("demo: queue attributes of %s: %w", url, err)
	}
	return visible, inFlight, nil
}

// decodeParked reads a parked message (internal/park) and checks that it carries the produced
// payload byte for byte. Only such messages count as parked.
func (v *variant) decodeParked(body string) (string, []byte, error) {
	v.parkMsgs.Add(1)
	id, data, err := v.checkParked(body)
	if err != nil {
		v.parkBad.Add(1)
		if v.log != nil {
			v.log.Warn("demo drain: a parked message does not carry its record's payload",
				"error", err.Error(), "body_prefix", prefix(body, 300))
		}
		return "", nil, err
	}
	return id, data, nil
}

func (v *variant) checkParked(body string) (string, []byte, error) {
	m, err := park.Decode(body)
	if err != nil {
		return "", nil, err
	}
	id, _, err := loadgen.PayloadID(string(m.Data))
	if err != nil {
		return "", nil, err
	}
	if want, ok := v.expected[id]; !ok || string(want) != string(m.Data) {
		return "", nil, fmt.Errorf("demo: parked payload of %s (%d bytes) differs from the produced one (%d bytes, known %t)",
			id, len(m.Data), len(want), ok)
	}
	if m.Source == pipeline.SourceReconciler {
		v.parkedByReconciler.add(id)
	}
	return id, m.Data, nil
}

// prefix is s cut to at most n bytes.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
