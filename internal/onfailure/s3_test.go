package onfailure

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseObjectRecordedOnAWS(t *testing.T) {
	body := readFixture(t, "aws-s3-object-retry-attempts-exhausted.json")
	m, err := ParseObject(body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Payload == nil || len(m.Payload.Records) != 1 {
		t.Fatalf("payload = %+v, want one record", m.Payload)
	}
	r := m.Payload.Records[0]
	if got, want := string(r.Kinesis.Data), `{"input": "hello", "value": "world", "raise_error": 1}`; got != want {
		t.Errorf("data = %q, want %q", got, want)
	}
	if r.Kinesis.PartitionKey != "custom" || r.Kinesis.SequenceNumber != m.KinesisBatchInfo.StartSequenceNumber {
		t.Errorf("record = %+v", r.Kinesis)
	}
	if m.ResponseContext == nil || m.ResponseContext.FunctionError != FunctionErrorUnhandled {
		t.Errorf("responseContext = %+v", m.ResponseContext)
	}
	// The metadata is the SQS message's: Parse reads the same object, ignoring nothing it needs.
	if _, err := Parse(body); err != nil {
		t.Errorf("Parse of the object: %v", err)
	}
	// Encoding gives back the recorded members (payload included, same nesting).
	enc, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal(body, &a)
	_ = json.Unmarshal(enc, &b)
	ra := a["payload"].(map[string]any)["Records"].([]any)[0].(map[string]any)
	rb := b["payload"].(map[string]any)["Records"].([]any)[0].(map[string]any)
	for k := range ra {
		if _, ok := rb[k]; !ok {
			t.Errorf("encoded payload record lacks %q", k)
		}
	}
}

func TestSQSMessageHasNoPayload(t *testing.T) {
	body := readFixture(t, "aws-retry-attempts-exhausted-unhandled.json")
	m, err := Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if m.Payload != nil {
		t.Fatalf("payload = %+v", m.Payload)
	}
	if _, err := ParseObject(body); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseObject of an SQS message: %v, want ErrMalformed (no payload)", err)
	}
	enc, _ := json.Marshal(m)
	if strings.Contains(string(enc), "payload") {
		t.Errorf("an SQS message encodes a payload member: %s", enc)
	}
}

func TestParseObjectRefuses(t *testing.T) {
	base := readFixture(t, "aws-s3-object-retry-attempts-exhausted.json")
	const seq = "49659013567040981547806411413924417826734318779281620994"
	cases := []struct{ name, old, new string }{
		{"other stream", `"eventSourceARN": "arn:aws:kinesis:us-east-1:111111111111:stream/orders"`, `"eventSourceARN": "arn:aws:kinesis:us-east-1:222222222222:stream/orders"`},
		{"other shard", `"eventID": "shardId-000000000000:`, `"eventID": "shardId-000000000001:`},
		{"not kinesis", `"eventSource": "aws:kinesis"`, `"eventSource": "aws:sqs"`},
		{"below the range", `"sequenceNumber": "` + seq, `"sequenceNumber": "49659013567040981547806411413924417826734318779281620993`},
		{"no records", `"Records": [`, `"Records": [], "x": [`},
		{"bad sequence number", `"sequenceNumber": "` + seq, `"sequenceNumber": "12a`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(string(base), c.old, c.new, 1)
			if body == string(base) {
				t.Fatalf("fixture does not contain %q", c.old)
			}
			if _, err := ParseObject([]byte(body)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseObject: %v, want ErrMalformed", err)
			}
		})
	}
}

func TestObjectKey(t *testing.T) {
	at := time.Date(2025, 11, 25, 16, 50, 20, 123e6, time.UTC)
	got := ObjectKey("5d2c1f7e-1b2a-4c3d-8e9f-0a1b2c3d4e5f", "shardId-000000000000", at, "1f0b")
	want := "aws/lambda/5d2c1f7e-1b2a-4c3d-8e9f-0a1b2c3d4e5f/shardId-000000000000/2025/11/25/2025-11-25T16.50.20-1f0b"
	if got != want {
		t.Fatalf("ObjectKey = %q, want %q", got, want)
	}
}

func TestS3NotificationRoundTrip(t *testing.T) {
	at := time.Date(2025, 11, 25, 16, 50, 21, 0, time.UTC)
	key := "aws/lambda/u/shardId-000000000000/2025/11/25/2025-11-25T16.50.20-a b+c"
	body, err := NewS3Notification("us-east-1", "failures", key, 1234, `"abc"`, at)
	if err != nil {
		t.Fatal(err)
	}
	if !IsS3Notification(body) {
		t.Fatal("IsS3Notification = false")
	}
	if strings.Contains(string(body), "%2F") {
		t.Errorf("the key's slashes are encoded: %s", body)
	}
	objs, err := ParseS3Notification(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Bucket != "failures" || objs[0].Key != key || objs[0].Size != 1234 {
		t.Fatalf("objects = %+v", objs)
	}
}

// awsS3Event is the example of the Amazon S3 user guide's "Event message structure" page, with
// its descriptions replaced by values of their form.
const awsS3Event = `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-west-2",
"eventTime":"1970-01-01T00:00:00.000Z","eventName":"ObjectCreated:Put",
"userIdentity":{"principalId":"AIDAJDPLRKLG7UEXAMPLE"},"requestParameters":{"sourceIPAddress":"127.0.0.1"},
"responseElements":{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},
"s3":{"s3SchemaVersion":"1.0","configurationId":"testConfigRule","bucket":{"name":"amzn-s3-demo-bucket","ownerIdentity":{"principalId":"A3NL1KOZZKExample"},"arn":"arn:aws:s3:::amzn-s3-demo-bucket"},
"object":{"key":"aws/lambda/u/shardId-000000000000/2025/11/25/2025-11-25T16.50.20-x%3Dy","size":1024,"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5"}}}]}`

func TestParseS3Notification(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		key     string
		wantErr error
	}{
		{"AWS example", awsS3Event, "aws/lambda/u/shardId-000000000000/2025/11/25/2025-11-25T16.50.20-x=y", nil},
		{"test event", `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2025-11-25T16:50:20.000Z","Bucket":"b","RequestId":"r","HostId":"h"}`, "", ErrTestEvent},
		{"delete event", strings.Replace(awsS3Event, "ObjectCreated:Put", "ObjectRemoved:Delete", 1), "", ErrMalformed},
		{"not s3", strings.Replace(awsS3Event, `"aws:s3"`, `"aws:sqs"`, 1), "", ErrMalformed},
		{"no records", `{"Records":[]}`, "", ErrMalformed},
		{"not json", `{`, "", ErrMalformed},
		{"bad escape", strings.Replace(awsS3Event, "x%3Dy", "x%zz", 1), "", ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, err := ParseS3Notification([]byte(c.body))
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if objs[0].Key != c.key || objs[0].Bucket != "amzn-s3-demo-bucket" {
				t.Fatalf("objects = %+v", objs)
			}
		})
	}
	if IsS3Notification([]byte(awsSample)) {
		t.Error("an on-failure message is taken for an S3 notification")
	}
}

func FuzzParseObject(f *testing.F) {
	f.Add(readFixture(f, "aws-s3-object-retry-attempts-exhausted.json"))
	f.Add([]byte(awsSample))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := ParseObject(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		b := m.KinesisBatchInfo
		for _, r := range m.Payload.Records {
			if r.EventID != b.ShardID+":"+r.Kinesis.SequenceNumber || r.EventSourceArn != b.StreamARN {
				t.Fatalf("accepted a record of another shard or stream: %+v", r)
			}
		}
	})
}

func FuzzParseS3Notification(f *testing.F) {
	f.Add([]byte(awsS3Event))
	f.Add([]byte(`{"Service":"Amazon S3","Event":"s3:TestEvent"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		objs, err := ParseS3Notification(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTestEvent) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for _, o := range objs {
			if o.Bucket == "" || o.Key == "" {
				t.Fatalf("accepted an object without bucket or key: %+v", o)
			}
		}
	})
}
