package devcli

import (
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// TestGenerateEvent: the printed event decodes as a Kinesis event whose records carry the
// payload lines, in order, with increasing sequence numbers, the stream's ARN and a current
// arrival time; bad input is refused naming the line or flag.
func TestGenerateEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	payloads := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(payloads, []byte("{\"id\":1}\nplain text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "e.jsonl")
	if err := os.WriteFile(empty, []byte("a\n\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		data []string // the records' data; nil: an error saying err
		err  string
	}{
		{"lines", []string{"kinesis", "--stream", "orders", payloads}, []string{`{"id":1}`, "plain text"}, ""},
		{"count cycles the lines", []string{"kinesis", "--stream", "orders", "--count", "3", payloads}, []string{`{"id":1}`, "plain text", `{"id":1}`}, ""},
		{"no payload", []string{"kinesis", "--stream", "orders"}, []string{"Hello, this is a test 123."}, ""},
		{"empty line", []string{"kinesis", empty}, nil, "e.jsonl line 2 is empty"},
		{"bad count", []string{"kinesis", "--count", "0", payloads}, nil, "--count 0"},
		{"no source", []string{"--stream", "x"}, nil, "want kinesis as the event source"},
		{"other source", []string{"sqs"}, nil, `want kinesis as the event source, got "sqs"`},
		{"missing file", []string{"kinesis", filepath.Join(dir, "nope")}, nil, "payload file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Add(-time.Second)
			stdout, stderr, code := gapless(t, append([]string{"generate-event"}, tc.args...)...)
			if tc.data == nil {
				if code == 0 || !strings.Contains(stderr, tc.err) {
					t.Errorf("exit %d, stderr %q, want an error saying %q", code, stderr, tc.err)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var ev events.KinesisEvent
			if err := json.Unmarshal([]byte(stdout), &ev); err != nil {
				t.Fatalf("not a Kinesis event: %v\n%s", err, stdout)
			}
			if len(ev.Records) != len(tc.data) {
				t.Fatalf("%d records, want %d", len(ev.Records), len(tc.data))
			}
			prev := new(big.Int)
			for i, r := range ev.Records {
				if string(r.Kinesis.Data) != tc.data[i] {
					t.Errorf("record %d data %q, want %q", i, r.Kinesis.Data, tc.data[i])
				}
				raw := strings.Contains(stdout, base64.StdEncoding.EncodeToString([]byte(tc.data[i])))
				seq, ok := new(big.Int).SetString(r.Kinesis.SequenceNumber, 10)
				if !raw || !ok || seq.Cmp(prev) <= 0 {
					t.Errorf("record %d: base64 data %v, sequence %s after %s", i, raw, r.Kinesis.SequenceNumber, prev)
				}
				prev = seq
				if r.EventSourceArn != "arn:aws:kinesis:us-east-1:123456789012:stream/orders" || r.EventID != "shardId-000000000000:"+r.Kinesis.SequenceNumber {
					t.Errorf("record %d: eventSourceARN %s eventID %s", i, r.EventSourceArn, r.EventID)
				}
				if at := r.Kinesis.ApproximateArrivalTimestamp.Time; at.Before(before) || at.After(time.Now().Add(time.Second)) {
					t.Errorf("record %d arrived %v, want now", i, at)
				}
			}
		})
	}
}
