// Package park defines the parked-record message and sends it to the parked SQS queue.
//
// A record that failed MAX_RECORD_ATTEMPTS times is parked: one SQS message carrying its full
// payload (base64) and everything needed to understand and redrive it (record id, shard,
// sequence number, sub-index, partition key, arrival time, attempts, last error, group, stream,
// source, parkedAt). Once the message is accepted by SQS the record counts as accounted for and
// its shard moves on.
//
// Every parked record carries its payload somewhere durable. A payload too large for one SQS
// message (1 MiB, see WithMaxMessageBytes) is stored claim-check style: Park first writes it to
// the payload bucket (PAYLOAD_BUCKET, see WithPayloadBucket) as one S3 object, then sends the
// message naming the object (PayloadS3); redrive reads it back (Message.Payload) and checks its
// length and SHA-256. The bucket's lifecycle outlives the parked queue's 14-day retention
// (template.yaml, schema.PayloadRetentionDays), so the object exists as long as any message can
// name it. Without a bucket a too-large record is not parked at all (ErrTooLarge): it stays
// failed, never parked without its payload.
//
// Every Park call is a distinct message: it carries a fresh ParkID, which is part of the FIFO
// MessageDeduplicationId and of the object key. A record parked again by redrive within SQS's
// 5-minute deduplication window is therefore a new message, not a duplicate SQS accepts and drops
// (after which redrive would delete the only copy). A park retried by the SDK after a lost
// response reuses the request, so its deduplication id, and stays one message on a FIFO queue.
//
// Messages of version 1 may still name a payload "by reference" (byRef, no data, no object):
// older releases parked large records so, and the payload then lives only in the stream. Decode
// reads them so redrive can re-read such a record while the stream retains it; nothing writes
// them any more.
package park

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// Version is the message format version written in every message ("v"). Version 2 added
// parkId and payloadS3; version 3 carries the partition key as base64 (partitionKeyB64, any
// bytes a KPL aggregate's key table may hold) and a last error that is not UTF-8 as base64
// (lastErrorB64), and escapes U+FFFE and U+FFFF, which SQS refuses in a body. Decode still
// reads versions 1 and 2.
const Version = 3

// DefaultMaxMessageBytes is the largest message (body plus attributes) sent with the payload
// inline: 1 MiB, the SQS ceiling (SendMessage API reference: "The maximum size is 1 MiB or
// 1,048,576 bytes") and the MaximumMessageSize template.yaml gives the parked queue. A queue
// configured for less needs WithMaxMessageBytes. fauxqs 1.9.2 and moto 5 default to the same
// 1,048,576 bytes and count the size like SQS (body plus each attribute's name, type and value).
const DefaultMaxMessageBytes = 1024 * 1024

// MaxRecordBytes is the largest payload any Kinesis record can carry: 10 MiB, the highest
// MaxRecordSizeInKiB a stream accepts (UpdateMaxRecordSize API reference: "Specify a value
// between 1024 and 10240 KiB (1 to 10 MiB)"). A parked message claiming more is not a record's.
const MaxRecordBytes = 10240 * 1024

// Message attribute names set on every parked message, so consumers of the queue can filter
// without decoding the body.
const (
	AttrRecordID = "gapless.recordId"
	AttrGroup    = "gapless.group"
	// AttrPayload says where the payload is: PayloadInline or PayloadS3.
	AttrPayload = "gapless.payload"
)

// AttrPayload values.
const (
	PayloadInline = "inline"
	PayloadInS3   = "s3"
)

// Errors.
var (
	// ErrInvalid: the message lacks what a parked record must carry.
	ErrInvalid = errors.New("park: invalid message")
	// ErrTooLarge: the payload does not fit in a message and no payload bucket is configured, or
	// even the message naming the object exceeds the limit (Park truncates the last error, see
	// maxErrorBytes, so only an absurdly small limit does that). The record is NOT parked.
	ErrTooLarge = errors.New("park: message too large")
	// ErrPayload: a payload stored in S3 cannot be read back, or is not the one parked.
	ErrPayload = errors.New("park: payload object missing or altered")
	// ErrByRef: a version-1 message parked by reference; its payload is only in the stream.
	ErrByRef = errors.New("park: parked by reference by an older release: the payload is only in the stream")
)

// Pointer names the S3 object holding a payload.
type Pointer struct {
	Bucket string `json:"s3BucketName"`
	Key    string `json:"s3Key"`
}

// Message is one parked record, the JSON body of its SQS message.
type Message struct {
	Version      int       `json:"v"`
	RecordID     string    `json:"recordId"` // recordid.ID.String(): shardId:seq:sub
	Group        string    `json:"group"`
	Stream       string    `json:"stream"`
	ShardID      string    `json:"shardId"`
	Seq          string    `json:"sequenceNumber"`
	Sub          uint32    `json:"subSequenceNumber"`
	PartitionKey string    `json:"partitionKey"`
	ArrivalTime  time.Time `json:"approximateArrivalTimestamp"`
	Attempts     int       `json:"attempts"`
	LastError    string    `json:"lastError"`
	Source       string    `json:"source"` // consumer | reconciler | redrive
	ParkedAt     time.Time `json:"parkedAt"`
	// HeldBehind (ON_PARK=hold-key) names the record id this record is parked behind: it was not
	// processed because an earlier record of its partition key is parked. Empty for the head.
	HeldBehind string `json:"heldBehind,omitempty"`
	// ParkID is unique to this park (16 hex digits): two parks of one record are two messages.
	ParkID string `json:"parkId,omitempty"`
	// Data is the payload (base64 in JSON). Empty when PayloadS3 names it (or ByRef).
	Data []byte `json:"data"`
	// PayloadS3 names the object holding the payload when it did not fit in the message.
	PayloadS3 *Pointer `json:"payloadS3,omitempty"`
	// ByRef (version 1 only): parked without the payload; re-read it from the stream by RecordID.
	ByRef bool `json:"byRef,omitempty"`
	// DataBytes and DataSHA256 describe the payload wherever it is, so what is read back from S3
	// (or the stream) is checked before a redrive sends it.
	DataBytes  int    `json:"dataBytes"`
	DataSHA256 string `json:"dataSha256"`
}

// Record is what the caller knows about the record to park.
type Record struct {
	ID           recordid.ID
	Shard        recordid.Shard
	PartitionKey string
	ArrivalTime  time.Time
	Data         []byte
	Attempts     int
	LastError    string
	HeldBehind   string // see Message.HeldBehind
	Source       string
	// GroupPerRecord (ON_PARK=hold-key) gives the message, on a FIFO parked queue, a message
	// group of its own record instead of its shard's: the hold, not the queue, orders a held
	// key's records, and one group per shard would put a re-parked head behind its followers
	// (never received while they wait for it) and let one unredrivable message at a group's
	// front starve every later parked record of the shard.
	GroupPerRecord bool
}

// Result says how a record was parked.
type Result struct {
	MessageID string
	// PayloadS3 names the object holding the payload; nil when the message carries it.
	PayloadS3 *Pointer
	// Receipt is what the ledger records of this park, in the entry that counts the record
	// done: redrive acts only on a message a recorded receipt confirms (Receipt.Confirms).
	Receipt Receipt
}

// Receipt is the ledger's record of one park: what the message Park sent must carry. The park
// id is chosen before the send, so the receipt and the message agree.
type Receipt struct {
	ParkID    string
	Bytes     int      // payload length
	SHA256    string   // hex SHA-256 of the payload
	KeySHA256 string   // hex SHA-256 of the partition key's bytes
	PayloadS3 *Pointer // the object holding the payload; nil: inline
}

// KeyDigest is the hex SHA-256 of a partition key's bytes (Receipt.KeySHA256).
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// KeyLogAttrs are the log attributes naming a record's partition key. The key is user data: it
// is logged as is only with payload logging on (withKey); otherwise the first 16 hex digits of
// KeyDigest, enough to match the lines of one key.
func KeyLogAttrs(key string, withKey bool) []any {
	if withKey {
		return []any{"partition_key", key}
	}
	return []any{"partition_key_sha256", KeyDigest(key)[:16]}
}

// Receipt returns the receipt of m (what the ledger recorded when the pipeline sent m).
func (m Message) Receipt() Receipt {
	r := Receipt{ParkID: m.ParkID, Bytes: m.DataBytes, SHA256: m.DataSHA256, KeySHA256: KeyDigest(m.PartitionKey)}
	if m.PayloadS3 != nil {
		ptr := *m.PayloadS3
		r.PayloadS3 = &ptr
	}
	return r
}

// ErrUnconfirmed: a parked message no recorded park confirms (unknown record or park id,
// another payload or key, another payload object). Redrive refuses it.
var ErrUnconfirmed = errors.New("park: message not confirmed by the ledger")

// Confirms reports whether m is the message of this park: same park id, payload length and
// digest, partition key and payload location. The error says which field differs, never
// echoing the message's claimed values back as if they were facts.
func (r Receipt) Confirms(m Message) error {
	switch {
	case m.ParkID == "" || m.ParkID != r.ParkID:
		return fmt.Errorf("%w: park id %q is not the recorded park %s", ErrUnconfirmed, m.ParkID, r.ParkID)
	case m.DataBytes != r.Bytes || m.DataSHA256 != r.SHA256:
		return fmt.Errorf("%w: payload length or SHA-256 differs from park %s", ErrUnconfirmed, r.ParkID)
	case KeyDigest(m.PartitionKey) != r.KeySHA256:
		return fmt.Errorf("%w: partition key differs from park %s", ErrUnconfirmed, r.ParkID)
	case (m.PayloadS3 == nil) != (r.PayloadS3 == nil) || (m.PayloadS3 != nil && *m.PayloadS3 != *r.PayloadS3):
		return fmt.Errorf("%w: payload location differs from park %s", ErrUnconfirmed, r.ParkID)
	}
	return nil
}

type sqsAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// PutObjectAPI is the S3 call Park makes for a payload too large for a message.
type PutObjectAPI interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// GetObjectAPI is the S3 call Message.Payload makes to read a payload back.
type GetObjectAPI interface {
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var (
	_ PutObjectAPI = (*s3.Client)(nil)
	_ GetObjectAPI = (*s3.Client)(nil)
)

// Parker sends parked-record messages to one queue.
type Parker struct {
	client   sqsAPI
	queueURL string
	maxBytes int
	s3       PutObjectAPI
	bucket   string
	now      func() time.Time
	nonce    func() string
}

// Option configures a Parker.
type Option func(*Parker)

// WithMaxMessageBytes sets the largest message (body plus attributes) Park sends with the
// payload inline; larger payloads go to the payload bucket.
func WithMaxMessageBytes(n int) Option { return func(p *Parker) { p.maxBytes = n } }

// WithPayloadBucket stores payloads too large for a message in bucket (PAYLOAD_BUCKET) through
// client. Without it such a record cannot be parked (ErrTooLarge).
func WithPayloadBucket(client PutObjectAPI, bucket string) Option {
	return func(p *Parker) { p.s3, p.bucket = client, bucket }
}

// WithClock replaces time.Now for parkedAt (tests).
func WithClock(now func() time.Time) Option { return func(p *Parker) { p.now = now } }

// New returns a Parker sending to queueURL (PARKED_QUEUE_URL).
func New(client sqsAPI, queueURL string, opts ...Option) *Parker {
	p := &Parker{client: client, queueURL: queueURL, maxBytes: DefaultMaxMessageBytes, now: time.Now, nonce: newParkID}
	for _, o := range opts {
		o(p)
	}
	return p
}

// maxErrorBytes bounds the last-error text kept in a message.
const maxErrorBytes = 4096

// KeyPrefix starts the key of every parked payload object.
const KeyPrefix = "parked/"

// Park sends one message for r: with the payload when it fits in the size limit, naming an S3
// object holding it otherwise (written first). An error means the record is NOT parked (the
// caller keeps it failed); an object written before a failed send is left to the bucket's
// lifecycle.
func (p *Parker) Park(ctx context.Context, r Record) (Result, error) {
	if err := r.ID.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Shard.Validate(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.ID.ShardID != r.Shard.ShardID {
		return Result{}, fmt.Errorf("%w: record %s is not of shard %s", ErrInvalid, r.ID, r.Shard.ShardID)
	}
	sum := sha256.Sum256(r.Data)
	m := Message{
		Version: Version, RecordID: r.ID.String(), Group: r.Shard.Group, Stream: r.Shard.Stream,
		ShardID: r.ID.ShardID, Seq: r.ID.Seq, Sub: r.ID.Sub, PartitionKey: r.PartitionKey,
		ArrivalTime: r.ArrivalTime.UTC(), Attempts: r.Attempts, LastError: truncate(r.LastError, maxErrorBytes),
		Source: r.Source, ParkedAt: p.now().UTC(), ParkID: p.nonce(), Data: r.Data, HeldBehind: r.HeldBehind,
		DataBytes: len(r.Data), DataSHA256: hex.EncodeToString(sum[:]),
	}
	if m.Data == nil {
		m.Data = []byte{}
	}
	in, size, err := p.input(m, r.GroupPerRecord)
	if err != nil {
		return Result{}, err
	}
	if size > p.maxBytes {
		if p.s3 == nil || p.bucket == "" {
			return Result{}, fmt.Errorf("%w: record %s: %d bytes with its payload, limit %d, and no payload bucket to hold it", ErrTooLarge, m.RecordID, size, p.maxBytes)
		}
		ptr := &Pointer{Bucket: p.bucket, Key: ObjectKey(m)}
		_, err := p.s3.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(ptr.Bucket), Key: aws.String(ptr.Key), Body: bytes.NewReader(r.Data),
			ContentLength: aws.Int64(int64(len(r.Data))), ContentType: aws.String("application/octet-stream"),
			Metadata: map[string]string{"record-id": m.RecordID, "sha256": m.DataSHA256},
		})
		if err != nil {
			return Result{}, fmt.Errorf("park: store payload of record %s in s3://%s/%s: %w", m.RecordID, ptr.Bucket, ptr.Key, err)
		}
		m.Data, m.PayloadS3 = []byte{}, ptr
		if in, size, err = p.input(m, r.GroupPerRecord); err != nil {
			return Result{}, err
		}
		if size > p.maxBytes {
			return Result{}, fmt.Errorf("%w: record %s: %d bytes without payload, limit %d", ErrTooLarge, m.RecordID, size, p.maxBytes)
		}
	}
	out, err := p.client.SendMessage(ctx, in)
	if err != nil {
		return Result{}, fmt.Errorf("park: send record %s to %s: %w", m.RecordID, p.queueURL, err)
	}
	return Result{MessageID: aws.ToString(out.MessageId), PayloadS3: m.PayloadS3, Receipt: m.Receipt()}, nil
}

// ObjectKey is the S3 key of m's payload: parked/<group>/<stream>/<shard>/<seq>-<sub>/<parkId>,
// readable in a bucket listing and unique per park.
func ObjectKey(m Message) string {
	return fmt.Sprintf("%s%s/%s/%s/%s-%d/%s", KeyPrefix, m.Group, m.Stream, m.ShardID, m.Seq, m.Sub, m.ParkID)
}

func newParkID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// input builds the SendMessage request for m and its size as SQS counts it (body plus each
// attribute's name, type and value).
func (p *Parker) input(m Message, groupPerRecord bool) (*sqs.SendMessageInput, int, error) {
	body, err := encode(m)
	if err != nil {
		return nil, 0, fmt.Errorf("park: encode record %s: %w", m.RecordID, err)
	}
	where := PayloadInline
	if m.PayloadS3 != nil {
		where = PayloadInS3
	}
	attrs := map[string]sqstypes.MessageAttributeValue{
		AttrRecordID: {DataType: aws.String("String"), StringValue: aws.String(m.RecordID)},
		AttrGroup:    {DataType: aws.String("String"), StringValue: aws.String(m.Group)},
		AttrPayload:  {DataType: aws.String("String"), StringValue: aws.String(where)},
	}
	size := len(body)
	for k, v := range attrs {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(p.queueURL), MessageBody: aws.String(string(body)), MessageAttributes: attrs}
	if isFIFO(p.queueURL) {
		// A FIFO parked queue: one group per shard keeps a shard's parked records in order. The
		// deduplication id is the record id AND this park's id: the SDK's retry of this very
		// request (same input) after a lost response is deduplicated, while a second park of the
		// record (redrive parking it again within the 5-minute window) is a new message. With the
		// record id alone SQS would accept that second send and drop it, and redrive would then
		// delete the only message left (docs/reconciler.md, redrive).
		in.MessageGroupId = aws.String(hashIfLong(m.Group + ":" + m.Stream + ":" + m.ShardID))
		if groupPerRecord {
			in.MessageGroupId = aws.String(hashIfLong(m.Group + ":" + m.Stream + ":" + m.RecordID))
		}
		in.MessageDeduplicationId = aws.String(hashIfLong(m.RecordID + "/" + m.ParkID))
	}
	return in, size, nil
}

// wireV3 is the body of a version-3 message: Message with the partition key (and a last error
// that is not UTF-8) as base64. Its PartitionKey shadows Message's, so "partitionKey" is never
// written, and is refused when read.
type wireV3 struct {
	Message
	PartitionKey    *string `json:"partitionKey,omitempty"`
	PartitionKeyB64 []byte  `json:"partitionKeyB64"`
	LastErrorB64    []byte  `json:"lastErrorB64,omitempty"`
}

// encode writes m as a version-3 body made only of characters SQS accepts in a message (#x9,
// #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF; SendMessage API reference).
// encoding/json already escapes control characters and writes valid UTF-8 (no surrogates), but
// leaves U+FFFE and U+FFFF raw: they are escaped here (they occur only inside JSON strings,
// where \ufffe and \uffff read back as the same characters). The key is base64, so its bytes come
// back exactly, UTF-8 or not.
func encode(m Message) ([]byte, error) {
	w := wireV3{Message: m, PartitionKeyB64: []byte(m.PartitionKey)}
	if w.PartitionKeyB64 == nil {
		w.PartitionKeyB64 = []byte{}
	}
	if !utf8.ValidString(m.LastError) {
		w.LastErrorB64, w.Message.LastError = []byte(m.LastError), strings.ToValidUTF8(m.LastError, "\uFFFD")
	}
	body, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	body = bytes.ReplaceAll(body, []byte("\uFFFE"), []byte(`\ufffe`))
	return bytes.ReplaceAll(body, []byte("\uFFFF"), []byte(`\uffff`)), nil
}

// Encode returns the version-3 body of m (its Version is ignored), as Park sends it.
func Encode(m Message) (string, error) {
	m.Version = Version
	b, err := encode(m)
	return string(b), err
}

// Decode parses a parked message body (for redrive and tools), version 3, 2 or 1. An inline
// payload is verified against DataSHA256 here; one in S3 when Payload reads it.
func Decode(body string) (Message, error) {
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal([]byte(body), &head); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var m Message
	switch head.V {
	case 1, 2:
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	case 3:
		var w wireV3
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if w.PartitionKey != nil {
			return Message{}, fmt.Errorf("%w: version 3 carries the partition key as partitionKeyB64 only", ErrInvalid)
		}
		m = w.Message
		m.PartitionKey = string(w.PartitionKeyB64)
		if w.LastErrorB64 != nil {
			m.LastError = string(w.LastErrorB64)
		}
	default:
		return Message{}, fmt.Errorf("%w: version %d, want 1, 2 or %d", ErrInvalid, head.V, Version)
	}
	switch {
	case m.Version >= 2 && m.ByRef:
		return Message{}, fmt.Errorf("%w: version %d has no by-reference messages", ErrInvalid, m.Version)
	case m.Version == 1 && m.PayloadS3 != nil:
		return Message{}, fmt.Errorf("%w: version 1 has no payload objects", ErrInvalid)
	case m.PayloadS3 != nil && (m.PayloadS3.Bucket == "" || m.PayloadS3.Key == "" || len(m.Data) != 0):
		return Message{}, fmt.Errorf("%w: record %s: payload object %+v with %d inline bytes", ErrInvalid, m.RecordID, *m.PayloadS3, len(m.Data))
	}
	id, err := recordid.Parse(m.RecordID)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if id.ShardID != m.ShardID || id.Seq != m.Seq || id.Sub != m.Sub {
		return Message{}, fmt.Errorf("%w: record id %s disagrees with shard/sequence fields", ErrInvalid, m.RecordID)
	}
	if !m.ByRef && m.PayloadS3 == nil {
		if !matches(m.Data, m) {
			return Message{}, fmt.Errorf("%w: record %s: payload does not match its checksum", ErrInvalid, m.RecordID)
		}
	}
	return m, nil
}

// Payload returns the parked payload: the inline data, or the object PayloadS3 names read
// through client and checked against DataBytes and DataSHA256 (ErrPayload when it is missing or
// differs). A version-1 by-reference message returns ErrByRef: re-read the record from the stream.
func (m Message) Payload(ctx context.Context, client GetObjectAPI) ([]byte, error) {
	switch {
	case m.ByRef:
		return nil, fmt.Errorf("%w: record %s", ErrByRef, m.RecordID)
	case m.PayloadS3 == nil:
		return m.Data, nil
	case client == nil:
		return nil, fmt.Errorf("%w: record %s: its payload is in s3://%s/%s and no S3 client was given", ErrPayload, m.RecordID, m.PayloadS3.Bucket, m.PayloadS3.Key)
	}
	if m.DataBytes < 0 || m.DataBytes > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record %s: a payload of %d bytes is above any record's", ErrPayload, m.RecordID, m.DataBytes)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(m.PayloadS3.Bucket), Key: aws.String(m.PayloadS3.Key)})
	if err != nil {
		return nil, fmt.Errorf("%w: record %s: get s3://%s/%s: %w", ErrPayload, m.RecordID, m.PayloadS3.Bucket, m.PayloadS3.Key, err)
	}
	defer out.Body.Close()
	// Read at most one byte more than the parked length: an object of another size is refused
	// without reading it whole, and no error tells its real length.
	if out.ContentLength != nil && *out.ContentLength != int64(m.DataBytes) {
		return nil, fmt.Errorf("%w: record %s: s3://%s/%s is not the parked length %d", ErrPayload, m.RecordID, m.PayloadS3.Bucket, m.PayloadS3.Key, m.DataBytes)
	}
	data, err := io.ReadAll(io.LimitReader(out.Body, int64(m.DataBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: record %s: read s3://%s/%s: %w", ErrPayload, m.RecordID, m.PayloadS3.Bucket, m.PayloadS3.Key, err)
	}
	if !matches(data, m) {
		return nil, fmt.Errorf("%w: record %s: s3://%s/%s does not match the parked length %d and SHA-256",
			ErrPayload, m.RecordID, m.PayloadS3.Bucket, m.PayloadS3.Key, m.DataBytes)
	}
	return data, nil
}

func matches(data []byte, m Message) bool {
	sum := sha256.Sum256(data)
	return len(data) == m.DataBytes && hex.EncodeToString(sum[:]) == m.DataSHA256
}

// ID returns the record id of a decoded message.
func (m Message) ID() (recordid.ID, error) { return recordid.Parse(m.RecordID) }

func isFIFO(url string) bool { return len(url) > 5 && url[len(url)-5:] == ".fifo" }

// hashIfLong keeps FIFO group and deduplication ids within their 128-character limit.
func hashIfLong(s string) string {
	if len(s) <= 128 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary so the JSON stays valid UTF-8 text.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…(truncated)"
}
