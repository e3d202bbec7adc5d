// Package process is gapless's default business logic: it forwards every record to an SQS queue
// (TARGET_QUEUE_URL), which makes the consumer a loss-free Kinesis→SQS bridge.
//
// To run your own logic, replace New (this one file) with a function returning a
// pipeline.ProcessFunc: it is called once per user record, concurrently across partition keys and
// in sequence order within a key; return an error to have the record retried (and parked after
// MAX_RECORD_ATTEMPTS failures). Make it idempotent: a record can reach it twice in the windows
// docs/design.md documents.
package process

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
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

// New returns the default Process: each record becomes one SendMessage to targetQueueURL with
// the data as the body (base64 when it is not valid SQS text, see AttrEncoding) and the record id
// and partition key as attributes. On a FIFO queue (URL ending in .fifo) MessageGroupId is the
// partition key, so order per key is kept downstream, and MessageDeduplicationId is the record
// id, so a record forwarded twice within SQS's 5-minute deduplication window is delivered once.
// Either id longer than 128 characters, or with characters SQS does not allow in it, is replaced
// by the SHA-256 hex of its value.
func New(client SendMessageAPI, targetQueueURL string) pipeline.ProcessFunc {
	fifo := strings.HasSuffix(targetQueueURL, ".fifo")
	return func(ctx context.Context, r pipeline.Record) error {
		in := Message(targetQueueURL, fifo, r)
		if _, err := client.SendMessage(ctx, in); err != nil {
			return fmt.Errorf("process: forward record %s to %s: %w", r.ID, targetQueueURL, err)
		}
		return nil
	}
}

// Message builds the SendMessage request New sends for r (exported for tests and tools).
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
