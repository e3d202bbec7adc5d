package consumer

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestDecodeFastPathMatchesSlowPath: a well-formed event takes the fast path (one
// json.Unmarshal, kinesis.data decoded by encoding/json straight into bytes); every record must
// come out exactly as the record-by-record slow path decodes it, including data that is empty,
// null, absent or written with JSON escapes.
func TestDecodeFastPathMatchesSlowPath(t *testing.T) {
	t.Parallel()
	rec := func(data string) string {
		return `{"kinesis":{"kinesisSchemaVersion":"1.0","partitionKey":"pk","sequenceNumber":"49590338271490256608559692538361571095921575989136588898",` +
			data + `"approximateArrivalTimestamp":1545084650.987},"eventSource":"aws:kinesis","eventVersion":"1.0",` +
			`"eventID":"shardId-000000000006:49590338271490256608559692538361571095921575989136588898","eventName":"aws:kinesis:record",` +
			`"awsRegion":"us-east-2","eventSourceARN":"arn:aws:kinesis:us-east-2:123456789012:stream/lambda-stream"}`
	}
	for _, tc := range []struct{ name, data string }{
		{"text", `"data":"SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==",`},
		{"binary with escaped slash", `"data":"\/w==",`},
		{"base64 with an escaped newline", `"data":"SGVs\nbG8=",`},
		{"empty", `"data":"",`},
		{"null", `"data":null,`},
		{"absent", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(`{"Records":[` + rec(tc.data) + `,` + rec(tc.data) + `]}`)
			fast, err := decodeEvent(raw)
			if err != nil {
				t.Fatal(err)
			}
			var ev struct{ Records []json.RawMessage }
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			for i, rr := range ev.Records {
				slow := decodeRecord(i, rr)
				if slow.dataErr != nil || slow.formErr != nil {
					t.Fatalf("slow path: %v %v", slow.dataErr, slow.formErr)
				}
				if !reflect.DeepEqual(fast[i], slow) {
					t.Fatalf("record %d:\nfast %#v\nslow %#v", i, fast[i], slow)
				}
			}
		})
	}
}
