package esm

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// With an S3 bucket as the OnFailure destination the mapping writes the message and the given-up
// records (payload.Records, data included) as one object under AWS's key, and sends the bucket's
// ObjectCreated:Put notification to the notification queue; nothing else reaches the queue.
func TestS3DestinationWritesTheInvocationRecord(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	puts := s.putN(t, 4)
	q := seqsOf(puts)
	fq := newFailureQueue(t)
	bucket := stacktest.Bucket(t)
	objects := stacktest.S3(t)
	cfg := baseConfig(s)
	cfg.BatchSize = 2
	cfg.MaximumRetryAttempts = 1
	r := newRecorder(t, poisonHandler(q[0]))
	m, log := drain(t, s, fq.sqs, r, cfg, WithS3Destination(objects, "arn:aws:s3:::"+bucket, fq.url))
	if n := m.DestinationDeliveryFailures(); n != 0 {
		t.Fatalf("DestinationDeliveryFailures %d", n)
	}
	if ev := log.all(EventRetriesExhausted); len(ev) != 1 || ev[0].FirstSeq != q[0] || ev[0].LastSeq != q[1] {
		t.Fatalf("retries-exhausted events %+v", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := fq.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages on the notification queue, want 1", len(out.Messages))
	}
	body := []byte(aws.ToString(out.Messages[0].Body))
	if !onfailure.IsS3Notification(body) {
		t.Fatalf("not an S3 notification: %s", body)
	}
	objs, err := onfailure.ParseS3Notification(body)
	if err != nil || len(objs) != 1 || objs[0].Bucket != bucket {
		t.Fatalf("notification %+v, %v", objs, err)
	}
	got, err := objects.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(objs[0].Key)})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(got.Body)
	got.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != objs[0].Size {
		t.Errorf("notification size %d, object %d bytes", objs[0].Size, len(raw))
	}
	msg, err := onfailure.ParseObject(raw)
	if err != nil {
		t.Fatalf("the reconciler's parser refuses the object: %v\n%s", err, raw)
	}
	at, _ := time.Parse("2006-01-02T15:04:05.000Z", msg.Timestamp)
	prefix := "aws/lambda/" + m.MappingUUID() + "/" + puts[0].shard + "/" + at.Format("2006/01/02") + "/" + at.Format("2006-01-02T15.04.05") + "-"
	if !strings.HasPrefix(objs[0].Key, prefix) || len(objs[0].Key) != len(prefix)+36 {
		t.Errorf("key %q, want %q followed by a UUID", objs[0].Key, prefix)
	}
	if len(msg.Payload.Records) != 2 || msg.Payload.Records[0].Kinesis.SequenceNumber != q[0] || msg.Payload.Records[1].Kinesis.SequenceNumber != q[1] {
		t.Fatalf("payload records %+v, want %s and %s", msg.Payload.Records, q[0], q[1])
	}
	if string(msg.Payload.Records[0].Kinesis.Data) != string(puts[0].data) {
		t.Errorf("payload data %q, want %q", msg.Payload.Records[0].Kinesis.Data, puts[0].data)
	}
	if msg.KinesisBatchInfo.BatchSize != 2 || msg.RequestContext.Condition != onfailure.ConditionRetryAttemptsExhausted {
		t.Errorf("metadata %+v %+v", msg.KinesisBatchInfo, msg.RequestContext)
	}
}
