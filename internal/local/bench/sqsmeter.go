package bench

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/gapless-dev/gapless/process"
)

// List prices (USD, us-east-1) the cost columns use.
const (
	// SQSPerMillionRequests: standard queue requests, "Each 64 KB chunk of a payload is billed
	// as 1 request" (https://aws.amazon.com/sqs/pricing/).
	SQSPerMillionRequests = 0.40
	// DynamoDB on-demand: per million write request units and read request units
	// (https://aws.amazon.com/dynamodb/pricing/on-demand/).
	DDBPerMillionWRU = 0.625
	DDBPerMillionRRU = 0.125
)

// SQSMeter counts the SQS requests of one client: logical calls, HTTP attempts (what SQS bills,
// retries included) and billed requests (each attempt counts one per started 64 KB of the
// messages' payload, body plus attributes). Safe for concurrent use.
type SQSMeter struct {
	mu sync.Mutex
	s  SQSSnapshot
}

// SQSSnapshot is a copy of an SQSMeter's counters.
type SQSSnapshot struct {
	Calls, Attempts, Billed, Messages int64
}

// Sub returns s minus earlier.
func (s SQSSnapshot) Sub(earlier SQSSnapshot) SQSSnapshot {
	return SQSSnapshot{Calls: s.Calls - earlier.Calls, Attempts: s.Attempts - earlier.Attempts,
		Billed: s.Billed - earlier.Billed, Messages: s.Messages - earlier.Messages}
}

// Snapshot copies the counters.
func (m *SQSMeter) Snapshot() SQSSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s
}

type chunksKey struct{}

// Options returns a client option adding the meter's middleware: sqs.NewFromConfig(cfg, m.Options()).
func (m *SQSMeter) Options() func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			// Initialize runs once per logical call and sees the typed input.
			if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bench.SQSCall",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					payload, msgs := sqsPayload(in.Parameters)
					m.mu.Lock()
					m.s.Calls++
					m.s.Messages += int64(msgs)
					m.mu.Unlock()
					return next.HandleInitialize(context.WithValue(ctx, chunksKey{}, max(1, (payload+process.BillingChunk-1)/process.BillingChunk)), in)
				}), middleware.Before); err != nil {
				return err
			}
			// Finalize after the retry middleware runs once per HTTP attempt.
			return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("bench.SQSAttempt",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					chunks, _ := ctx.Value(chunksKey{}).(int)
					m.mu.Lock()
					m.s.Attempts++
					m.s.Billed += int64(max(chunks, 1))
					m.mu.Unlock()
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

// sqsPayload is the billed payload of a send (messages' bodies and attributes) and its message count.
func sqsPayload(params any) (bytes, messages int) {
	attrs := func(a map[string]sqstypes.MessageAttributeValue) int {
		n := 0
		for k, v := range a {
			n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
		}
		return n
	}
	switch in := params.(type) {
	case *sqs.SendMessageInput:
		return process.Size(in), 1
	case *sqs.SendMessageBatchInput:
		for _, e := range in.Entries {
			bytes += len(aws.ToString(e.MessageBody)) + attrs(e.MessageAttributes)
		}
		return bytes, len(in.Entries)
	}
	return 0, 0
}
