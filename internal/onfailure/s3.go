package onfailure

// An S3 bucket as the on-failure destination of a Kinesis event-source mapping: "For Amazon S3
// destinations, Lambda also sends the entire invocation record along with the metadata" and the
// execution role needs s3:PutObject and s3:ListBucket on it (Lambda developer guide, "Retain
// discarded batch records for a Kinesis Data Streams event source in Lambda" and "Capturing
// discarded batches for Amazon MSK and self-managed Apache Kafka event sources"; API reference,
// OnFailure: "To retain records of failed invocations from Kinesis, ... you can configure an
// Amazon SNS topic, Amazon SQS queue, or Amazon S3 bucket as the destination").
//
// Object shape and key, as recorded on AWS in LocalStack's
// tests/aws/services/lambda_/event_source_mapping/test_lambda_integration_kinesis.snapshot.json
// (test_kinesis_event_source_mapping_with_s3_on_failure_destination, 2025-11-25; see
// testdata/README.md): the object is the SQS message's JSON (requestContext, responseContext,
// version, timestamp, KinesisBatchInfo) with one more member, "payload": {"Records": [...]},
// the invocation's Kinesis event records exactly as the function received them (data base64).
// The key is aws/lambda/<mapping UUID>/<shardId>/<yyyy>/<mm>/<dd>/<yyyy-mm-ddTHH.MM.SS>-<uuid>,
// the date and time those of the message's timestamp.
//
// The reconciler learns of an object through an S3 event notification (ObjectCreated) sent by
// the bucket to the failure queue; its format is the "Event message structure" page of the
// Amazon S3 user guide: {"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put",
// "s3":{"bucket":{"name","arn"},"object":{"key","size","eTag","sequencer"}}, ...}]}, the key
// URL-encoded (form encoding: a space is "+"). Configuring a notification makes S3 send one
// s3:TestEvent message ({"Service":"Amazon S3","Event":"s3:TestEvent",...}), which names no
// object.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Payload is the invocation record of an S3 destination's object: the Kinesis event records
// the mapping gave up, data included.
type Payload struct {
	Records []events.KinesisEventRecord `json:"Records"`
}

// MaxObjectBytes bounds what a reader of an on-failure object accepts: one invocation's payload
// is at most 6 MB (Lambda's synchronous invocation limit) and the metadata is small; an object
// larger than this was not written by the mapping.
const MaxObjectBytes = 8 << 20

// ObjectKeyPrefix starts every key Lambda writes in an S3 on-failure destination.
const ObjectKeyPrefix = "aws/lambda/"

// ObjectKey returns the key Lambda gives the object of a message written at t for mapping
// mappingUUID, ending with id (a random UUID).
func ObjectKey(mappingUUID, shardID string, t time.Time, id string) string {
	t = t.UTC()
	return ObjectKeyPrefix + mappingUUID + "/" + shardID + "/" + t.Format("2006/01/02") + "/" + t.Format("2006-01-02T15.04.05") + "-" + id
}

// ParseObject decodes and validates an S3 destination's object: a valid message (Parse) whose
// payload holds at least one record, every record of the message's stream and shard
// (eventSourceARN, eventID "<shardId>:<sequenceNumber>"), with a valid sequence number inside the
// message's range, in strictly ascending order. An object outside these rules is refused
// whole: its records cannot be trusted to be the range's.
func ParseObject(body []byte) (Message, error) {
	m, err := Parse(body)
	if err != nil {
		return Message{}, err
	}
	b := m.KinesisBatchInfo
	if m.Payload == nil || len(m.Payload.Records) == 0 {
		return Message{}, fmt.Errorf("%w: object has no payload.Records", ErrMalformed)
	}
	prev := ""
	for i, r := range m.Payload.Records {
		seq := r.Kinesis.SequenceNumber
		switch {
		case r.EventSource != "aws:kinesis":
			return Message{}, fmt.Errorf("%w: payload record %d: eventSource %q", ErrMalformed, i, r.EventSource)
		case r.EventSourceArn != b.StreamARN:
			return Message{}, fmt.Errorf("%w: payload record %d: eventSourceARN %q is not the message's stream", ErrMalformed, i, r.EventSourceArn)
		case r.EventID != b.ShardID+":"+seq:
			return Message{}, fmt.Errorf("%w: payload record %d: eventID %q is not of shard %s", ErrMalformed, i, r.EventID, b.ShardID)
		}
		if err := seqnum.Validate(seq); err != nil {
			return Message{}, fmt.Errorf("%w: payload record %d: %v", ErrMalformed, i, err)
		}
		if seqnum.Compare(seq, b.StartSequenceNumber) < 0 || seqnum.Compare(seq, b.EndSequenceNumber) > 0 {
			return Message{}, fmt.Errorf("%w: payload record %d: sequence number %s outside %s..%s", ErrMalformed, i, seq, b.StartSequenceNumber, b.EndSequenceNumber)
		}
		if prev != "" && seqnum.Compare(prev, seq) >= 0 {
			return Message{}, fmt.Errorf("%w: payload record %d: sequence numbers not ascending", ErrMalformed, i)
		}
		prev = seq
	}
	return m, nil
}

// S3Object is one object an S3 event notification names.
type S3Object struct {
	Bucket    string
	BucketARN string
	Key       string // decoded
	Size      int64
	EventName string
}

// ErrTestEvent is returned by ParseS3Notification for the s3:TestEvent message S3 sends when a
// notification is configured: it names no object.
var ErrTestEvent = errors.New("s3:TestEvent message (names no object)")

// s3Notification is the part of an S3 event notification gapless reads.
type s3Notification struct {
	Records []s3Record `json:"Records"`
	// A test event has these instead of Records.
	Service string `json:"Service"`
	Event   string `json:"Event"`
}

type s3Record struct {
	EventVersion string    `json:"eventVersion"`
	EventSource  string    `json:"eventSource"`
	AWSRegion    string    `json:"awsRegion"`
	EventTime    string    `json:"eventTime"`
	EventName    string    `json:"eventName"`
	S3           s3Details `json:"s3"`
}

type s3Details struct {
	SchemaVersion   string   `json:"s3SchemaVersion"`
	ConfigurationID string   `json:"configurationId"`
	Bucket          s3Bucket `json:"bucket"`
	Object          s3Obj    `json:"object"`
}

type s3Bucket struct {
	Name string `json:"name"`
	ARN  string `json:"arn"`
}

type s3Obj struct {
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	ETag      string `json:"eTag,omitempty"`
	Sequencer string `json:"sequencer,omitempty"`
}

// IsS3Notification reports whether body is an S3 event notification (or its test event) rather
// than an on-failure message: a JSON object with Records from eventSource "aws:s3", or the
// s3:TestEvent.
func IsS3Notification(body []byte) bool {
	var n s3Notification
	if json.Unmarshal(body, &n) != nil {
		return false
	}
	if n.Event == "s3:TestEvent" {
		return true
	}
	return len(n.Records) > 0 && n.Records[0].EventSource == "aws:s3"
}

// ParseS3Notification returns the objects an S3 event notification names. Every record must be
// an ObjectCreated event from aws:s3 naming a bucket and a key; the key is URL-decoded.
func ParseS3Notification(body []byte) ([]S3Object, error) {
	var n s3Notification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("%w: S3 notification: %v", ErrMalformed, err)
	}
	if n.Event == "s3:TestEvent" {
		return nil, ErrTestEvent
	}
	if len(n.Records) == 0 {
		return nil, fmt.Errorf("%w: S3 notification has no Records", ErrMalformed)
	}
	out := make([]S3Object, 0, len(n.Records))
	for i, r := range n.Records {
		if r.EventSource != "aws:s3" {
			return nil, fmt.Errorf("%w: S3 notification record %d: eventSource %q", ErrMalformed, i, r.EventSource)
		}
		if !strings.HasPrefix(r.EventName, "ObjectCreated:") {
			return nil, fmt.Errorf("%w: S3 notification record %d: eventName %q is not ObjectCreated", ErrMalformed, i, r.EventName)
		}
		key, err := url.QueryUnescape(r.S3.Object.Key)
		if err != nil {
			return nil, fmt.Errorf("%w: S3 notification record %d: key %q: %v", ErrMalformed, i, r.S3.Object.Key, err)
		}
		if r.S3.Bucket.Name == "" || key == "" {
			return nil, fmt.Errorf("%w: S3 notification record %d names no bucket or key", ErrMalformed, i)
		}
		out = append(out, S3Object{Bucket: r.S3.Bucket.Name, BucketARN: r.S3.Bucket.ARN, Key: key, Size: r.S3.Object.Size, EventName: r.EventName})
	}
	return out, nil
}

// NewS3Notification encodes the ObjectCreated:Put notification S3 sends for one object (for the
// local event-source mapping, whose S3 emulator sends none).
func NewS3Notification(region, bucket, key string, size int64, etag string, at time.Time) ([]byte, error) {
	n := struct {
		Records []s3Record `json:"Records"`
	}{[]s3Record{{
		EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: region,
		EventTime: at.UTC().Format("2006-01-02T15:04:05.000Z"), EventName: "ObjectCreated:Put",
		S3: s3Details{SchemaVersion: "1.0", ConfigurationID: "on-failure-objects",
			Bucket: s3Bucket{Name: bucket, ARN: "arn:aws:s3:::" + bucket},
			Object: s3Obj{Key: strings.ReplaceAll(url.QueryEscape(key), "%2F", "/"), Size: size, ETag: strings.Trim(etag, `"`),
				Sequencer: fmt.Sprintf("%016X", at.UnixNano())}},
	}}}
	return json.Marshal(n)
}
