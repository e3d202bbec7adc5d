// Package park defines the parked-record message and sends it to the parked SQS queue.
//
// A record that failed MAX_RECORD_ATTEMPTS times is parked: one SQS message carrying its full
// payload (base64) and everything needed to understand and redrive it (record id, shard,
// sequence number, sub-index, partition key, arrival time, attempts, last error, group, stream,
// source, parkedAt). Once the message is accepted by SQS the record counts as accounted for and
// its shard moves on.
//
// A payload too large for one SQS message (see WithMaxMessageBytes) is parked by reference: the
// message carries no data, only the record id, so the record can be re-read from the stream with
// GetShardIterator(AT_SEQUENCE_NUMBER) while the stream still retains it. The caller logs that at
// ERROR level and counts it (RecordsParkedByRef) because the payload now lives only in the stream.
package park

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// Version is the message format version written in every message ("v").
const Version = 1

// DefaultMaxMessageBytes is the largest message this package sends by default: 256 KiB, the SQS
// limit for years and still the MaximumMessageSize of queues created before SQS raised its
// ceiling to 1 MiB (SendMessage API reference: "The maximum size is 1 MiB or 1,048,576 bytes").
// Queues configured for more may raise it with WithMaxMessageBytes.
const DefaultMaxMessageBytes = 256 * 1024

// Message attribute names set on every parked message, so consumers of the queue can filter
// without decoding the body.
const (
	AttrRecordID = "gapless.recordId"
	AttrGroup    = "gapless.group"
	AttrByRef    = "gapless.byRef"
)

// Errors.
var (
	// ErrInvalid: the message lacks what a parked record must carry.
	ErrInvalid = errors.New("park: invalid message")
	// ErrTooLarge: even the by-reference message (no payload) exceeds the size limit, e.g. a
	// huge last-error text was not truncated by the caller (Park truncates it; see maxErrorBytes).
	ErrTooLarge = errors.New("park: message too large")
)

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
	// Data is the payload (base64 in JSON). Empty when ByRef.
	Data []byte `json:"data"`
	// ByRef: the payload was too large to park; re-read it from the stream by RecordID.
	ByRef bool `json:"byRef"`
	// DataBytes and DataSHA256 describe the payload in both cases, so a by-reference record can
	// be checked when re-read and a redrive can verify what it sends.
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
	Source       string
}

// Result says how a record was parked.
type Result struct {
	ByRef     bool
	MessageID string
}

type sqsAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ sqsAPI = (*sqs.Client)(nil)

// Parker sends parked-record messages to one queue.
type Parker struct {
	client   sqsAPI
	queueURL string
	maxBytes int
	now      func() time.Time
}

// Option configures a Parker.
type Option func(*Parker)

// WithMaxMessageBytes sets the largest message (body plus attributes) Park sends with the
// payload; larger records are parked by reference.
func WithMaxMessageBytes(n int) Option { return func(p *Parker) { p.maxBytes = n } }

// WithClock replaces time.Now for parkedAt (tests).
func WithClock(now func() time.Time) Option { return func(p *Parker) { p.now = now } }

// New returns a Parker sending to queueURL (PARKED_QUEUE_URL).
func New(client sqsAPI, queueURL string, opts ...Option) *Parker {
	p := &Parker{client: client, queueURL: queueURL, maxBytes: DefaultMaxMessageBytes, now: time.Now}
	for _, o := range opts {
		o(p)
	}
	return p
}

// maxErrorBytes bounds the last-error text kept in a message.
const maxErrorBytes = 4096

// Park sends one message for r: with the payload when it fits in the size limit, by reference
// otherwise. An error means the record is NOT parked (the caller keeps it failed).
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
		Source: r.Source, ParkedAt: p.now().UTC(), Data: r.Data,
		DataBytes: len(r.Data), DataSHA256: hex.EncodeToString(sum[:]),
	}
	if m.Data == nil {
		m.Data = []byte{}
	}
	in, size, err := p.input(m)
	if err != nil {
		return Result{}, err
	}
	if size > p.maxBytes {
		m.Data, m.ByRef = nil, true
		if in, size, err = p.input(m); err != nil {
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
	return Result{ByRef: m.ByRef, MessageID: aws.ToString(out.MessageId)}, nil
}

// input builds the SendMessage request for m and its size as SQS counts it (body plus each
// attribute's name, type and value).
func (p *Parker) input(m Message) (*sqs.SendMessageInput, int, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, 0, fmt.Errorf("park: encode record %s: %w", m.RecordID, err)
	}
	attrs := map[string]sqstypes.MessageAttributeValue{
		AttrRecordID: {DataType: aws.String("String"), StringValue: aws.String(m.RecordID)},
		AttrGroup:    {DataType: aws.String("String"), StringValue: aws.String(m.Group)},
		AttrByRef:    {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprint(m.ByRef))},
	}
	size := len(body)
	for k, v := range attrs {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(p.queueURL), MessageBody: aws.String(string(body)), MessageAttributes: attrs}
	if isFIFO(p.queueURL) {
		// A FIFO parked queue: one group per shard keeps a shard's parked records in order, and the
		// record id deduplicates a park retried after a lost response.
		in.MessageGroupId = aws.String(hashIfLong(m.Group + ":" + m.Stream + ":" + m.ShardID))
		in.MessageDeduplicationId = aws.String(hashIfLong(m.RecordID))
	}
	return in, size, nil
}

// Decode parses a parked message body (for redrive and tools). The payload is verified against
// DataSHA256 unless the record was parked by reference.
func Decode(body string) (Message, error) {
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if m.Version != Version {
		return Message{}, fmt.Errorf("%w: version %d, want %d", ErrInvalid, m.Version, Version)
	}
	id, err := recordid.Parse(m.RecordID)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if id.ShardID != m.ShardID || id.Seq != m.Seq || id.Sub != m.Sub {
		return Message{}, fmt.Errorf("%w: record id %s disagrees with shard/sequence fields", ErrInvalid, m.RecordID)
	}
	if !m.ByRef {
		sum := sha256.Sum256(m.Data)
		if hex.EncodeToString(sum[:]) != m.DataSHA256 || len(m.Data) != m.DataBytes {
			return Message{}, fmt.Errorf("%w: record %s: payload does not match its checksum", ErrInvalid, m.RecordID)
		}
	}
	return m, nil
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
