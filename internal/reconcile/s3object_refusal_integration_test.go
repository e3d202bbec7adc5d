package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestFailureQueueRefusalsAreCounted: a failure-queue message that is not one the mapping or the
// failure bucket sent is refused: a batch item failure (it stays in the queue and reaches the
// dead-letter queue), counted in FailureMessageRefused (FailureMessageRefusedAlarm), and
// nothing of it is replayed. Only a genuine S3 test event (its documented fields alone, naming
// the failure bucket) is done without a replay.
//
// Before: any body with "Event":"s3:TestEvent" was deleted as a test event, whatever else it
// carried (an on-failure message's range, a notification's Records) or whichever bucket it
// named; and a notification naming another bucket was a failure but not counted as refused.
func TestFailureQueueRefusalsAreCounted(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, _ := gapped(t, s, 12, func(i int) bool { return i < 4 || i >= 8 })
	given := all[4:8]
	objects := stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	other := stacktest.Bucket(t)
	note, _ := failureObject(t, objects, bucket, s.stream, given)
	otherNote, _ := failureObject(t, objects, other, s.stream, given)
	testEvent := func(b string) string {
		return `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2025-11-25T00:00:00.000Z","Bucket":"` + b + `","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR"}`
	}
	withTestEvent := func(body string) string { return strings.Replace(body, "{", `{"Event":"s3:TestEvent",`, 1) }
	rec := newRecorder()
	var m emf
	var logs logBuffer
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4}), m.emitter(), logs.logger(), WithFailureBucket(objects, bucket))
	for _, tc := range []struct{ name, body string }{
		{"test event naming another bucket", testEvent(other)},
		{"test event carrying an object notification", withTestEvent(note)},
		{"on-failure message carrying a test event's Event", withTestEvent(message(t, s.streamARN(), ownFunction, given[0], given[3], 4))},
		{"notification naming another bucket", otherNote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, h.HandleSQS(context.Background(), sqsEvent(tc.body)), &m, rec)
		})
	}
	resp := h.HandleSQS(context.Background(), sqsEvent(testEvent(bucket)))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the failure bucket's test event failed: %v", resp.BatchItemFailures)
	}
	if l := m.last(t); l.Values["FailureMessageRefused"] != 0 {
		t.Errorf("metrics %v, want FailureMessageRefused 0 for the failure bucket's test event", l.Values)
	}
	// The genuine notification replays the range.
	if resp := h.HandleSQS(context.Background(), sqsEvent(note)); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("genuine notification failed: %v; errors %v", resp.BatchItemFailures, logs.lines("ERROR"))
	}
	checkOnce(t, "genuine notification", rec.counts(), idsOf(given))
}

// TestFailureRangeBelowTheShardRefused: a range below the shard's starting sequence number
// (ListShards SequenceNumberRange) was never held by the shard, so no mapping gave it up: the
// message is refused and counted, not deleted as accounted for. Before: it was accounted for at
// once, deleted with no line and no count.
func TestFailureRangeBelowTheShardRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, _ := gapped(t, s, 4, func(int) bool { return true })
	rec := newRecorder()
	var m emf
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4}), m.emitter(), discard())
	below := []put{{shard: all[0].shard, seq: "1"}, {shard: all[0].shard, seq: "2"}}
	checkRefused(t, h.HandleSQS(context.Background(), sqsEvent(message(t, s.streamARN(), ownFunction, below[0], below[1], 2))), &m, rec)
}

// TestS3ObjectBeforeTheScopeRefusedBeforeItIsApplied: under STARTING_POSITION LATEST an object
// whose records arrived before the group's scope start (a stale object of an earlier mapping)
// names records that were never the group's. When the stream has trimmed them, the object's
// records are the only thing the reconciler has to judge: it must refuse (counted) before it
// applies any of them. Before: the trimmed path applied the object's records, then refused (or,
// before ReplayFailed ran there, accounted for and deleted) the message.
func TestS3ObjectBeforeTheScopeRefusedBeforeItIsApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, 1)
	expire := s.trimmed()
	given := s.putN(3, "stale", keyMod(3), nil)
	objects := stacktest.S3(t)
	bucket := stacktest.Bucket(t)
	note, _ := failureObject(t, objects, bucket, s.stream, given) // arrival: now
	time.Sleep(20 * time.Millisecond)
	if err := s.cps.SetScopeFrom(ctx, s.shard(given[0].shard), time.Now()); err != nil {
		t.Fatal(err)
	}
	expire()
	s.putN(2, "in-scope", keyMod(3), nil)
	rec := newRecorder()
	var m emf
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4, StartingPosition: StartLatest}), m.emitter(), discard(), WithFailureBucket(objects, bucket))
	checkRefused(t, h.HandleSQS(ctx, sqsEvent(note)), &m, rec)
}

// checkRefused: the message of resp was refused (a batch item failure keeps it for the
// dead-letter queue), counted once in FailureMessageRefused, and nothing of it was applied.
func checkRefused(t *testing.T, resp events.SQSEventResponse, m *emf, rec *recorder) {
	t.Helper()
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("batch item failures %v, want the message refused (kept for the dead-letter queue)", resp.BatchItemFailures)
	}
	if l := m.last(t); l.Values["FailureMessageRefused"] != 1 {
		t.Errorf("metrics %v, want FailureMessageRefused 1", l.Values)
	}
	if n := len(rec.delivered()); n != 0 {
		t.Errorf("%d records of a refused message applied, want 0", n)
	}
}
