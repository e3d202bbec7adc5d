package esm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

func seqLess(a, b string) bool { return seqnum.Compare(a, b) < 0 }

// The OnFailure message is onfailure.Message, the one definition the reconciler parses: the
// metadata of the records Lambda gave up on, never their data. Field names and formats follow
// the example in https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html
// (timestamps are RFC 3339 UTC with milliseconds, e.g. "2019-11-14T00:38:06.021Z") and the
// bodies recorded on AWS in internal/onfailure/testdata. With ParallelizationFactor > 1 the
// range from start to end also holds other lanes' records, which were not given up (batchSize
// counts only this lane's).

const timestampLayout = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timestampLayout) }

// lastInvoke is what the mapping remembers of the latest invocation of a batch.
type lastInvoke struct {
	requestID     string
	statusCode    int
	functionError bool
}

// givenUp is a consolidated OnFailure message in the making: every record of one batch (the
// batch a lane took from its queue, with every half and remainder it was split into) given up
// under one condition. "The BatchSize could be greater than 1 since Lambda consolidates failed
// messages metadata when writing to the OnFailure destination"
// (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-eventsourcemapping.html#cfn-lambda-eventsourcemapping-bisectbatchonfunctionerror).
// AWS does not say how far it consolidates; here it is per batch and condition, one message
// when the batch is done: the range runs from the first record given up to the last, so it
// can hold records of the batch that succeeded in between (batchSize counts only those given
// up), which is the case a consumer of the message must handle.
type givenUp struct {
	condition string
	first     *record
	last      *record
	size      int
	invokes   int         // the most invocations of any part given up
	retries   int         // the most retries of any part given up
	lastInv   *lastInvoke // the latest invocation of the parts given up
	recs      []*record   // the records given up (an S3 destination's payload)
}

func (g *givenUp) add(recs []*record, u unit) {
	if g.first == nil || seqLess(recs[0].seq, g.first.seq) {
		g.first = recs[0]
	}
	if g.last == nil || seqLess(g.last.seq, recs[len(recs)-1].seq) {
		g.last = recs[len(recs)-1]
	}
	g.size += len(recs)
	g.recs = append(g.recs, recs...)
	g.invokes = max(g.invokes, u.invokes)
	g.retries = max(g.retries, u.retries)
	if u.last != nil {
		g.lastInv = u.last
	}
}

func (m *Mapping) failureMessage(shardID string, g *givenUp) *onfailure.Message {
	msg := &onfailure.Message{
		RequestContext: onfailure.RequestContext{
			FunctionARN:            m.functionARN,
			Condition:              g.condition,
			ApproximateInvokeCount: g.invokes,
		},
		Version:   "1.0",
		Timestamp: formatTime(m.now()),
		KinesisBatchInfo: onfailure.BatchInfo{
			ShardID:                         shardID,
			StartSequenceNumber:             g.first.seq,
			EndSequenceNumber:               g.last.seq,
			ApproximateArrivalOfFirstRecord: formatTime(g.first.arrival),
			ApproximateArrivalOfLastRecord:  formatTime(g.last.arrival),
			BatchSize:                       g.size,
			StreamARN:                       m.streamARN,
		},
	}
	if g.lastInv != nil {
		msg.RequestContext.RequestID = g.lastInv.requestID
	} else {
		msg.RequestContext.RequestID = newRequestID()
	}
	if m.s3dest != nil {
		slices.SortFunc(g.recs, func(a, b *record) int { return seqnum.Compare(a.seq, b.seq) })
		if p, err := payloadOf(g.recs); err == nil {
			msg.Payload = p
		} else {
			m.log.Error("esm: the S3 destination's payload cannot be built", "error", err)
		}
	}
	switch {
	case g.condition == onfailure.ConditionRecordAgeExceeded:
		// Recorded on AWS (LocalStack's test_lambda_integration_kinesis.snapshot.json,
		// test_kinesis_maximum_record_age_exceeded[expire-before-ingestion|expire-while-retrying]
		// and test_kinesis_maximum_record_age_exceeded_discard_records, 2025-11-25): a
		// RecordAgeExceeded message has no responseContext, even after 8 invocations, and its
		// approximateInvokeCount is 1 for records never invoked. Whether AWS counts the attempt
		// that found the records too old on top of real invocations the recordings do not tell;
		// here the count is the invocations made, at least 1.
		msg.RequestContext.ApproximateInvokeCount = max(1, g.invokes)
	case g.lastInv != nil:
		// functionError is "Unhandled" when the last invocation failed with a function error
		// (including a timeout) and null when the function answered but reported the records
		// as failed (onfailure.ResponseContext encodes "" as null).
		rc := &onfailure.ResponseContext{StatusCode: g.lastInv.statusCode, ExecutedVersion: "$LATEST"}
		if g.lastInv.functionError {
			rc.FunctionError = onfailure.FunctionErrorUnhandled
		}
		msg.ResponseContext = rc
	}
	return msg
}

// ErrDestinationDelivery marks an OnFailure message Lambda could not deliver: the records are
// discarded all the same and DestinationDeliveryFailures counts it.
var ErrDestinationDelivery = errors.New("esm: OnFailure destination delivery failed")

// deliver sends msg to the OnFailure queue. Transient SQS errors (throttling, server errors,
// transport) are retried until the message is accepted or ctx ends (then ctx's error is
// returned: the mapping is stopping). A delivery that fails for good — an error that is the
// request's own fault, e.g. a queue that does not exist, access denied, a message too large, or
// the injected WithDestinationFault — is what AWS counts in the DestinationDeliveryFailures
// metric: "For asynchronous invocation and supported event source mappings, the number of times
// that Lambda attempts to send an event to a destination but fails. ... Delivery errors can
// occur due to permissions errors, incorrectly configured resources, or size limits"
// (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-metrics-types.html). The records are
// discarded anyway ("If the error handling measures fail, Lambda discards the records and
// continues processing batches from the stream",
// https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html): deliver
// returns an error wrapping ErrDestinationDelivery, counted in DestinationDeliveryFailures, and
// the lane moves on. AWS does not document its internal retries; the split between transient
// and permanent errors is this emulation's choice.
func (m *Mapping) deliver(ctx context.Context, msg *onfailure.Message) error {
	if m.cfg.OnFailureQueueURL == "" && m.s3dest == nil {
		return nil
	}
	fail := func(err error) error {
		m.deliveryFailures.Add(1)
		return fmt.Errorf("%w: %s %s..%s: %w", ErrDestinationDelivery, msg.KinesisBatchInfo.ShardID,
			msg.KinesisBatchInfo.StartSequenceNumber, msg.KinesisBatchInfo.EndSequenceNumber, err)
	}
	if m.destFault != nil {
		if err := m.destFault(*msg); err != nil {
			return fail(err)
		}
	}
	if m.s3dest != nil {
		return m.deliverS3(ctx, msg, fail)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return fail(err)
	}
	delay := 50 * time.Millisecond
	for {
		_, err := m.sqs.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl:    aws.String(m.cfg.OnFailureQueueURL),
			MessageBody: aws.String(string(body)),
		})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			return fail(err)
		}
		m.log.WarnContext(ctx, "esm: OnFailure SendMessage failed; retrying",
			"shard_id", msg.KinesisBatchInfo.ShardID, "sequence_number", msg.KinesisBatchInfo.StartSequenceNumber, "error", err)
		if err := ctxtime.Sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// permanent reports an SQS error that retrying cannot fix: an API error that is the client's
// fault and not throttling.
func permanent(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorFault() != smithy.FaultClient {
		return false
	}
	return !retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err).Bool()
}

// DestinationFailureRate returns a WithDestinationFault function that fails each delivery with
// probability rate, from a generator seeded with seed (for the demo's --dest-fail).
func DestinationFailureRate(rate float64, seed uint64) func(onfailure.Message) error {
	var mu sync.Mutex
	rnd := mathrand.New(mathrand.NewPCG(seed, 0x0f417e))
	return func(onfailure.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if rnd.Float64() < rate {
			return errors.New("injected fault: the destination refused the message (e.g. AccessDenied)")
		}
		return nil
	}
}

// newRequestID returns a random UUID (version 4), the form of Lambda request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
