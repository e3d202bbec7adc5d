package esm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// OnFailure conditions (requestContext.condition).
const (
	ConditionRetryAttemptsExhausted = "RetryAttemptsExhausted"
	ConditionRecordAgeExceeded      = "RecordAgeExceeded"
)

// FailureMessage is the document Lambda sends to a Kinesis mapping's OnFailure destination: the
// metadata of the records it gave up on, never their data. Field names and formats follow the
// example in https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html
// (timestamps are RFC 3339 UTC with milliseconds, e.g. "2019-11-14T00:38:06.021Z").
type FailureMessage struct {
	RequestContext FailureRequestContext `json:"requestContext"`
	// ResponseContext describes the last invocation; absent when the records were dropped
	// before any invocation (RecordAgeExceeded on first sight).
	ResponseContext  *FailureResponseContext `json:"responseContext,omitempty"`
	Version          string                  `json:"version"`
	Timestamp        string                  `json:"timestamp"`
	KinesisBatchInfo KinesisBatchInfo        `json:"KinesisBatchInfo"`
}

// FailureRequestContext is FailureMessage.requestContext.
type FailureRequestContext struct {
	RequestID              string `json:"requestId"`
	FunctionArn            string `json:"functionArn"`
	Condition              string `json:"condition"`
	ApproximateInvokeCount int    `json:"approximateInvokeCount"`
}

// FailureResponseContext is FailureMessage.responseContext. FunctionError is "Unhandled" when
// the last invocation failed with a function error (including a timeout) and null when the
// function answered but reported the records as failed.
type FailureResponseContext struct {
	StatusCode      int     `json:"statusCode"`
	ExecutedVersion string  `json:"executedVersion"`
	FunctionError   *string `json:"functionError"`
}

// KinesisBatchInfo names the records given up: a contiguous range of one lane of one shard.
// With ParallelizationFactor > 1 the range from start to end also holds other lanes' records,
// which were not given up (batchSize counts only this lane's).
type KinesisBatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamArn                       string `json:"streamArn"`
}

const timestampLayout = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timestampLayout) }

// lastInvoke is what the mapping remembers of the latest invocation of a batch.
type lastInvoke struct {
	requestID     string
	statusCode    int
	functionError bool
}

func (m *Mapping) failureMessage(shardID string, recs []*record, condition string, invokes int, last *lastInvoke) *FailureMessage {
	msg := &FailureMessage{
		RequestContext: FailureRequestContext{
			FunctionArn:            m.functionARN,
			Condition:              condition,
			ApproximateInvokeCount: invokes,
		},
		Version:   "1.0",
		Timestamp: formatTime(m.now()),
		KinesisBatchInfo: KinesisBatchInfo{
			ShardID:                         shardID,
			StartSequenceNumber:             recs[0].seq,
			EndSequenceNumber:               recs[len(recs)-1].seq,
			ApproximateArrivalOfFirstRecord: formatTime(recs[0].arrival),
			ApproximateArrivalOfLastRecord:  formatTime(recs[len(recs)-1].arrival),
			BatchSize:                       len(recs),
			StreamArn:                       m.streamARN,
		},
	}
	if last != nil {
		msg.RequestContext.RequestID = last.requestID
		rc := &FailureResponseContext{StatusCode: last.statusCode, ExecutedVersion: "$LATEST"}
		if last.functionError {
			unhandled := "Unhandled"
			rc.FunctionError = &unhandled
		}
		msg.ResponseContext = rc
	} else {
		msg.RequestContext.RequestID = newRequestID()
	}
	return msg
}

// sendFailure delivers msg to the OnFailure queue, retrying until it is accepted or ctx ends
// (dropping the metadata would lose the only trace of the records).
func (m *Mapping) sendFailure(ctx context.Context, msg *FailureMessage) error {
	if m.cfg.OnFailureQueueURL == "" {
		return nil
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("esm: encode OnFailure message: %w", err)
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
		m.log.WarnContext(ctx, "esm: OnFailure SendMessage failed; retrying",
			"shard_id", msg.KinesisBatchInfo.ShardID, "sequence_number", msg.KinesisBatchInfo.StartSequenceNumber, "error", err)
		if err := sleep(ctx, delay); err != nil {
			return fmt.Errorf("esm: send OnFailure message for %s %s..%s: %w", msg.KinesisBatchInfo.ShardID,
				msg.KinesisBatchInfo.StartSequenceNumber, msg.KinesisBatchInfo.EndSequenceNumber, err)
		}
		delay = min(2*delay, 2*time.Second)
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

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
