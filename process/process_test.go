package process_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/process"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.SQS)) }

const seq = "49590338271490256608559692538361571095921575989136588818"

func rec(data []byte, pk string, sub uint32) pipeline.Record {
	return pipeline.Record{ID: recordid.ID{ShardID: "shardId-000000000003", Seq: seq, Sub: sub}, PartitionKey: pk, Data: data}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		enc  string
	}{
		{"json", []byte(`{"id":1,"name":"Zoë ✓"}`), process.EncodingText},
		{"tabs and newlines", []byte("a\tb\r\nc"), process.EncodingText},
		{"astral plane", []byte("🦀"), process.EncodingText},
		{"invalid utf-8", []byte{0xff, 0xfe, 'a'}, process.EncodingBase64},
		{"NUL is valid UTF-8 but not SQS text", []byte("a\x00b"), process.EncodingBase64},
		{"other control character", []byte("bell\x07"), process.EncodingBase64},
		{"U+FFFE is not SQS text", []byte("x\uFFFE"), process.EncodingBase64},
		{"empty", nil, process.EncodingEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, enc := process.Body(tc.data)
			if enc != tc.enc {
				t.Fatalf("encoding %q, want %q", enc, tc.enc)
			}
			if body == "" {
				t.Fatal("empty body: SQS requires at least one character")
			}
			got, err := process.Decode(body, enc)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Errorf("round trip = %q %v, want %q", got, err, tc.data)
			}
		})
	}
	if _, err := process.Decode("x", "rot13"); err == nil {
		t.Error("unknown encoding accepted")
	}
}

func TestMessage(t *testing.T) {
	longShard := "shardId-" + strings.Repeat("0", 100)
	for _, tc := range []struct {
		name      string
		fifo      bool
		r         pipeline.Record
		wantGroup string
		wantDedup string
		pkType    string
	}{
		{name: "standard", r: rec([]byte("x"), "customer-1", 0), pkType: "String"},
		{name: "fifo", fifo: true, r: rec([]byte("x"), "customer-1", 2), wantGroup: "customer-1", wantDedup: "shardId-000000000003:" + seq + ":2", pkType: "String"},
		{name: "fifo long record id hashed", fifo: true,
			r:         pipeline.Record{ID: recordid.ID{ShardID: longShard, Seq: seq}, PartitionKey: "p", Data: []byte("x")},
			wantGroup: "p", wantDedup: sha(longShard + ":" + seq + ":0"), pkType: "String"},
		{name: "fifo partition key with space hashed", fifo: true, r: rec([]byte("x"), "a b", 0), wantGroup: sha("a b"), wantDedup: "shardId-000000000003:" + seq + ":0", pkType: "String"},
		{name: "fifo 200-char key hashed", fifo: true, r: rec([]byte("x"), strings.Repeat("k", 200), 0), wantGroup: sha(strings.Repeat("k", 200)), wantDedup: "shardId-000000000003:" + seq + ":0", pkType: "String"},
		{name: "control character key is binary", r: rec([]byte("x"), "k\x01", 0), pkType: "Binary"},
		{name: "no key", r: rec([]byte("x"), "", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := process.Message("https://q/target", tc.fifo, tc.r)
			if aws.ToString(in.MessageGroupId) != tc.wantGroup || aws.ToString(in.MessageDeduplicationId) != tc.wantDedup {
				t.Errorf("group %q dedup %q, want %q %q", aws.ToString(in.MessageGroupId), aws.ToString(in.MessageDeduplicationId), tc.wantGroup, tc.wantDedup)
			}
			if n := len(aws.ToString(in.MessageDeduplicationId)); n > 128 {
				t.Errorf("dedup id %d chars", n)
			}
			if got := aws.ToString(in.MessageAttributes[process.AttrRecordID].StringValue); got != tc.r.ID.String() {
				t.Errorf("record id attribute %q", got)
			}
			pk, ok := in.MessageAttributes[process.AttrPartitionKey]
			if tc.pkType == "" {
				if ok {
					t.Error("partition key attribute for an empty key")
				}
			} else if aws.ToString(pk.DataType) != tc.pkType {
				t.Errorf("partition key attribute type %q, want %q", aws.ToString(pk.DataType), tc.pkType)
			}
		})
	}
}

type sendFunc func(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)

func (f sendFunc) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return f(ctx, in, o...)
}

func TestNewReturnsSendErrors(t *testing.T) {
	cause := errors.New("AWS.SimpleQueueService.NonExistentQueue")
	p := process.New(sendFunc(func(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		return nil, cause
	}), "https://q/target")
	if err := p(context.Background(), rec([]byte("x"), "k", 0)); !errors.Is(err, cause) {
		t.Fatalf("err = %v", err)
	}
}

// TestForwardOnSQS forwards records to real standard and FIFO queues (fauxqs or moto) and reads
// them back: bytes equal, attributes set, and on FIFO a record forwarded twice arrives once.
func TestForwardOnSQS(t *testing.T) {
	ctx := context.Background()
	client := stacktest.SQS(t)
	records := []pipeline.Record{
		rec([]byte(`{"id":1}`), "k1", 0),
		rec([]byte{0x00, 0xff, 0x10}, "k1", 1),
		rec(nil, "k2", 2),
	}
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			url := stacktest.Queue(t, "target", fifo)
			p := process.New(client, url)
			for _, r := range records {
				if err := p(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if fifo { // a redelivered record: deduplicated by record id
				if err := p(ctx, records[0]); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string][]byte{}
			count := 0
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && count < len(records)+1; {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					// A short visibility timeout: messages of a receive whose answer was lost
					// (the SDK retried it) come back inside the deadline.
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 3,
					MessageAttributeNames: []string{"All"},
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(out.Messages) == 0 && count >= len(records) {
					break
				}
				for _, m := range out.Messages {
					count++
					data, err := process.Decode(aws.ToString(m.Body), attr(m, process.AttrEncoding))
					if err != nil {
						t.Fatal(err)
					}
					got[attr(m, process.AttrRecordID)] = data
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if count != len(records) {
				t.Errorf("received %d messages, want %d", count, len(records))
			}
			for _, r := range records {
				if d, ok := got[r.ID.String()]; !ok || !bytes.Equal(d, r.Data) {
					t.Errorf("record %s: got %q (present %v), want %q", r.ID, d, ok, r.Data)
				}
			}
		})
	}
}

func attr(m sqstypes.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}
