package esm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// An S3 bucket as the OnFailure destination. "For Amazon S3 destinations, Lambda also sends the
// entire invocation record along with the metadata"
// (https://docs.aws.amazon.com/lambda/latest/dg/kafka-on-failure.html, and for Kinesis
// https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html; the API
// reference's OnFailure lists an S3 bucket for Kinesis). The object's shape and key follow the
// recording on AWS in LocalStack's test_lambda_integration_kinesis.snapshot.json
// (test_kinesis_event_source_mapping_with_s3_on_failure_destination; see internal/onfailure's
// s3.go and testdata): the OnFailure message with "payload": {"Records": [...]}, the records as
// the function received them, under aws/lambda/<mapping UUID>/<shardId>/<yyyy>/<mm>/<dd>/
// <yyyy-mm-ddTHH.MM.SS>-<uuid>.
//
// The records in the payload are every record of the consolidated message (every part of the
// batch given up under one condition): AWS shows one invocation's records for a batch given up
// whole, and does not say what a consolidated message's payload holds; this emulation keeps
// every record it gave up.
//
// On AWS the bucket's event notification (ObjectCreated, to the failure queue) tells the
// reconciler of the object. The local S3 emulator sends no notifications, so after its
// PutObject the mapping sends the same message S3 would send to the notification queue (format:
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).

// s3API is the part of *s3.Client the mapping calls for an S3 destination.
type s3API interface {
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

var _ s3API = (*s3.Client)(nil)

type s3Destination struct {
	client      s3API
	bucket      string
	notifyQueue string // the queue S3's event notification goes to ("" : none)
	mappingUUID string
}

// WithS3Destination makes an S3 bucket (bucketARN, arn:aws:s3:::<name>) the OnFailure
// destination instead of Config.OnFailureQueueURL: each message becomes an object holding the
// metadata and the records, and the object's ObjectCreated:Put notification is sent to
// notifyQueueURL (through the mapping's SQS client), as the bucket's event notification would.
func WithS3Destination(client s3API, bucketARN, notifyQueueURL string) Option {
	return func(m *Mapping) {
		m.s3dest = &s3Destination{client: client, bucket: strings.TrimPrefix(bucketARN, "arn:aws:s3:::"),
			notifyQueue: notifyQueueURL, mappingUUID: newRequestID()}
		if !strings.HasPrefix(bucketARN, "arn:aws:s3:::") || m.s3dest.bucket == "" || client == nil {
			m.s3dest.bucket = "" // New refuses it
		}
	}
}

// MappingUUID is the mapping's UUID, the second part of its S3 destination's object keys ("" without an S3 destination).
func (m *Mapping) MappingUUID() string {
	if m.s3dest == nil {
		return ""
	}
	return m.s3dest.mappingUUID
}

func (m *Mapping) validS3Destination() error {
	switch d := m.s3dest; {
	case d == nil:
		return nil
	case d.bucket == "":
		return fmt.Errorf("%w: WithS3Destination needs an S3 client and a bucket ARN (arn:aws:s3:::<name>)", ErrConfig)
	case d.notifyQueue != "" && m.sqs == nil:
		return fmt.Errorf("%w: WithS3Destination's notification queue needs an SQS client", ErrConfig)
	}
	return nil
}

// payloadOf is the invocation record of the given-up records, as the function received them.
func payloadOf(recs []*record) (*onfailure.Payload, error) {
	p := &onfailure.Payload{Records: make([]events.KinesisEventRecord, len(recs))}
	for i, r := range recs {
		if err := json.Unmarshal(r.json, &p.Records[i]); err != nil {
			return nil, fmt.Errorf("esm: decode record %s: %w", r.seq, err)
		}
	}
	return p, nil
}

// deliverS3 writes msg (with its payload) as an object and sends its notification. Transient
// errors are retried as deliver retries SendMessage; a permanent one fails the delivery
// (DestinationDeliveryFailures), the records discarded. A notification that cannot be sent
// after the object was written is a failed delivery too: the object is there, but nothing
// tells the reconciler of it (on AWS a notification S3 could not deliver is dropped the same way).
func (m *Mapping) deliverS3(ctx context.Context, msg *onfailure.Message, fail func(error) error) error {
	d := m.s3dest
	if msg.Payload == nil {
		return fail(fmt.Errorf("esm: no payload for the S3 destination's object"))
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return fail(err)
	}
	at, err := time.Parse(timestampLayout, msg.Timestamp)
	if err != nil {
		return fail(err)
	}
	key := onfailure.ObjectKey(d.mappingUUID, msg.KinesisBatchInfo.ShardID, at, newRequestID())
	var etag string
	err = m.retrying(ctx, "PutObject", msg, func() error {
		out, err := d.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(d.bucket), Key: aws.String(key),
			Body: strings.NewReader(string(body)), ContentType: aws.String("application/json")})
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	if err != nil {
		return m.stoppedOr(ctx, err, fail)
	}
	if d.notifyQueue == "" {
		return nil
	}
	note, err := onfailure.NewS3Notification(m.region, d.bucket, key, int64(len(body)), etag, m.now())
	if err != nil {
		return fail(err)
	}
	err = m.retrying(ctx, "SendMessage (S3 notification)", msg, func() error {
		_, err := m.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(d.notifyQueue), MessageBody: aws.String(string(note))})
		return err
	})
	if err != nil {
		return m.stoppedOr(ctx, err, fail)
	}
	return nil
}

// retrying calls op until it succeeds, fails for good (permanent) or ctx ends.
func (m *Mapping) retrying(ctx context.Context, what string, msg *onfailure.Message, op func() error) error {
	delay := 50 * time.Millisecond
	for {
		err := op()
		if err == nil || ctx.Err() != nil || permanent(err) {
			return err
		}
		m.log.WarnContext(ctx, "esm: OnFailure "+what+" failed; retrying",
			"shard_id", msg.KinesisBatchInfo.ShardID, "sequence_number", msg.KinesisBatchInfo.StartSequenceNumber, "error", err)
		if err := ctxtime.Sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// stoppedOr returns ctx's error when the mapping is stopping, else the counted failure.
func (m *Mapping) stoppedOr(ctx context.Context, err error, fail func(error) error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fail(err)
}
