package faultproxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error responses as the services send them, so the Go SDK decodes the injected fault into the
// same modeled error type (and retry decision) as the real one.
//
// Sources:
//   - DynamoDB (awsJson1_0): "HTTP/1.1 400 ... Content-Type: application/x-amz-json-1.0
//     {"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":...}"
//     (DynamoDB Developer Guide, "Error handling with DynamoDB").
//   - SQS (awsJson1_0 with awsQueryCompatible): body {"__type":"com.amazonaws.sqs#QueueDoesNotExist",
//     "message":...} plus header "x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender"
//     (SQS Developer Guide, "Interpreting Amazon SQS JSON API responses"); the header is
//     "Code;Fault" from the awsQueryError trait (smithy awsQueryCompatible).
//   - Kinesis (awsJson1_1): {"__type":"ProvisionedThroughputExceededException","message":...}.
//
// The SDK (smithy-go transport/http/protocol/awsjson deserializeError) takes the code from
// X-Amzn-ErrorType or "__type", strips the namespace before '#', and, for query-compatible
// services, overrides it with the code in X-Amzn-Query-Error. Its standard retryer retries
// ProvisionedThroughputExceededException, LimitExceededException, RequestThrottled and any
// 500/502/503/504 (aws-sdk-go-v2 aws/retry DefaultThrottleErrorCodes,
// DefaultRetryableHTTPStatusCodes).
type serviceError struct {
	status     int
	code       string // "__type"
	message    string
	queryError string // x-amzn-query-error, SQS only
}

const (
	svcDynamoDB = "DynamoDB_20120810"
	svcStreams  = "DynamoDBStreams_20120810"
	svcKinesis  = "Kinesis_20131202"
	svcSQS      = "AmazonSQS"
)

// kinesisDataPlane are the Kinesis operations whose throttling error is
// ProvisionedThroughputExceededException; the control plane answers LimitExceededException.
var kinesisDataPlane = map[string]bool{
	"GetRecords": true, "GetShardIterator": true, "PutRecord": true, "PutRecords": true,
	"SubscribeToShard": true,
}

func throttleError(r *Request) serviceError {
	switch r.Service() {
	case svcDynamoDB:
		return serviceError{status: http.StatusBadRequest,
			code:    "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
			message: "The level of configured provisioned throughput for the table was exceeded (injected by faultproxy)."}
	case svcStreams:
		return serviceError{status: http.StatusBadRequest,
			code:    "com.amazonaws.dynamodb.v20120810#LimitExceededException",
			message: "Rate exceeded (injected by faultproxy)."}
	case svcKinesis:
		if kinesisDataPlane[r.Action()] {
			return serviceError{status: http.StatusBadRequest, code: "ProvisionedThroughputExceededException",
				message: "Rate exceeded for shard (injected by faultproxy)."}
		}
		return serviceError{status: http.StatusBadRequest, code: "LimitExceededException",
			message: "Rate exceeded (injected by faultproxy)."}
	case svcSQS:
		return serviceError{status: http.StatusBadRequest, code: "com.amazonaws.sqs#RequestThrottled",
			message: "Request is throttled (injected by faultproxy).", queryError: "RequestThrottled;Sender"}
	}
	return serviceError{status: http.StatusBadRequest, code: "ThrottlingException",
		message: "Rate exceeded (injected by faultproxy)."}
}

func serverError(r *Request) serviceError {
	switch r.Service() {
	case svcDynamoDB, svcStreams:
		return serviceError{status: http.StatusInternalServerError,
			code:    "com.amazonaws.dynamodb.v20120810#InternalServerError",
			message: "Internal server error (injected by faultproxy)."}
	case svcSQS:
		return serviceError{status: http.StatusInternalServerError, code: "com.amazonaws.sqs#InternalFailure",
			message: "Internal failure (injected by faultproxy).", queryError: "InternalFailure;Receiver"}
	}
	// Kinesis and the common AWS error for an unknown server failure.
	return serviceError{status: http.StatusInternalServerError, code: "InternalFailure",
		message: "Internal failure (injected by faultproxy)."}
}

// contentType is the JSON protocol version of the service (Kinesis is awsJson1_1; DynamoDB
// and SQS are awsJson1_0).
func contentType(r *Request) string {
	if r.Service() == svcKinesis {
		return "application/x-amz-json-1.1"
	}
	return "application/x-amz-json-1.0"
}

func writeServiceError(w http.ResponseWriter, r *Request, requestID string, e serviceError) {
	body, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{e.code, e.message})
	h := w.Header()
	h.Set("Content-Type", contentType(r))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amzn-Requestid", requestID)
	if e.queryError != "" && r.Service() == svcSQS {
		h.Set("X-Amzn-Query-Error", e.queryError)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
