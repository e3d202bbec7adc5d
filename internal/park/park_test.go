package park

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/localstack"
	"github.com/gapless-dev/gapless/internal/localstack/stacktest"
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

func TestParkUnit(t *testing.T) {
	big := bytes.Repeat([]byte{0xff, 0x00, 'x'}, 2000) // 6000 bytes, 8000 in base64
	for _, tc := range []struct {
		name      string
		queue     string
		max       int
		data      []byte
		sendErr   error
		wantErr   error
		wantByRef bool
	}{
		{name: "payload fits", queue: "https://q/parked", max: 64 * 1024, data: big},
		{name: "too large parks by reference", queue: "https://q/parked", max: 4096, data: big, wantByRef: true},
		{name: "empty payload", queue: "https://q/parked", max: 4096, data: nil},
		{name: "fifo queue", queue: "https://q/parked.fifo", max: 64 * 1024, data: []byte("hi")},
		{name: "send error means not parked", queue: "https://q/parked", max: 4096, data: []byte("x"), sendErr: errors.New("throttled"), wantErr: errors.New("")},
		{name: "limit too small even without payload", queue: "https://q/parked", max: 100, data: big, wantErr: ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent *sqs.SendMessageInput
			fake := sendFunc(func(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
				sent = in
				if tc.sendErr != nil {
					return nil, tc.sendErr
				}
				return &sqs.SendMessageOutput{MessageId: aws.String("m-1")}, nil
			})
			p := New(fake, tc.queue, WithMaxMessageBytes(tc.max), WithClock(func() time.Time { return at.Add(time.Hour) }))
			res, err := p.Park(context.Background(), record(tc.data))
			switch {
			case tc.wantErr != nil && tc.sendErr != nil:
				if !errors.Is(err, tc.sendErr) {
					t.Fatalf("err = %v, want wrapping %v", err, tc.sendErr)
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
			if res.ByRef != tc.wantByRef || res.MessageID != "m-1" {
				t.Fatalf("result = %+v, want byRef %v", res, tc.wantByRef)
			}
			if n := len(aws.ToString(sent.MessageBody)); n > tc.max {
				t.Errorf("body %d bytes > limit %d", n, tc.max)
			}
			m, err := Decode(aws.ToString(sent.MessageBody))
			if err != nil {
				t.Fatal(err)
			}
			want := record(tc.data)
			if m.ByRef != tc.wantByRef || m.RecordID != want.ID.String() || m.Seq != want.ID.Seq || m.Sub != 2 ||
				m.ShardID != shard.ShardID || m.Group != "g1" || m.Stream != "orders" || m.PartitionKey != "customer-7" ||
				!m.ArrivalTime.Equal(at) || m.Attempts != 5 || m.LastError != "boom" || m.Source != "consumer" ||
				!m.ParkedAt.Equal(at.Add(time.Hour)) || m.DataBytes != len(tc.data) {
				t.Errorf("decoded message = %+v", m)
			}
			if tc.wantByRef {
				if len(m.Data) != 0 {
					t.Error("by-reference message carries data")
				}
			} else if !bytes.Equal(m.Data, tc.data) {
				t.Error("payload changed")
			}
			if got := aws.ToString(sent.MessageAttributes[AttrRecordID].StringValue); got != want.ID.String() {
				t.Errorf("record id attribute = %q", got)
			}
			if strings.HasSuffix(tc.queue, ".fifo") {
				if aws.ToString(sent.MessageDeduplicationId) != want.ID.String() || aws.ToString(sent.MessageGroupId) == "" {
					t.Errorf("fifo ids: group %q dedup %q", aws.ToString(sent.MessageGroupId), aws.ToString(sent.MessageDeduplicationId))
				}
			} else if sent.MessageGroupId != nil {
				t.Error("group id on a standard queue")
			}
		})
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
		"wrong version":    strings.Replace(good, `"v":1`, `"v":2`, 1),
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

// TestParkOnSQS sends to a real queue (fauxqs or moto) and reads the message back: the payload
// is byte-for-byte the record's, including bytes that are not valid UTF-8.
func TestParkOnSQS(t *testing.T) {
	ctx := context.Background()
	client := stacktest.SQS(t)
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			url := stacktest.Queue(t, "parked", fifo)
			p := New(client, url, WithMaxMessageBytes(8192))
			small := append([]byte{0x00, 0xff, 0xfe}, "payload ✓"...)
			large := bytes.Repeat([]byte{0x80}, 9000)
			for i, data := range [][]byte{small, large} {
				r := record(data)
				r.ID.Seq += string(rune('0' + i)) // distinct ids: a FIFO queue deduplicates by record id
				if _, err := p.Park(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			var got []Message
			for deadline := time.Now().Add(20 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
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
					got = append(got, m)
					// A FIFO group releases its next message only after this one is deleted.
					if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: msg.ReceiptHandle}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(got) != 2 {
				t.Fatalf("received %d messages, want 2", len(got))
			}
			var sawSmall, sawRef bool
			for _, m := range got {
				switch {
				case m.ByRef:
					sawRef = m.DataBytes == len(large) && len(m.Data) == 0
				default:
					sawSmall = bytes.Equal(m.Data, small)
				}
			}
			if !sawSmall || !sawRef {
				t.Errorf("small payload intact: %v; large parked by reference: %v", sawSmall, sawRef)
			}
		})
	}
}
