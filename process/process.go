// Package process is gapless's default business logic: it forwards every record to an SQS queue
// (TARGET_QUEUE_URL), which makes the consumer a loss-free Kinesis→SQS bridge.
//
// Every record Kinesis accepts crosses the bridge, up to the 10 MiB a stream takes when its
// maximum record size is raised. A message larger than the queue takes (1 MiB, SQS's ceiling,
// counting the body and the attributes; binary data grows by a third in base64, so binary
// records over ~768 KiB) is sent claim-check style, in the format of the Amazon SQS Extended
// Client Library (SQS developer guide, "Managing large Amazon SQS messages with Extended Client
// Library and Amazon S3"; awslabs/amazon-sqs-java-extended-client-lib): the body that would have
// been sent is stored as one S3 object in the payload bucket (PAYLOAD_BUCKET), and the message
// body is the pointer
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"<bucket>","s3Key":"<key>"}]
//
// with the message attribute ExtendedPayloadSize (Number: the stored body's size in bytes) beside
// gapless's own attributes. A consumer using the Extended Client (Java, Python, and ports) reads
// such messages transparently; any other consumer calls FetchBody. The objects expire with the
// bucket's lifecycle (15 days, longer than the queue's 14-day retention); gapless never deletes
// them, since a message may be received more than once.
//
// NewBatch (batch.go) sends the same messages with SendMessageBatch, up to 10 per request, as a
// pipeline.BatchFunc; it is what a nil Process selects by default.
//
// It is what a nil Process selects in the root package (github.com/gapless-dev/gapless). To run
// your own logic, do not edit this package: give your Process to gapless.StartConsumer and
// gapless.StartReconciler (the package documentation there states its contract; examples/
// has a complete service).
package process

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// Message attributes set on every forwarded message.
const (
	AttrRecordID     = "gapless.recordId"     // shardId:sequenceNumber:subIndex
	AttrPartitionKey = "gapless.partitionKey" // String, or Binary when SQS cannot carry it as text
	AttrEncoding     = "gapless.encoding"     // EncodingText, EncodingBase64 or EncodingEmpty
)

// Body encodings (AttrEncoding).
const (
	// EncodingText: the body is the record's data as is (valid UTF-8 SQS accepts).
	EncodingText = "text"
	// EncodingBase64: the data is not text SQS can carry; the body is its standard base64.
	EncodingBase64 = "base64"
	// EncodingEmpty: the data is empty; SQS requires a non-empty body, so the body is
	// EmptyBody and must be read as zero bytes.
	EncodingEmpty = "empty"
)

// EmptyBody is the placeholder body for an empty record (EncodingEmpty).
const EmptyBody = "-"

// SendMessageAPI is the one SQS call New needs; *sqs.Client satisfies it.
type SendMessageAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ SendMessageAPI = (*sqs.Client)(nil)

// PutObjectAPI is the S3 call New makes for a message too large for the queue.
type PutObjectAPI interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// GetObjectAPI is the S3 call FetchBody makes.
type GetObjectAPI interface {
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var (
	_ PutObjectAPI = (*s3.Client)(nil)
	_ GetObjectAPI = (*s3.Client)(nil)
)

// The Amazon SQS Extended Client Library's names (SQSExtendedClientConstants and
// payloadoffloading.PayloadS3Pointer in awslabs/amazon-sqs-java-extended-client-lib).
const (
	// AttrExtendedPayloadSize marks a message whose body is in S3; its value is the body's size.
	AttrExtendedPayloadSize = "ExtendedPayloadSize"
	// PointerClass is the first element of the pointer body.
	PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
)

// DefaultMaxMessageBytes is the largest message New sends with the body inline: 1 MiB, the SQS
// ceiling (SendMessage API reference: "The maximum size is 1 MiB or 1,048,576 bytes"), which
// template.yaml gives the target queue. A queue configured for less needs WithMaxMessageBytes.
const DefaultMaxMessageBytes = 1024 * 1024

// KeyPrefix starts the key of every forwarded body stored in S3.
const KeyPrefix = "target/"

// Option configures New.
type Option func(*forwarder)

// WithPayloadBucket stores bodies too large for a message in bucket (PAYLOAD_BUCKET) through
// client. Without it such a record fails (and is parked after MAX_RECORD_ATTEMPTS).
func WithPayloadBucket(client PutObjectAPI, bucket string) Option {
	return func(f *forwarder) { f.s3, f.bucket = client, bucket }
}

// WithMaxMessageBytes sets the largest message (body plus attributes) sent inline.
func WithMaxMessageBytes(n int) Option { return func(f *forwarder) { f.maxBytes = n } }

type forwarder struct {
	client   SendMessageAPI
	batch    SendMessageBatchAPI // NewBatch
	conc     int                 // NewBatch: requests at once
	url      string
	fifo     bool
	maxBytes int
	s3       PutObjectAPI
	bucket   string
}

// New returns the default Process: each record becomes one SendMessage to targetQueueURL with
// the data as the body (base64 when it is not valid SQS text, see AttrEncoding) and the record id
// and partition key as attributes; a message over the size limit goes through the payload bucket
// (see the package comment). On a FIFO queue (URL ending in .fifo) MessageGroupId is the
// partition key, so order per key is kept downstream, and MessageDeduplicationId is the record
// id, so a record forwarded twice within SQS's 5-minute deduplication window is delivered once.
// Either id longer than 128 characters, or with characters SQS does not allow in it, is replaced
// by the SHA-256 hex of its value.
func New(client SendMessageAPI, targetQueueURL string, opts ...Option) pipeline.ProcessFunc {
	f := &forwarder{client: client, url: targetQueueURL, fifo: strings.HasSuffix(targetQueueURL, ".fifo"), maxBytes: DefaultMaxMessageBytes}
	for _, o := range opts {
		o(f)
	}
	return f.forward
}

func (f *forwarder) forward(ctx context.Context, r pipeline.Record) error {
	in, err := f.message(ctx, r)
	if err != nil {
		return err
	}
	if _, err := f.client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("process: forward record %s to %s: %w", r.ID, f.url, err)
	}
	return nil
}

// offload stores in's body (size bytes as a message) in the payload bucket and points in at it.
func (f *forwarder) offload(ctx context.Context, r pipeline.Record, in *sqs.SendMessageInput, size int) error {
	if f.s3 == nil || f.bucket == "" {
		return fmt.Errorf("process: record %s: a %d-byte message exceeds the target queue's %d and no payload bucket is configured", r.ID, size, f.maxBytes)
	}
	body := aws.ToString(in.MessageBody)
	key := fmt.Sprintf("%s%s/%s-%d/%s", KeyPrefix, r.ID.ShardID, r.ID.Seq, r.ID.Sub, nonce())
	if _, err := f.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key),
		Body: strings.NewReader(body), ContentLength: aws.Int64(int64(len(body)))}); err != nil {
		return fmt.Errorf("process: store record %s's body in s3://%s/%s: %w", r.ID, f.bucket, key, err)
	}
	in.MessageBody = aws.String(pointerBody(f.bucket, key))
	in.MessageAttributes[AttrExtendedPayloadSize] = sqstypes.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(len(body)))}
	return nil
}

// Size is the size of a SendMessage request as SQS counts it against the queue's
// MaximumMessageSize: the body plus each attribute's name, data type and value.
func Size(in *sqs.SendMessageInput) int {
	n := len(aws.ToString(in.MessageBody))
	for k, v := range in.MessageAttributes {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

type s3Pointer struct {
	Bucket string `json:"s3BucketName"`
	Key    string `json:"s3Key"`
}

func pointerBody(bucket, key string) string {
	b, _ := json.Marshal([]any{PointerClass, s3Pointer{Bucket: bucket, Key: key}}) // strings only: cannot fail
	return string(b)
}

// ErrNotPointer: FetchBody was given a message marked ExtendedPayloadSize whose body is not a pointer.
var ErrNotPointer = errors.New("process: not an S3 pointer body")

// FetchBody returns the body a forwarded message stands for: body itself, or, when attrs hold
// ExtendedPayloadSize, the S3 object its pointer body names (read through client). Decode the
// result with the AttrEncoding attribute as usual.
func FetchBody(ctx context.Context, client GetObjectAPI, body string, attrs map[string]sqstypes.MessageAttributeValue) (string, error) {
	if _, ok := attrs[AttrExtendedPayloadSize]; !ok {
		return body, nil
	}
	var ptr []json.RawMessage
	var p s3Pointer
	var class string
	if json.Unmarshal([]byte(body), &ptr) != nil || len(ptr) != 2 || json.Unmarshal(ptr[0], &class) != nil || class != PointerClass ||
		json.Unmarshal(ptr[1], &p) != nil || p.Bucket == "" || p.Key == "" {
		return "", fmt.Errorf("%w: %.200q", ErrNotPointer, body)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(p.Bucket), Key: aws.String(p.Key)})
	if err != nil {
		return "", fmt.Errorf("process: get s3://%s/%s: %w", p.Bucket, p.Key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return "", fmt.Errorf("process: read s3://%s/%s: %w", p.Bucket, p.Key, err)
	}
	return string(b), nil
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Message builds the inline SendMessage request New sends for r (exported for tests and tools).
func Message(queueURL string, fifo bool, r pipeline.Record) *sqs.SendMessageInput {
	body, enc := Body(r.Data)
	attrs := map[string]sqstypes.MessageAttributeValue{
		AttrRecordID: {DataType: aws.String("String"), StringValue: aws.String(r.ID.String())},
		AttrEncoding: {DataType: aws.String("String"), StringValue: aws.String(enc)},
	}
	switch {
	case r.PartitionKey == "":
	case sqsText(r.PartitionKey):
		attrs[AttrPartitionKey] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r.PartitionKey)}
	default:
		attrs[AttrPartitionKey] = sqstypes.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(r.PartitionKey)}
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body), MessageAttributes: attrs}
	if fifo {
		in.MessageGroupId = aws.String(fifoID(r.PartitionKey))
		in.MessageDeduplicationId = aws.String(fifoID(r.ID.String()))
	}
	return in
}

// Body returns the SQS body for data and its encoding. SQS accepts only these characters in a
// body: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF (SendMessage API
// reference), and may silently replace others with U+FFFD; any other byte sequence is sent as
// base64 so the data arrives unchanged.
func Body(data []byte) (body, encoding string) {
	switch {
	case len(data) == 0:
		return EmptyBody, EncodingEmpty
	case sqsText(string(data)):
		return string(data), EncodingText
	}
	return base64.StdEncoding.EncodeToString(data), EncodingBase64
}

// Decode reverses Body given the AttrEncoding value.
func Decode(body, encoding string) ([]byte, error) {
	switch encoding {
	case EncodingText:
		return []byte(body), nil
	case EncodingEmpty:
		return []byte{}, nil
	case EncodingBase64:
		return base64.StdEncoding.DecodeString(body)
	}
	return nil, fmt.Errorf("process: unknown body encoding %q", encoding)
}

func sqsText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// fifoID returns s when it is a valid MessageGroupId/MessageDeduplicationId (1-128 characters,
// alphanumeric and punctuation !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~), else the SHA-256 hex of s.
func fifoID(s string) string {
	ok := len(s) >= 1 && len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= '!' && c <= '~' // ASCII alphanumerics and punctuation, no space
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
