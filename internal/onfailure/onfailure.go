// Package onfailure is the message Lambda's Kinesis event-source mapping sends to an on-failure
// destination (SQS or SNS) when it gives up on a batch: metadata only, never the records. The
// reconciler parses it and the local event-source mapping (internal/local/esm) builds and
// encodes it: this is the one definition of the message, and encoding a parsed message gives
// back the body AWS sent (the tests' fixtures).
//
// Format: "Configuring destinations for event source mappings" and "Kinesis: retaining discarded
// batches" in the AWS Lambda developer guide (invocation record with requestContext,
// responseContext, version, timestamp and KinesisBatchInfo).
package onfailure

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Conditions Lambda reports in requestContext.condition.
const (
	ConditionRetryAttemptsExhausted = "RetryAttemptsExhausted"
	ConditionRecordAgeExceeded      = "RecordAgeExceeded"
	ConditionMaximumPayloadSize     = "MaximumPayloadSizeExceeded"
)

// ErrMalformed is wrapped by Parse errors: the message cannot name a range to re-read.
var ErrMalformed = errors.New("malformed on-failure message")

// Message is one invocation record. Variants AWS sends, all parsed (see the tests' fixtures,
// recorded on AWS):
//   - responseContext is absent on a RecordAgeExceeded message, even after invocations; its
//     functionError is null after a partial batch response and "Unhandled" after a function
//     error;
//   - approximateInvokeCount is at least 1, also for records never invoked;
//   - batchSize can exceed 1 with BisectBatchOnFunctionError: Lambda "consolidates failed
//     messages metadata" (CloudFormation, AWS::Lambda::EventSourceMapping
//     BisectBatchOnFunctionError), so the range startSequenceNumber..endSequenceNumber may hold
//     records that succeeded (and, with ParallelizationFactor > 1, other lanes' records):
//     batchSize is not the number of records in the range. A consumer must re-read the whole
//     range and check each record, as the reconciler does.
type Message struct {
	RequestContext RequestContext `json:"requestContext"`
	// ResponseContext is nil when the message has none (RecordAgeExceeded).
	ResponseContext  *ResponseContext `json:"responseContext,omitempty"`
	Version          string           `json:"version"`
	Timestamp        string           `json:"timestamp"`
	KinesisBatchInfo BatchInfo        `json:"KinesisBatchInfo"`
	// Payload is the invocation's records: only in an object of an S3 on-failure destination
	// (see s3.go); nil in an SQS or SNS message, which carries the metadata only.
	Payload *Payload `json:"payload,omitempty"`
}

// RequestContext says which invocation failed and why.
type RequestContext struct {
	RequestID              string `json:"requestId"`
	FunctionARN            string `json:"functionArn"`
	Condition              string `json:"condition"`
	ApproximateInvokeCount int    `json:"approximateInvokeCount"`
}

// ResponseContext is the last invocation's outcome; FunctionError is "" when AWS sent null (the
// function answered with a partial batch response) and "Unhandled" after a function error
// (including a timeout).
type ResponseContext struct {
	StatusCode      int    `json:"statusCode"`
	ExecutedVersion string `json:"executedVersion"`
	FunctionError   string `json:"functionError"`
}

// FunctionErrorUnhandled is ResponseContext.FunctionError after a function error.
const FunctionErrorUnhandled = "Unhandled"

// MarshalJSON encodes an empty FunctionError as null, as AWS does.
func (r ResponseContext) MarshalJSON() ([]byte, error) {
	var fe *string
	if r.FunctionError != "" {
		fe = &r.FunctionError
	}
	return json.Marshal(struct {
		StatusCode      int     `json:"statusCode"`
		ExecutedVersion string  `json:"executedVersion"`
		FunctionError   *string `json:"functionError"`
	}{r.StatusCode, r.ExecutedVersion, fe})
}

// BatchInfo names the records the mapping gave up on (inclusive range of one shard).
type BatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamARN                       string `json:"streamArn"`
}

// StreamName returns the stream name from the ARN (arn:aws:kinesis:region:acct:stream/NAME).
func (b BatchInfo) StreamName() string {
	if i := strings.LastIndex(b.StreamARN, ":stream/"); i >= 0 {
		return b.StreamARN[i+len(":stream/"):]
	}
	return ""
}

// Parse decodes and validates a message body: it must name a shard, a stream and a valid
// inclusive sequence range.
func Parse(body []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	b := m.KinesisBatchInfo
	switch {
	case b.ShardID == "":
		return Message{}, fmt.Errorf("%w: KinesisBatchInfo.shardId missing", ErrMalformed)
	case b.StreamName() == "":
		return Message{}, fmt.Errorf("%w: KinesisBatchInfo.streamArn %q names no stream", ErrMalformed, b.StreamARN)
	}
	if err := seqnum.Validate(b.StartSequenceNumber); err != nil {
		return Message{}, fmt.Errorf("%w: startSequenceNumber: %v", ErrMalformed, err)
	}
	if err := seqnum.Validate(b.EndSequenceNumber); err != nil {
		return Message{}, fmt.Errorf("%w: endSequenceNumber: %v", ErrMalformed, err)
	}
	if seqnum.Compare(b.StartSequenceNumber, b.EndSequenceNumber) > 0 {
		return Message{}, fmt.Errorf("%w: startSequenceNumber after endSequenceNumber", ErrMalformed)
	}
	return m, nil
}
