package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/process"
)

// TestForwardLargeRecordsOnSQS proves that every record Kinesis accepts crosses the
// bridge. A binary record over ~768 KiB (base64 grows it by a third), text within a few bytes of
// 1 MiB once the attributes are counted, and records of a few MiB (a stream whose maximum record
// size was raised) exceed SQS's 1 MiB message; the bridge used to fail them on every attempt
// until they were parked. They now go through the payload bucket in the SQS Extended Client's
// format and arrive byte for byte.
func TestForwardLargeRecordsOnSQS(t *testing.T) {
	ctx := context.Background()
	client, objects := stacktest.SQS(t), stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	binary := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*131 + 7)
		}
		return b
	}
	records := []pipeline.Record{
		rec([]byte(`{"id":"small"}`), "k1", 0),
		rec(binary(768*1024+1), "k1", 1),                  // base64: just over 1 MiB
		rec(bytes.Repeat([]byte("t"), 1<<20-20), "k2", 2), // text body fits alone, not with the attributes
		rec(binary(3<<20), "k3", 3),                       // a stream with a raised maximum record size
	}
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			url := stacktest.Queue(t, "target", fifo)
			p := process.New(client, url, process.WithPayloadBucket(objects, bucket))
			for _, r := range records {
				if err := p(ctx, r); err != nil {
					t.Fatalf("record %s (%d bytes): %v", r.ID, len(r.Data), err)
				}
			}
			got := map[string][]byte{}
			pointers := 0
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && len(got) < len(records); {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					// A short visibility timeout: messages of a receive whose answer was lost
					// (the SDK retried it) come back inside the deadline.
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 3,
					MessageAttributeNames: []string{"All"},
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range out.Messages {
					body := aws.ToString(m.Body)
					if size, ok := m.MessageAttributes[process.AttrExtendedPayloadSize]; ok {
						pointers++
						checkPointer(t, body, bucket, aws.ToString(size.DataType), aws.ToString(size.StringValue))
					}
					full, err := process.FetchBody(ctx, objects, body, m.MessageAttributes)
					if err != nil {
						t.Fatal(err)
					}
					if size, ok := m.MessageAttributes[process.AttrExtendedPayloadSize]; ok && aws.ToString(size.StringValue) != strconv.Itoa(len(full)) {
						t.Errorf("%s = %s, stored body %d bytes", process.AttrExtendedPayloadSize, aws.ToString(size.StringValue), len(full))
					}
					data, err := process.Decode(full, attr(m, process.AttrEncoding))
					if err != nil {
						t.Fatal(err)
					}
					got[attr(m, process.AttrRecordID)] = data
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, r := range records {
				if d, ok := got[r.ID.String()]; !ok || !bytes.Equal(d, r.Data) {
					t.Errorf("record %s: %d bytes arrived (present %v), want %d", r.ID, len(d), ok, len(r.Data))
				}
			}
			if pointers != 3 {
				t.Errorf("%d messages went through the payload bucket, want the 3 large ones", pointers)
			}
		})
	}
}

// checkPointer: the body is the Extended Client's pointer, the size attribute a Number.
func checkPointer(t *testing.T, body, bucket, dataType, size string) {
	t.Helper()
	var ptr []json.RawMessage
	var class string
	var loc map[string]string
	if err := json.Unmarshal([]byte(body), &ptr); err != nil || len(ptr) != 2 {
		t.Fatalf("pointer body %q: %v", body, err)
	}
	if err := json.Unmarshal(ptr[0], &class); err != nil || class != process.PointerClass {
		t.Errorf("pointer class %s", ptr[0])
	}
	if err := json.Unmarshal(ptr[1], &loc); err != nil || loc["s3BucketName"] != bucket || !strings.HasPrefix(loc["s3Key"], process.KeyPrefix) || len(loc) != 2 {
		t.Errorf("pointer %s", ptr[1])
	}
	if n, err := strconv.Atoi(size); dataType != "Number" || err != nil || n <= 1<<20-100 {
		t.Errorf("%s = %s %q", process.AttrExtendedPayloadSize, dataType, size)
	}
}

// TestForwardTooLargeWithoutBucketFails: with no payload bucket the record fails (it is retried
// and parked with its payload), it is never sent truncated.
func TestForwardTooLargeWithoutBucketFails(t *testing.T) {
	var sent int
	p := process.New(sendFunc(func(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		sent++
		return &sqs.SendMessageOutput{}, nil
	}), "https://q/target", process.WithMaxMessageBytes(1024))
	if err := p(context.Background(), rec(bytes.Repeat([]byte("x"), 2000), "k", 0)); err == nil || sent != 0 {
		t.Fatalf("err %v, %d sent", err, sent)
	}
	if err := p(context.Background(), rec(bytes.Repeat([]byte("x"), 500), "k", 0)); err != nil || sent != 1 {
		t.Fatalf("small record: err %v, %d sent", err, sent)
	}
}

func TestFetchBody(t *testing.T) {
	ctx := context.Background()
	if b, err := process.FetchBody(ctx, nil, "plain", nil); err != nil || b != "plain" {
		t.Errorf("plain body: %q %v", b, err)
	}
	attrs := map[string]sqstypes.MessageAttributeValue{process.AttrExtendedPayloadSize: {DataType: aws.String("Number"), StringValue: aws.String("9")}}
	for _, body := range []string{"plain", `["other.Class",{"s3BucketName":"b","s3Key":"k"}]`, `["` + process.PointerClass + `",{"s3BucketName":"b"}]`} {
		if _, err := process.FetchBody(ctx, nil, body, attrs); err == nil {
			t.Errorf("body %q with %s accepted", body, process.AttrExtendedPayloadSize)
		}
	}
}
