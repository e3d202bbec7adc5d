package onfailure

import (
	"errors"
	"testing"
)

// awsSample is the example record from the Lambda developer guide (Kinesis on-failure destination).
const awsSample = `{
  "requestContext": {
    "requestId": "c9b8fa9f-5a7f-xmpl-af9c-0c604cde93a5",
    "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:myfunction",
    "condition": "RetryAttemptsExhausted",
    "approximateInvokeCount": 1
  },
  "responseContext": {
    "statusCode": 200,
    "executedVersion": "$LATEST",
    "functionError": "Unhandled"
  },
  "version": "1.0",
  "timestamp": "2019-11-14T00:38:06.021Z",
  "KinesisBatchInfo": {
    "shardId": "shardId-000000000001",
    "startSequenceNumber": "49601189658422359378836298521827638475320189012309704722",
    "endSequenceNumber": "49601189658422359378836298522902373528957594348623495186",
    "approximateArrivalOfFirstRecord": "2019-11-14T00:38:04.835Z",
    "approximateArrivalOfLastRecord": "2019-11-14T00:38:05.580Z",
    "batchSize": 500,
    "streamArn": "arn:aws:kinesis:us-east-2:123456789012:stream/mystream"
  }
}`

func TestParse(t *testing.T) {
	m, err := Parse([]byte(awsSample))
	if err != nil {
		t.Fatal(err)
	}
	b := m.KinesisBatchInfo
	if b.StreamName() != "mystream" || b.ShardID != "shardId-000000000001" || b.BatchSize != 500 || m.RequestContext.Condition != ConditionRetryAttemptsExhausted {
		t.Fatalf("parsed %+v", m)
	}
	bad := []string{
		`not json`,
		`{"KinesisBatchInfo":{"streamArn":"arn:aws:kinesis:r:1:stream/s","startSequenceNumber":"1","endSequenceNumber":"2"}}`,
		`{"KinesisBatchInfo":{"shardId":"s","streamArn":"nope","startSequenceNumber":"1","endSequenceNumber":"2"}}`,
		`{"KinesisBatchInfo":{"shardId":"s","streamArn":"arn:aws:kinesis:r:1:stream/s","startSequenceNumber":"01","endSequenceNumber":"2"}}`,
		`{"KinesisBatchInfo":{"shardId":"s","streamArn":"arn:aws:kinesis:r:1:stream/s","startSequenceNumber":"10","endSequenceNumber":"9"}}`,
	}
	for _, body := range bad {
		if _, err := Parse([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%s) = %v, want ErrMalformed", body, err)
		}
	}
}
