// Package sqsesm is a local stand-in for AWS Lambda's SQS event-source mapping: it polls one
// queue and invokes a function with batches of its messages, MaximumConcurrency invocations at
// a time, and deletes the messages the function did not report as failed. The benchmarks and
// tests use it to run the reconciler's fan-out against the local stack the way Lambda runs it;
// it is not part of the deployed product.
//
// The rules it follows, and where AWS documents them:
//   - Lambda polls the queue, invokes the function synchronously with a batch of up to
//     BatchSize messages (1 to 10 for a FIFO queue), and deletes the batch when the function
//     succeeds; messages of a failed batch become visible again after the queue's visibility
//     timeout: https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html
//   - With FunctionResponseTypes [ReportBatchItemFailures] only the messages the response names
//     are retried; a function error, or a response naming an empty or unknown itemIdentifier,
//     fails the whole batch:
//     https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html
//   - MaximumConcurrency (2 to 1,000) caps the concurrent invocations of one event source:
//     https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html
//
// Where AWS is silent or this model is simpler: Lambda scales its pollers itself (five at first,
// more as the queue backs up); here MaximumConcurrency pollers run from the start, each
// receiving and invoking in turn, which is the steady state Lambda scales to. Lambda leaves a
// failed message's visibility alone (it returns when the timeout expires), and so does this
// mapping: it never calls ChangeMessageVisibility.
package sqsesm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Func is the function the mapping invokes: its ctx carries the function timeout as its
// deadline, and an error is a function error (the whole batch fails).
type Func func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// sqsAPI is the part of *sqs.Client the mapping calls.
type sqsAPI interface {
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// Config is the event-source mapping's configuration.
type Config struct {
	QueueURL string
	// BatchSize is the most messages per invocation, 1 to 10 (the FIFO limit); 0 means 10.
	BatchSize int
	// MaximumConcurrency is the most concurrent invocations, 2 to 1,000; 0 means 2.
	MaximumConcurrency int
	// FunctionTimeout is the deadline each invocation's ctx carries; 0 means 3 s (Lambda's
	// default function timeout).
	FunctionTimeout time.Duration
	// Region is each record's awsRegion; "" means us-east-1.
	Region string
}

// ErrConfig is returned by New for a configuration Lambda would refuse.
var ErrConfig = errors.New("sqsesm: invalid configuration")

func (c *Config) validate() error {
	switch {
	case c.QueueURL == "":
		return fmt.Errorf("%w: QueueURL is empty", ErrConfig)
	case c.BatchSize < 0 || c.BatchSize > 10:
		return fmt.Errorf("%w: BatchSize %d is outside 1..10", ErrConfig, c.BatchSize)
	case c.MaximumConcurrency != 0 && (c.MaximumConcurrency < 2 || c.MaximumConcurrency > 1000):
		return fmt.Errorf("%w: MaximumConcurrency %d is outside 2..1000", ErrConfig, c.MaximumConcurrency)
	case c.FunctionTimeout < 0:
		return fmt.Errorf("%w: FunctionTimeout %v is negative", ErrConfig, c.FunctionTimeout)
	}
	if c.BatchSize == 0 {
		c.BatchSize = 10
	}
	if c.MaximumConcurrency == 0 {
		c.MaximumConcurrency = 2
	}
	if c.FunctionTimeout == 0 {
		c.FunctionTimeout = 3 * time.Second
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return nil
}

// Stats counts what the mapping did; every field is safe to read while it runs.
type Stats struct {
	Invocations   atomic.Int64
	Messages      atomic.Int64 // messages handed to the function
	Deleted       atomic.Int64
	Failed        atomic.Int64 // messages left for the visibility timeout to return
	FunctionError atomic.Int64 // invocations that returned an error or an invalid response
	busy          atomic.Int64 // nanoseconds spent inside the function, summed over invocations
}

// Busy is the time spent inside the function summed over invocations: what Lambda bills.
func (s *Stats) Busy() time.Duration { return time.Duration(s.busy.Load()) }

// Mapping polls one queue and invokes one function.
type Mapping struct {
	c     sqsAPI
	cfg   Config
	fn    Func
	arn   string
	Stats Stats
}

// New checks cfg and reads the queue's ARN, which each record carries as eventSourceARN.
func New(ctx context.Context, c sqsAPI, cfg Config, fn Func) (*Mapping, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(cfg.QueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, fmt.Errorf("sqsesm: read the ARN of %s: %w", cfg.QueueURL, err)
	}
	arn := out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		return nil, fmt.Errorf("sqsesm: %s has no QueueArn attribute", cfg.QueueURL)
	}
	return &Mapping{c: c, cfg: cfg, fn: fn, arn: arn}, nil
}

// Run polls until ctx ends and returns ctx's error. Each of MaximumConcurrency pollers
// long-polls (one second), invokes the function with what it received and deletes the
// messages the invocation did not fail. A receive or delete error is retried on the next poll:
// an undeleted message comes back after its visibility timeout, so nothing is lost.
func (m *Mapping) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range m.cfg.MaximumConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				m.poll(ctx)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

func (m *Mapping) poll(ctx context.Context) {
	out, err := m.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(m.cfg.QueueURL), MaxNumberOfMessages: int32(m.cfg.BatchSize), WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil || len(out.Messages) == 0 {
		if err != nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // a failing queue is not polled in a hot loop
		}
		return
	}
	ev := Event(m.arn, m.cfg.Region, out.Messages)
	m.Stats.Invocations.Add(1)
	m.Stats.Messages.Add(int64(len(out.Messages)))
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.FunctionTimeout)
	start := time.Now()
	resp, err := m.fn(ictx, ev)
	m.Stats.busy.Add(int64(time.Since(start)))
	cancel()
	failed, ok := failedIDs(ev, resp, err)
	if !ok {
		m.Stats.FunctionError.Add(1)
	}
	var del []sqstypes.DeleteMessageBatchRequestEntry
	for i, msg := range out.Messages {
		if failed[aws.ToString(msg.MessageId)] {
			m.Stats.Failed.Add(1)
			continue
		}
		del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle})
	}
	if len(del) == 0 {
		return
	}
	dout, err := m.c.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(m.cfg.QueueURL), Entries: del})
	if err != nil {
		return // the messages come back after their visibility timeout: a duplicate invocation, not a loss
	}
	m.Stats.Deleted.Add(int64(len(dout.Successful)))
}

// failedIDs is the set of message ids to leave on the queue; ok is false when the whole batch
// failed because the function errored or its response named an id that is empty or not in the
// batch (Lambda treats both as a failure of every message).
func failedIDs(ev events.SQSEvent, resp events.SQSEventResponse, err error) (map[string]bool, bool) {
	all := make(map[string]bool, len(ev.Records))
	for _, r := range ev.Records {
		all[r.MessageId] = true
	}
	if err != nil {
		return all, false
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		if !all[f.ItemIdentifier] {
			return all, false
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, true
}

// Event is the event Lambda's SQS event source builds from received messages: each record has
// the message's id, receipt handle, body, MD5 of the body, system attributes (MessageGroupId,
// ApproximateReceiveCount, SentTimestamp, ...), message attributes, eventSource "aws:sqs" and
// the queue's ARN as eventSourceARN.
func Event(queueARN, region string, msgs []sqstypes.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(msgs))}
	for _, m := range msgs {
		r := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: aws.ToString(m.MD5OfBody), Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes: map[string]string{}, EventSource: "aws:sqs", EventSourceARN: queueARN, AWSRegion: region,
		}
		for k, v := range m.Attributes {
			r.Attributes[k] = v
		}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{
					StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType),
				}
			}
		}
		ev.Records = append(ev.Records, r)
	}
	return ev
}
