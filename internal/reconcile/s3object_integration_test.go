package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

const testStreamARNPrefix = "arn:aws:kinesis:us-east-1:000000000000:stream/"

// failureObject writes the object an S3 on-failure destination holds for recs (given up as one
// batch) to bucket and returns the bucket's ObjectCreated notification and the object's key.
func failureObject(t *testing.T, client *s3.Client, bucket, stream string, recs []put) (string, string) {
	t.Helper()
	arn := testStreamARNPrefix + stream
	m := onfailure.Message{
		RequestContext:  onfailure.RequestContext{RequestID: "c1d0e5b2-0000-4000-8000-000000000002", FunctionARN: "arn:aws:lambda:us-east-1:000000000000:function:consumer", Condition: onfailure.ConditionRetryAttemptsExhausted, ApproximateInvokeCount: 2},
		ResponseContext: &onfailure.ResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST", FunctionError: "Unhandled"},
		Version:         "1.0",
		Timestamp:       time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		KinesisBatchInfo: onfailure.BatchInfo{ShardID: recs[0].shard, StartSequenceNumber: recs[0].seq, EndSequenceNumber: recs[len(recs)-1].seq,
			ApproximateArrivalOfFirstRecord: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
			ApproximateArrivalOfLastRecord:  time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
			BatchSize:                       len(recs), StreamARN: arn},
		Payload: &onfailure.Payload{},
	}
	for _, r := range recs {
		m.Payload.Records = append(m.Payload.Records, events.KinesisEventRecord{
			AwsRegion: "us-east-1", EventID: r.shard + ":" + r.seq, EventName: "aws:kinesis:record", EventSource: "aws:kinesis",
			EventSourceArn: arn, EventVersion: "1.0", InvokeIdentityArn: "arn:aws:iam::000000000000:role/consumer-role",
			Kinesis: events.KinesisRecord{KinesisSchemaVersion: "1.0", PartitionKey: r.key, SequenceNumber: r.seq, Data: r.data,
				ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Now().Truncate(time.Millisecond)}},
		})
	}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	key := onfailure.ObjectKey("5d2c1f7e-1b2a-4c3d-8e9f-0a1b2c3d4e5f", recs[0].shard, time.Now(), "0b8f3a52-7c1e-4d2b-9a6f-3e5d1c7b9a20")
	if _, err := client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	note, err := onfailure.NewS3Notification("us-east-1", bucket, key, int64(len(body)), "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return string(note), key
}

// givenUpThenTrimmed: records 0-4 consumed and verified (watermark on 4), records 5-7 given up
// by the mapping (never processed), records 8-9 consumed; then the stream's trim horizon passes
// 0-9 and records 10-11 are put and consumed. Records 5-7 are gone from the stream.
func givenUpThenTrimmed(t *testing.T, s *stack) (all []put, given []put) {
	t.Helper()
	expire := s.trimmed()
	cons := s.pipeline(newRecorder().process, 3)
	all = s.putN(5, "verified", keyMod(3), nil)
	s.consume(cons, all)
	if rep, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil || s.state(all[0].shard).Watermark != all[4].seq {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	given = s.putN(3, "given-up", keyMod(3), nil)
	after := s.putN(2, "after", keyMod(3), nil)
	s.consume(cons, after)
	expire()
	late := s.putN(2, "late", keyMod(3), nil)
	s.consume(cons, late)
	return slices.Concat(all, given, after, late), given
}

// TestTrimmedRangeRecoveredFromS3Object: a range the mapping gave up, trimmed from the stream
// before the reconciler read it. With the SQS destination (metadata only) its records are gone:
// the replay counts the span lost and nothing is processed. With the S3 destination the object
// holds the records: each is processed exactly once, and a redelivered notification processes
// nothing again. Before the object path, the handler refused the S3 notification as a
// malformed on-failure message and the records stayed unprocessed.
func TestTrimmedRangeRecoveredFromS3Object(t *testing.T) {
	t.Parallel()
	t.Run("SQS destination: metadata only, counted lost", func(t *testing.T) {
		s := newStack(t, 1)
		_, given := givenUpThenTrimmed(t, s)
		rec := newRecorder()
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, slog.New(slog.DiscardHandler))
		resp := h.HandleSQS(context.Background(), sqsEvent(failureMessage(t, s.stream, given[0].shard, given[0].seq, given[2].seq, 3)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", resp.BatchItemFailures)
		}
		if n := len(rec.delivered()); n != 0 {
			t.Fatalf("%d records replayed from a trimmed range", n)
		}
		if st := s.state(given[0].shard); st.LostToRetention != 1 {
			t.Fatalf("lostToRetention %d, want 1", st.LostToRetention)
		}
	})
	t.Run("S3 destination: replayed from the object", func(t *testing.T) {
		s := newStack(t, 1)
		_, given := givenUpThenTrimmed(t, s)
		objects := stacktest.S3(t)
		bucket := stacktest.Bucket(t)
		note, _ := failureObject(t, objects, bucket, s.stream, given)
		rec := newRecorder()
		var mu sync.Mutex
		data := map[recordid.ID]string{}
		rec.fail = func(_ context.Context, r pipeline.Record) error {
			mu.Lock()
			defer mu.Unlock()
			data[r.ID] = string(r.Data)
			return nil
		}
		var logs logBuffer
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}, WithLogger(logs.logger())), nil, logs.logger(), WithFailureBucket(objects, bucket))
		resp := h.HandleSQS(context.Background(), sqsEvent(note))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v; errors %v", resp.BatchItemFailures, logs.lines("ERROR"))
		}
		checkOnce(t, "object replay", rec.counts(), idsOf(given))
		// The span around the range keeps its count: the object proves its own records, not
		// that the trimmed neighbours between the watermark and the first record held were
		// processed (here they were: records 8-9).
		t.Logf("LostToRetention spans counted: %d (records lost: 0)", s.state(given[0].shard).LostToRetention)
		for _, g := range given {
			if got := data[g.id()]; got != string(g.data) {
				t.Errorf("record %s processed with data %q, want %q", g.seq, got, g.data)
			}
		}
		if !containsLine(logs.lines("INFO"), "replaying it from the object") {
			t.Errorf("no INFO line for the object replay")
		}
		// Redelivered (SQS is at least once): the ledger has every record.
		resp = h.HandleSQS(context.Background(), sqsEvent(note))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures on redelivery %v", resp.BatchItemFailures)
		}
		checkOnce(t, "redelivered notification", rec.counts(), idsOf(given))
		// A later scheduled pass finds nothing to replay.
		if _, err := s.reconciler(s.pipeline(rec.process, 3), Config{}).Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkOnce(t, "scheduled pass", rec.counts(), idsOf(given))
	})
}

// The object path trusts only the configured bucket, the group's stream and objects of
// invocation-record size: anything else is refused (a batch item failure with an ERROR line),
// never read or applied.
func TestS3NotificationRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	given := s.putN(2, "given-up", keyMod(2), nil)
	objects := stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	other := stacktest.Bucket(t)
	otherNote, _ := failureObject(t, objects, other, s.stream, given)
	foreignNote, _ := failureObject(t, objects, bucket, "another-stream", given)
	big, _ := onfailure.NewS3Notification("us-east-1", bucket, "aws/lambda/u/x/2025/11/25/2025-11-25T00.00.00-x", onfailure.MaxObjectBytes+1, "", time.Now())
	outside, _ := onfailure.NewS3Notification("us-east-1", bucket, "elsewhere/x", 10, "", time.Now())
	testEvent := `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2025-11-25T00:00:00.000Z","Bucket":"` + bucket + `"}`
	rec := newRecorder()
	var logs logBuffer
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, logs.logger(), WithFailureBucket(objects, bucket))
	resp := h.HandleSQS(context.Background(), sqsEvent(otherNote, foreignNote, string(big), string(outside), testEvent))
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	if !slices.Equal(ids, []string{"msg-0", "msg-1", "msg-2", "msg-3"}) {
		t.Fatalf("batch item failures %v, want msg-0..3 (the test event is done)", ids)
	}
	if n := len(rec.delivered()); n != 0 {
		t.Fatalf("%d records replayed from refused objects", n)
	}
	errs := logs.lines("ERROR")
	for _, want := range []string{"another bucket", "another stream", "larger than", "not under"} {
		found := false
		for _, l := range errs {
			if e, _ := l["error"].(string); e != "" && bytes.Contains([]byte(e), []byte(want)) {
				found = true
			}
		}
		if !found {
			t.Errorf("no ERROR line saying %q: %v", want, errs)
		}
	}
	// Without a configured bucket a notification is refused.
	h2 := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, logs.logger())
	if resp := h2.HandleSQS(context.Background(), sqsEvent(otherNote)); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("a notification without a failure bucket was accepted")
	}
}

// An object of a shard that has left the stream (not found by Kinesis) is the only copy of its
// records: they are replayed from it when the group's state knows the shard, and refused when
// it does not (a shard id nobody consumed).
func TestS3ObjectOfAShardNoLongerInTheStream(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	objects := stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	const goneShard = "shardId-000000000999"
	gone := []put{{shard: goneShard, seq: "49659013567040981547806411413924417826734318779281620994", key: "k", data: []byte(`{"n":1}`)},
		{shard: goneShard, seq: "49659013567040981547806411413924417826734318779281620995", key: "k", data: []byte(`{"n":2}`)}}
	note, _ := failureObject(t, objects, bucket, s.stream, gone)
	rec := newRecorder()
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{}), nil, slog.New(slog.DiscardHandler), WithFailureBucket(objects, bucket))
	if resp := h.HandleSQS(context.Background(), sqsEvent(note)); len(resp.BatchItemFailures) != 1 || len(rec.delivered()) != 0 {
		t.Fatalf("an object of a shard unknown to the group: failures %v, %d replayed; want refused", resp.BatchItemFailures, len(rec.delivered()))
	}
	// The consumer once checkpointed the shard.
	if _, err := s.cps.Advance(context.Background(), s.shard(goneShard), "49659013567040981547806411413924417826734318779281620000"); err != nil {
		t.Fatal(err)
	}
	if resp := h.HandleSQS(context.Background(), sqsEvent(note)); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	checkOnce(t, "object of a shard gone from the stream", rec.counts(), idsOf(gone))
}
