package park

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.SQS)) }

type sendFunc func(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)

func (f sendFunc) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return f(ctx, in, o...)
}

var (
	shard = recordid.Shard{Group: "g1", Stream: "orders", ShardID: "shardId-000000000001"}
	at    = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func record(data []byte) Record {
	return Record{
		ID:    recordid.ID{ShardID: shard.ShardID, Seq: "49590338271490256608559692538361571095921575989136588818", Sub: 2},
		Shard: shard, PartitionKey: "customer-7", ArrivalTime: at, Data: data, Attempts: 5,
		LastError: "boom", Source: "consumer",
	}
}

type putFunc func(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)

func (f putFunc) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	return f(ctx, in, o...)
}

func TestParkUnit(t *testing.T) {
	big := bytes.Repeat([]byte{0xff, 0x00, 'x'}, 2000) // 6000 bytes, 8000 in base64
	for _, tc := range []struct {
		name    string
		queue   string
		max     int
		bucket  string
		data    []byte
		sendErr error
		putErr  error
		wantErr error
		wantS3  bool
	}{
		{name: "payload fits", queue: "https://q/parked", max: 64 * 1024, data: big},
		{name: "too large goes to the payload bucket", queue: "https://q/parked", max: 4096, bucket: "b", data: big, wantS3: true},
		{name: "too large without a bucket is not parked", queue: "https://q/parked", max: 4096, data: big, wantErr: ErrTooLarge},
		{name: "payload bucket unavailable: not parked", queue: "https://q/parked", max: 4096, bucket: "b", data: big, putErr: errors.New("AccessDenied"), wantErr: errors.New("")},
		{name: "empty payload", queue: "https://q/parked", max: 4096, data: nil},
		{name: "fifo queue", queue: "https://q/parked.fifo", max: 64 * 1024, data: []byte("hi")},
		{name: "send error means not parked", queue: "https://q/parked", max: 4096, data: []byte("x"), sendErr: errors.New("throttled"), wantErr: errors.New("")},
		{name: "limit too small even without payload", queue: "https://q/parked", max: 100, bucket: "b", data: big, wantErr: ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent *sqs.SendMessageInput
			var put *s3.PutObjectInput
			var putData []byte
			fake := sendFunc(func(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
				sent = in
				if tc.sendErr != nil {
					return nil, tc.sendErr
				}
				return &sqs.SendMessageOutput{MessageId: aws.String("m-1")}, nil
			})
			store := putFunc(func(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
				put = in
				putData, _ = io.ReadAll(in.Body)
				if tc.putErr != nil {
					return nil, tc.putErr
				}
				return &s3.PutObjectOutput{}, nil
			})
			opts := []Option{WithMaxMessageBytes(tc.max), WithClock(func() time.Time { return at.Add(time.Hour) })}
			if tc.bucket != "" {
				opts = append(opts, WithPayloadBucket(store, tc.bucket))
			}
			p := New(fake, tc.queue, opts...)
			res, err := p.Park(context.Background(), record(tc.data))
			switch {
			case tc.wantErr != nil && (tc.sendErr != nil || tc.putErr != nil):
				if !errors.Is(err, tc.sendErr) && !errors.Is(err, tc.putErr) {
					t.Fatalf("err = %v, want wrapping %v", err, tc.sendErr)
				}
				if tc.putErr != nil && sent != nil {
					t.Fatal("sent a message naming an object that was not stored")
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if sent != nil {
					t.Fatal("sent a message despite the error")
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if (res.PayloadS3 != nil) != tc.wantS3 || res.MessageID != "m-1" {
				t.Fatalf("result = %+v, want payload in S3 %v", res, tc.wantS3)
			}
			if n := len(aws.ToString(sent.MessageBody)); n > tc.max {
				t.Errorf("body %d bytes > limit %d", n, tc.max)
			}
			m, err := Decode(aws.ToString(sent.MessageBody))
			if err != nil {
				t.Fatal(err)
			}
			want := record(tc.data)
			if m.RecordID != want.ID.String() || m.Seq != want.ID.Seq || m.Sub != 2 || m.Version != Version || len(m.ParkID) != 16 ||
				m.ShardID != shard.ShardID || m.Group != "g1" || m.Stream != "orders" || m.PartitionKey != "customer-7" ||
				!m.ArrivalTime.Equal(at) || m.Attempts != 5 || m.LastError != "boom" || m.Source != "consumer" ||
				!m.ParkedAt.Equal(at.Add(time.Hour)) || m.DataBytes != len(tc.data) || m.ByRef {
				t.Errorf("decoded message = %+v", m)
			}
			where := aws.ToString(sent.MessageAttributes[AttrPayload].StringValue)
			if tc.wantS3 {
				if len(m.Data) != 0 || m.PayloadS3 == nil || *m.PayloadS3 != *res.PayloadS3 || where != PayloadInS3 {
					t.Errorf("message %+v (attribute %q) does not name the object %+v alone", m, where, res.PayloadS3)
				}
				if aws.ToString(put.Bucket) != "b" || aws.ToString(put.Key) != m.PayloadS3.Key || !bytes.Equal(putData, tc.data) ||
					!strings.HasPrefix(m.PayloadS3.Key, KeyPrefix+"g1/orders/"+shard.ShardID+"/"+want.ID.Seq+"-2/") {
					t.Errorf("stored s3://%s/%s (%d bytes), message names %+v", aws.ToString(put.Bucket), aws.ToString(put.Key), len(putData), m.PayloadS3)
				}
			} else {
				if !bytes.Equal(m.Data, tc.data) || m.PayloadS3 != nil || where != PayloadInline {
					t.Errorf("payload changed or not inline (attribute %q)", where)
				}
				if put != nil {
					t.Error("stored an object for a payload that fits")
				}
			}
			if got := aws.ToString(sent.MessageAttributes[AttrRecordID].StringValue); got != want.ID.String() {
				t.Errorf("record id attribute = %q", got)
			}
			if strings.HasSuffix(tc.queue, ".fifo") {
				if aws.ToString(sent.MessageDeduplicationId) != want.ID.String()+"/"+m.ParkID || aws.ToString(sent.MessageGroupId) == "" {
					t.Errorf("fifo ids: group %q dedup %q", aws.ToString(sent.MessageGroupId), aws.ToString(sent.MessageDeduplicationId))
				}
			} else if sent.MessageGroupId != nil {
				t.Error("group id on a standard queue")
			}
		})
	}
}

// TestEveryParkIsADistinctMessage: two parks of one record differ in deduplication id and
// object key, so a FIFO queue keeps both.
func TestEveryParkIsADistinctMessage(t *testing.T) {
	var dedup, keys []string
	fake := sendFunc(func(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		dedup = append(dedup, aws.ToString(in.MessageDeduplicationId))
		return &sqs.SendMessageOutput{MessageId: aws.String("m")}, nil
	})
	store := putFunc(func(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
		keys = append(keys, aws.ToString(in.Key))
		return &s3.PutObjectOutput{}, nil
	})
	p := New(fake, "https://q/parked.fifo", WithMaxMessageBytes(2048), WithPayloadBucket(store, "b"))
	for range 2 {
		if _, err := p.Park(context.Background(), record(bytes.Repeat([]byte("x"), 4096))); err != nil {
			t.Fatal(err)
		}
	}
	if len(dedup) != 2 || dedup[0] == dedup[1] || len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("dedup ids %q, keys %q: want two distinct messages and objects", dedup, keys)
	}
}

func TestParkRejectsInvalidRecords(t *testing.T) {
	never := sendFunc(func(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		t.Fatal("sent an invalid record")
		return nil, nil
	})
	for name, mutate := range map[string]func(*Record){
		"bad sequence":      func(r *Record) { r.ID.Seq = "01" },
		"bad shard":         func(r *Record) { r.Shard.Group = "a|b" },
		"shard mismatch":    func(r *Record) { r.ID.ShardID = "shardId-000000000009" },
		"empty stream":      func(r *Record) { r.Shard.Stream = "" },
		"empty shard of id": func(r *Record) { r.ID.ShardID = "" },
	} {
		t.Run(name, func(t *testing.T) {
			r := record([]byte("x"))
			mutate(&r)
			if _, err := New(never, "https://q/p").Park(context.Background(), r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	good := `{"v":1,"recordId":"shardId-1:5:0","shardId":"shardId-1","sequenceNumber":"5","subSequenceNumber":0,"data":"aGk=","dataBytes":2,"dataSha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"}`
	if _, err := Decode(good); err != nil {
		t.Fatalf("good message: %v", err)
	}
	for name, body := range map[string]string{
		"not json":         `{`,
		"wrong version":    strings.Replace(good, `"v":1`, `"v":4`, 1),
		"v3 raw key":       strings.Replace(good, `"v":1`, `"v":3,"partitionKey":"k","partitionKeyB64":"aw=="`, 1),
		"v2 by reference":  strings.Replace(good, `"v":1`, `"v":2,"byRef":true`, 1),
		"v1 with object":   strings.Replace(good, `"v":1`, `"v":1,"payloadS3":{"s3BucketName":"b","s3Key":"k"}`, 1),
		"object and data":  `{"v":2,"payloadS3":{"s3BucketName":"b","s3Key":"k"},` + good[len(`{"v":1,`):],
		"object no key":    `{"v":2,"recordId":"shardId-1:5:0","shardId":"shardId-1","sequenceNumber":"5","data":"","payloadS3":{"s3BucketName":"b"}}`,
		"bad id":           strings.Replace(good, `"shardId-1:5:0"`, `"nope"`, 1),
		"id disagrees":     strings.Replace(good, `"sequenceNumber":"5"`, `"sequenceNumber":"6"`, 1),
		"payload tampered": strings.Replace(good, `"aGk="`, `"aGo="`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Decode(body); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := truncate(s, 5)
	if !strings.HasPrefix(got, "éé…") {
		t.Errorf("truncate = %q", got)
	}
	if truncate("short", 10) != "short" {
		t.Error("short string changed")
	}
}

// TestParkOnSQS sends to a real queue and bucket (fauxqs or moto, S3 on the same port) and reads
// every message back: the payload is byte-for-byte the record's, inline when it fits (bytes that
// are not valid UTF-8 included) and from the payload bucket when it does not: ~200 KB (inline at
// the 1 MiB default), ~1 MiB (a full Kinesis record) and a few MiB (a stream whose maximum
// record size was raised, up to 10 MiB). Such records were parked "by
// reference", without their payload; after the stream's retention it existed nowhere.
func TestParkOnSQS(t *testing.T) {
	ctx := context.Background()
	client, objects := stacktest.SQS(t), stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	sizes := map[string]int{"binary": 3, "200KB": 200 * 1000, "1MiB": 1 << 20, "3MiB": 3 << 20}
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			url := stacktest.Queue(t, "parked", fifo)
			p := New(client, url, WithPayloadBucket(objects, bucket))
			want := map[string][]byte{}
			i := 0
			for name, n := range sizes {
				data := make([]byte, n)
				_, _ = rand.Read(data)
				r := record(data)
				r.ID.Seq += string(rune('0' + i)) // distinct records
				i++
				res, err := p.Park(ctx, r)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if wantS3 := n > 700*1000; (res.PayloadS3 != nil) != wantS3 {
					t.Errorf("%s: payload in S3 %v, want %v", name, res.PayloadS3 != nil, wantS3)
				}
				want[r.ID.String()] = data
			}
			got := map[string]bool{}
			// VisibilityTimeout 5: when the SDK retries a receive whose answer it lost on the
			// connection (it retries "use of closed network connection"), the messages of the lost
			// answer are hidden for the visibility timeout (and in a FIFO queue block their group);
			// 5 s brings them back well inside the deadline.
			for deadline := time.Now().Add(30 * time.Second); len(got) < len(want) && time.Now().Before(deadline); {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
					MessageAttributeNames: []string{"All"},
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, msg := range out.Messages {
					m, err := Decode(aws.ToString(msg.Body))
					if err != nil {
						t.Fatal(err)
					}
					if aws.ToString(msg.MessageAttributes[AttrRecordID].StringValue) != m.RecordID {
						t.Errorf("attribute %s missing or wrong", AttrRecordID)
					}
					data, err := m.Payload(ctx, objects)
					if err != nil {
						t.Fatalf("record %s: %v", m.RecordID, err)
					}
					if !bytes.Equal(data, want[m.RecordID]) {
						t.Errorf("record %s: payload of %d bytes read back, want %d", m.RecordID, len(data), len(want[m.RecordID]))
					}
					got[m.RecordID] = true
					// A FIFO group releases its next message only after this one is deleted.
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: msg.ReceiptHandle}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(got) != len(want) {
				t.Fatalf("received %d messages, want %d", len(got), len(want))
			}
		})
	}
}

// TestPayloadDetectsAlteredOrMissingObjects: an object replaced or deleted behind a message is
// an error (ErrPayload), never a different payload.
func TestPayloadDetectsAlteredOrMissingObjects(t *testing.T) {
	ctx := context.Background()
	client, objects := stacktest.SQS(t), stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	url := stacktest.Queue(t, "parked", false)
	var sent *sqs.SendMessageInput
	capture := sendFunc(func(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
		sent = in
		return client.SendMessage(ctx, in, o...)
	})
	res, err := New(capture, url, WithMaxMessageBytes(2048), WithPayloadBucket(objects, bucket)).Park(ctx, record(bytes.Repeat([]byte("p"), 5000)))
	if err != nil || res.PayloadS3 == nil {
		t.Fatalf("park: %+v %v", res, err)
	}
	m, err := Decode(aws.ToString(sent.MessageBody))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := m.Payload(ctx, objects); err != nil || len(data) != 5000 {
		t.Fatalf("intact object: %d bytes, %v", len(data), err)
	}
	if _, err := objects.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(res.PayloadS3.Key),
		Body: strings.NewReader(strings.Repeat("q", 5000))}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Payload(ctx, objects); !errors.Is(err, ErrPayload) {
		t.Errorf("altered object: err = %v, want ErrPayload", err)
	}
	if _, err := objects.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(res.PayloadS3.Key)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Payload(ctx, objects); !errors.Is(err, ErrPayload) {
		t.Errorf("missing object: err = %v, want ErrPayload", err)
	}
	legacy := Message{Version: 1, ByRef: true, RecordID: m.RecordID}
	if _, err := legacy.Payload(ctx, objects); !errors.Is(err, ErrByRef) {
		t.Errorf("by-reference message: err = %v, want ErrByRef", err)
	}
}

// TestVersion3KeepsEveryByte: a key of any bytes and a last error with U+FFFE, U+FFFF, control
// characters or bytes that are not UTF-8 come back exactly, and the body holds only characters
// SQS accepts; version-2 bodies still decode.
func TestVersion3KeepsEveryByte(t *testing.T) {
	m := Message{Version: Version, RecordID: "shardId-1:5:0", ShardID: "shardId-1", Seq: "5", Group: "g", Stream: "s",
		PartitionKey: "k\xff\uFFFE\uFFFF\x00", LastError: "bad \xc3 byte \uFFFF \x1b[31m", Data: []byte("hi"), DataBytes: 2,
		DataSHA256: "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4", ParkID: "0000000000000001"}
	body, err := encode(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range string(body) {
		if !(r == 0x9 || r == 0xA || r == 0xD || (r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)) {
			t.Fatalf("body holds %U, which SQS refuses: %s", r, body)
		}
	}
	got, err := Decode(string(body))
	if err != nil {
		t.Fatal(err)
	}
	if got.PartitionKey != m.PartitionKey || got.LastError != m.LastError {
		t.Fatalf("key %q error %q, want %q %q", got.PartitionKey, got.LastError, m.PartitionKey, m.LastError)
	}
	v2 := m
	v2.Version, v2.PartitionKey, v2.LastError = 2, "plain", "plain"
	b2, _ := json.Marshal(v2)
	if got, err := Decode(string(b2)); err != nil || got.PartitionKey != "plain" {
		t.Fatalf("version 2: %+v %v", got, err)
	}
}
