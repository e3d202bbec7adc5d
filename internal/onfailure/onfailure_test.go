package onfailure

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
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

// Every variant AWS sends parses: bodies recorded on AWS (testdata/README.md).
func TestParseRecordedOnAWS(t *testing.T) {
	const first = "49659013567040981547806411413924417826734318779281620994"
	tests := []struct {
		file          string
		condition     string
		invokes       int
		functionError *string // nil: no responseContext
		seq           string  // start and end: each recorded message names one record
	}{
		{"aws-retry-attempts-exhausted-unhandled.json", ConditionRetryAttemptsExhausted, 2, ptr("Unhandled"), first},
		{"aws-retry-attempts-exhausted-partial.json", ConditionRetryAttemptsExhausted, 4, ptr(""), "49659013567040981547806411413925626752553933408456327170"},
		{"aws-record-age-exceeded-while-retrying.json", ConditionRecordAgeExceeded, 8, nil, first},
		{"aws-record-age-exceeded-never-invoked.json", ConditionRecordAgeExceeded, 1, nil, first},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(body)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			rc := m.RequestContext
			if rc.Condition != tc.condition || rc.ApproximateInvokeCount != tc.invokes {
				t.Errorf("requestContext %+v", rc)
			}
			switch {
			case tc.functionError == nil && m.ResponseContext != nil:
				t.Errorf("responseContext %+v, want none", m.ResponseContext)
			case tc.functionError != nil && (m.ResponseContext == nil || m.ResponseContext.FunctionError != *tc.functionError ||
				m.ResponseContext.StatusCode != 200):
				t.Errorf("responseContext %+v, want functionError %q", m.ResponseContext, *tc.functionError)
			}
			b := m.KinesisBatchInfo
			if b.StreamName() != "orders" || b.ShardID != "shardId-000000000000" || b.BatchSize != 1 ||
				b.StartSequenceNumber != tc.seq || b.EndSequenceNumber != tc.seq {
				t.Errorf("KinesisBatchInfo %+v", b)
			}
		})
	}
}

// Encoding a parsed message gives back the body AWS sent, keys, nulls and absent
// responseContext included: what the local event-source mapping sends (it encodes Message) is
// what AWS sends.
func TestEncodeRecordedOnAWS(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(enc, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("encoded\n%s\nwant (recorded)\n%s", enc, body)
			}
		})
	}
}

func ptr(s string) *string { return &s }
