package esm

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// The payload must be what Lambda sends: an events.KinesisEvent with every field filled the way
// Lambda fills it.
func TestPayloadIsLambdaKinesisEvent(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	before := time.Now().Add(-time.Second)
	puts := []putResult{
		s.put(t, "alpha", []byte("hello")),
		s.put(t, "beta", []byte{0x00, 0xff, 0x10, '"', '<'}),
		s.put(t, "alpha", []byte(`{"json":true}`)),
	}
	after := time.Now().Add(time.Second)
	r := newRecorder(t, nil)
	drain(t, s, nil, r, baseConfig(s))

	calls := r.invocations()
	if len(calls) != 1 {
		t.Fatalf("%d invocations, want 1", len(calls))
	}
	c := calls[0]
	// Byte for byte what aws-lambda-go's own types marshal to.
	want, err := json.Marshal(c.event)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.payload, want) {
		t.Fatalf("payload is not the canonical encoding of its KinesisEvent:\n got %s\nwant %s", c.payload, want)
	}
	if len(c.event.Records) != len(puts) {
		t.Fatalf("%d records, want %d", len(c.event.Records), len(puts))
	}
	for i, rec := range c.event.Records {
		p := puts[i]
		checks := []struct{ field, got, want string }{
			{"eventID", rec.EventID, p.shard + ":" + p.seq},
			{"eventSourceARN", rec.EventSourceArn, s.arn},
			{"eventSource", rec.EventSource, "aws:kinesis"},
			{"eventName", rec.EventName, "aws:kinesis:record"},
			{"eventVersion", rec.EventVersion, "1.0"},
			{"awsRegion", rec.AwsRegion, "us-east-1"},
			{"invokeIdentityArn", rec.InvokeIdentityArn, "arn:aws:iam::" + strings.Split(s.arn, ":")[4] + ":role/consumer-role"},
			{"kinesis.kinesisSchemaVersion", rec.Kinesis.KinesisSchemaVersion, "1.0"},
			{"kinesis.partitionKey", rec.Kinesis.PartitionKey, p.key},
			{"kinesis.sequenceNumber", rec.Kinesis.SequenceNumber, p.seq},
			{"kinesis.data", string(rec.Kinesis.Data), string(p.data)},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("record %d %s = %q, want %q", i, ck.field, ck.got, ck.want)
			}
		}
		ts := rec.Kinesis.ApproximateArrivalTimestamp.Time
		if ts.Before(before) || ts.After(after) {
			t.Errorf("record %d approximateArrivalTimestamp %s not between %s and %s", i, ts, before, after)
		}
	}
	// The raw JSON uses Lambda's key names, data in base64 and the timestamp in epoch seconds.
	var raw struct {
		Records []map[string]json.RawMessage `json:"Records"`
	}
	if err := json.Unmarshal(c.payload, &raw); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range raw.Records[0] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	wantKeys := []string{"awsRegion", "eventID", "eventName", "eventSource", "eventSourceARN", "eventVersion", "invokeIdentityArn", "kinesis"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("record keys %v, want %v", keys, wantKeys)
	}
	var kin map[string]json.RawMessage
	if err := json.Unmarshal(raw.Records[0]["kinesis"], &kin); err != nil {
		t.Fatal(err)
	}
	if string(kin["data"]) != `"aGVsbG8="` {
		t.Errorf("data %s, want base64 of hello", kin["data"])
	}
	var epoch float64
	if err := json.Unmarshal(kin["approximateArrivalTimestamp"], &epoch); err != nil {
		t.Errorf("approximateArrivalTimestamp %s is not epoch seconds: %v", kin["approximateArrivalTimestamp"], err)
	}
	if _, ok := kin["encryptionType"]; ok {
		t.Errorf("encryptionType present for an unencrypted stream")
	}
}
