package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

const (
	verifyURL = "https://sqs.us-east-1.amazonaws.com/123456789012/g-verify.fifo"
	verifyARN = "arn:aws:sqs:us-east-1:123456789012:g-verify.fifo"
)

// workQueue is an in-memory FIFO verify queue: SendMessageBatch with the five-minute
// deduplication of MessageDeduplicationId (not by time here: an id is dropped once seen).
// TEST-ONLY.
type workQueue struct {
	mu      sync.Mutex
	seen    map[string]bool
	msgs    []events.SQSMessage
	n       int
	sendErr error
}

func (q *workQueue) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.sendErr != nil {
		return nil, q.sendErr
	}
	if aws.ToString(in.QueueUrl) != verifyURL || len(in.Entries) > 10 {
		return nil, fmt.Errorf("send to %s with %d entries", aws.ToString(in.QueueUrl), len(in.Entries))
	}
	if q.seen == nil {
		q.seen = map[string]bool{}
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id})
		if q.seen[aws.ToString(e.MessageDeduplicationId)] {
			continue
		}
		q.seen[aws.ToString(e.MessageDeduplicationId)] = true
		q.n++
		q.msgs = append(q.msgs, events.SQSMessage{MessageId: fmt.Sprintf("m%d", q.n), Body: aws.ToString(e.MessageBody),
			EventSource: "aws:sqs", EventSourceARN: verifyARN, Attributes: map[string]string{"MessageGroupId": aws.ToString(e.MessageGroupId)}})
	}
	return out, nil
}

// pop takes the oldest message.
func (q *workQueue) pop() (events.SQSMessage, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		return events.SQSMessage{}, false
	}
	m := q.msgs[0]
	q.msgs = q.msgs[1:]
	return m, true
}

// drain delivers the queue's messages one per invocation, as the event source with BatchSize 1
// does, until it is empty; a failed message is a test failure. It returns the shards walked, in
// order.
func (q *workQueue) drain(t *testing.T, h *Handler, ctx func() context.Context) []string {
	t.Helper()
	var walked []string
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("the verify queue never emptied")
		}
		m, ok := q.pop()
		if !ok {
			return walked
		}
		walked = append(walked, m.Attributes["MessageGroupId"])
		if resp := h.HandleSQS(ctx(), events.SQSEvent{Records: []events.SQSMessage{m}}); len(resp.BatchItemFailures) > 0 {
			t.Fatalf("walk of %s failed: %+v", m.Attributes["MessageGroupId"], resp)
		}
	}
}

// metricLines parses buf's EMF lines.
func metricLines(t *testing.T, buf *bytes.Buffer) []metrics.Line {
	t.Helper()
	var out []metrics.Line
	sc := bufio.NewScanner(buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l, err := metrics.Parse(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func fanOutHandler(u *unit, q *workQueue, buf *bytes.Buffer) *Handler {
	emit := metrics.New(buf, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: ugroup}})
	return NewHandler(u.r, emit, discard(), WithVerifyQueue(q, verifyURL))
}

// The coordinator queues the parent alone (its children wait for its end); the parent's walk
// reaches its end, marks it closed and queues both children; each child is walked then. Every
// record is verified, and the records the ledger lacks are replayed once, as in one pass.
func TestFanOutParentsBeforeChildren(t *testing.T) {
	t.Parallel()
	now := time.Now()
	parent := (&memShard{id: "shardId-0", ending: fakeSeq(999)}).addRecords(0, 8, now, key3)
	child := (&memShard{id: "shardId-1", parents: []string{"shardId-0"}}).addRecords(100, 3, now, key3)
	sibling := (&memShard{id: "shardId-2", parents: []string{"shardId-0"}}).addRecords(200, 2, now, key3)
	u := newUnit(t, newMemKinesis(parent, child, sibling), Config{})
	u.markDone(t, parent.id, 0)
	u.cps.Set(ushard(parent.id), fakeSeq(3), "")
	u.markDone(t, child.id, 102)
	u.cps.Set(ushard(child.id), fakeSeq(102), "") // the mapping moved on: the parent is drained
	u.cps.Set(ushard(sibling.id), fakeSeq(201), "")
	q, buf := &workQueue{}, &bytes.Buffer{}
	h := fanOutHandler(u, q, buf)

	sum, err := h.HandleSchedule(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.ShardsQueued != 1 || sum.ShardsDeferred != 2 || sum.RecordsVerified != 0 {
		t.Errorf("coordinator summary %+v: want the parent queued, the children waiting, nothing read", sum)
	}
	if n := u.kin.count("GetRecords"); n != 0 {
		t.Errorf("the coordinator read %d pages", n)
	}
	walked := q.drain(t, h, context.Background)
	if len(walked) != 3 || walked[0] != parent.id || !slices.Contains(walked, child.id) || !slices.Contains(walked, sibling.id) {
		t.Errorf("walked %v: want the parent, then both children", walked)
	}
	want := append(fakeIDs(parent.id, 1, 7), recordid.ID{ShardID: child.id, Seq: fakeSeq(100)}, recordid.ID{ShardID: child.id, Seq: fakeSeq(101)})
	want = append(want, fakeIDs(sibling.id, 200, 201)...)
	checkOnce(t, "replayed", u.rec.counts(), want)
	if !slices.Contains(u.cps.Closed, parent.id) {
		t.Error("parent not marked closed")
	}
	for _, id := range []string{parent.id, child.id, sibling.id} {
		if u.cps.State(id).VerifiedAsOf.IsZero() {
			t.Errorf("%s: no verifiedAsOf after its walk", id)
		}
	}
	// The next pass does not queue the closed parent again.
	sum, err = h.HandleSchedule(context.Background())
	if err != nil || sum.ShardsQueued != 2 || sum.ShardsDeferred != 0 {
		t.Errorf("second pass %+v, %v: want the two children queued", sum, err)
	}
}

// A walk cut by its deadline queues its own continuation in its shard's message group; the
// next invocation goes on from the stored watermark, and every record is verified.
func TestFanOutContinuesAWalkOutOfTime(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 40, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{PageLimit: 2})
	u.cps.Set(ushard(sh.id), fakeSeq(39), "")
	q, buf := &workQueue{}, &bytes.Buffer{}
	h := fanOutHandler(u, q, buf)
	var n atomic.Int32
	var cancel context.CancelFunc
	u.rec.fail = func(context.Context, pipeline.Record) error {
		if n.Add(1)%7 == 0 {
			cancel() // the invocation's time ends mid-walk
		}
		return nil
	}
	if _, err := h.HandleSchedule(context.Background()); err != nil {
		t.Fatal(err)
	}
	walked := q.drain(t, h, func() context.Context {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		return ctx
	})
	if len(walked) < 3 || slices.ContainsFunc(walked, func(s string) bool { return s != sh.id }) {
		t.Errorf("walks %v: want several walks of %s", walked, sh.id)
	}
	checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 0, 39))
	if wm := u.cps.State(sh.id).Watermark; wm != fakeSeq(39) {
		t.Errorf("watermark %s, want the checkpoint", wm)
	}
}

// A verify-queue message is a claim: one that is malformed, for another group, stream,
// version or command, in a message group that is not its shard, or naming a shard the stream
// does not list is refused — reported failed (left for the dead-letter queue), counted in
// VerifyMessageRefused, and nothing is walked or queued.
func TestVerifyMessageRefused(t *testing.T) {
	t.Parallel()
	body := func(group, stream, shard string) string {
		return fmt.Sprintf(`{"gapless":{"version":1,"command":"verify","group":%q,"stream":%q,"verify":{"shardId":%q}}}`, group, stream, shard)
	}
	tests := []struct {
		name, body, group string
	}{
		{"not JSON", "verify shardId-0", "shardId-0"},
		{"an on-failure message", `{"requestContext":{"condition":"RetryAttemptsExhausted"},"KinesisBatchInfo":{"shardId":"shardId-0"}}`, "shardId-0"},
		{"unknown member", `{"gapless":{"version":1,"command":"verify","group":"g","stream":"s","verify":{"shardId":"shardId-0","from":"1"}}}`, "shardId-0"},
		{"data after the object", body(ugroup, ustream, "shardId-0") + `{}`, "shardId-0"},
		{"another version", strings.Replace(body(ugroup, ustream, "shardId-0"), `"version":1`, `"version":2`, 1), "shardId-0"},
		{"a replay command", `{"gapless":{"version":1,"command":"replay","group":"g","stream":"s","replay":{"shardId":"shardId-0","from":"1","to":"2"}}}`, "shardId-0"},
		{"no group", body("", ustream, "shardId-0"), "shardId-0"},
		{"another group", body("other", ustream, "shardId-0"), "shardId-0"},
		{"another stream", body(ugroup, "other", "shardId-0"), "shardId-0"},
		{"message group not its shard", body(ugroup, ustream, "shardId-0"), "shardId-9"},
		{"no message group", body(ugroup, ustream, "shardId-0"), ""},
		{"a shard the stream does not list", body(ugroup, ustream, "shardId-9"), "shardId-9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := (&memShard{id: "shardId-0"}).addRecords(0, 4, time.Now(), key3)
			u := newUnit(t, newMemKinesis(sh), Config{})
			u.cps.Set(ushard(sh.id), fakeSeq(3), "")
			q, buf := &workQueue{}, &bytes.Buffer{}
			h := fanOutHandler(u, q, buf)
			msg := events.SQSMessage{MessageId: "forged", Body: tt.body, EventSource: "aws:sqs", EventSourceARN: verifyARN,
				Attributes: map[string]string{"MessageGroupId": tt.group}}
			resp := h.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}})
			if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "forged" {
				t.Errorf("response %+v: want the message reported failed (kept for the dead-letter queue)", resp)
			}
			if n := u.kin.count("GetRecords"); n != 0 || len(u.rec.counts()) != 0 || len(q.msgs) != 0 {
				t.Errorf("a refused message walked the shard: %d pages, %d records replayed, %d messages queued", n, len(u.rec.counts()), len(q.msgs))
			}
			refused := -1.0
			for _, l := range metricLines(t, buf) {
				if v, ok := l.Values[MetricVerifyMessageRefused]; ok {
					refused = v
				}
			}
			if refused != 1 {
				t.Errorf("%s = %v, want 1", MetricVerifyMessageRefused, refused)
			}
		})
	}
	// The same message, well formed, is walked and deleted.
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 4, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(3), "")
	h := fanOutHandler(u, &workQueue{}, &bytes.Buffer{})
	msg := events.SQSMessage{MessageId: "real", Body: body(ugroup, ustream, sh.id), EventSource: "aws:sqs", EventSourceARN: verifyARN,
		Attributes: map[string]string{"MessageGroupId": sh.id}}
	if resp := h.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}}); len(resp.BatchItemFailures) != 0 {
		t.Errorf("a valid message failed: %+v", resp)
	}
	checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 0, 3))
}

// The coordinator walks nothing and still reports every shard's verified lag from its stored
// state (where its last walk left it, else the watermark's move, else the checkpoint's), a
// closed shard 0, and the group's lag is the worst shard's.
func TestCoordinatorReportsEveryShardsLag(t *testing.T) {
	t.Parallel()
	now := later()
	shards := []*memShard{{id: "shardId-0"}, {id: "shardId-1"}, {id: "shardId-2"}, {id: "shardId-3"}, {id: "shardId-4", ending: fakeSeq(9)}}
	u := newUnit(t, newMemKinesis(shards...), Config{})
	u.cps.Set(ushard("shardId-0"), fakeSeq(1), fakeSeq(1))
	u.cps.Set(ushard("shardId-1"), fakeSeq(1), fakeSeq(1))
	u.cps.Set(ushard("shardId-2"), fakeSeq(1), "")
	u.cps.Set(ushard("shardId-4"), fakeSeq(9), fakeSeq(9))
	u.cps.Edit(ushard("shardId-0"), func(st *checkpoint.State) {
		st.VerifiedAsOf = now.Add(-2 * time.Minute)
		st.WatermarkAt = now.Add(-time.Hour) // older, but the walk knows better
	})
	u.cps.Edit(ushard("shardId-1"), func(st *checkpoint.State) { st.WatermarkAt = now.Add(-10 * time.Minute) })
	u.cps.Edit(ushard("shardId-2"), func(st *checkpoint.State) { st.CheckpointAt = now.Add(-3 * time.Hour) })
	u.cps.Edit(ushard("shardId-4"), func(st *checkpoint.State) {
		st.Closed = true
		st.VerifiedAsOf = now.Add(-9 * time.Hour) // closed: nothing left
	})
	buf := &bytes.Buffer{}
	q := &workQueue{}
	h := fanOutHandler(u, q, buf)
	sum, err := h.HandleSchedule(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lags := map[string]float64{}
	group := -1.0
	for _, l := range metricLines(t, buf) {
		v, ok := l.Values[MetricVerifiedLag]
		switch {
		case !ok:
		case l.Dimensions[metrics.DimensionShard] != "":
			lags[l.Dimensions[metrics.DimensionShard]] = v
		default:
			group = v
		}
	}
	want := map[string]float64{"shardId-0": 120, "shardId-1": 600, "shardId-2": 3 * 3600, "shardId-3": 0, "shardId-4": 0}
	for id, w := range want {
		if got, ok := lags[id]; !ok || got < w || got > w+5 {
			t.Errorf("%s lag %v (emitted %v), want %v", id, got, ok, w)
		}
	}
	if group < 3*3600 || group > 3*3600+5 || sum.VerifiedLagSec != group {
		t.Errorf("group lag %v, summary %v: want the worst shard's, 3h", group, sum.VerifiedLagSec)
	}
	if sum.ShardsQueued != 4 || len(q.msgs) != 4 {
		t.Errorf("queued %d (%d messages), want the four open shards", sum.ShardsQueued, len(q.msgs))
	}
	for _, m := range q.msgs {
		var ev CommandEvent
		if err := json.Unmarshal([]byte(m.Body), &ev); err != nil || ev.Gapless.Verify == nil || ev.Gapless.Verify.ShardID != m.Attributes["MessageGroupId"] ||
			ev.Gapless.Group != ugroup || ev.Gapless.Stream != ustream {
			t.Errorf("message %s in group %s: %v", m.Body, m.Attributes["MessageGroupId"], err)
		}
	}
	// A second coordinator in the same minute queues nothing new (deduplication ids).
	if _, err := h.HandleSchedule(context.Background()); err != nil || len(q.msgs) != 4 {
		t.Errorf("second coordinator: %d messages, %v", len(q.msgs), err)
	}
}

// A coordinator whose sends fail still reports every shard's lag, counts the shards not queued
// as deferred and returns the error (the next pass queues them).
func TestCoordinatorSendFailure(t *testing.T) {
	t.Parallel()
	u := newUnit(t, newMemKinesis(&memShard{id: "shardId-0"}, &memShard{id: "shardId-1"}), Config{})
	q, buf := &workQueue{sendErr: errBoom}, &bytes.Buffer{}
	h := fanOutHandler(u, q, buf)
	sum, err := h.HandleSchedule(context.Background())
	if err == nil || !strings.Contains(err.Error(), "shardId-0") || sum.ShardsQueued != 0 || sum.ShardsDeferred != 2 {
		t.Errorf("summary %+v, error %v", sum, err)
	}
	n := 0
	for _, l := range metricLines(t, buf) {
		if _, ok := l.Values[MetricVerifiedLag]; ok && l.Dimensions[metrics.DimensionShard] != "" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d shard lag lines, want 2", n)
	}
}

// A walk reads the items it needs by key — its shard's, its parents', its descendants' — never
// the group's every item: a pass over N shards would otherwise read N² items.
func TestWalkReadsOnlyItsLineagesItems(t *testing.T) {
	t.Parallel()
	now := time.Now()
	parent := (&memShard{id: "shardId-0", ending: fakeSeq(999)}).addRecords(0, 2, now, key3)
	child := (&memShard{id: "shardId-1", parents: []string{"shardId-0"}}).addRecords(100, 2, now, key3)
	grandchild := (&memShard{id: "shardId-2", parents: []string{"shardId-1"}})
	others := []*memShard{parent, child, grandchild}
	for i := 3; i < 20; i++ {
		others = append(others, &memShard{id: fmt.Sprintf("shardId-%d", i)})
	}
	u := newUnit(t, newMemKinesis(others...), Config{})
	for _, s := range others {
		u.cps.Set(ushard(s.id), fakeSeq(1), "")
	}
	if _, err := u.r.RunShard(context.Background(), child.id); err != nil {
		t.Fatal(err)
	}
	slices.Sort(u.cps.Gets)
	if u.cps.Lists != 0 || !slices.Equal(u.cps.Gets, []string{parent.id, child.id, grandchild.id}) {
		t.Errorf("List %d times, Get %v: want the shard's, its parent's and its child's items only", u.cps.Lists, u.cps.Gets)
	}
}

// A child's message that comes before its parent is verified to its end walks nothing and is
// done: the parent's walk queues the child when it reaches the end (or a later pass does).
func TestWalkOfAChildWaitsForItsParent(t *testing.T) {
	t.Parallel()
	now := time.Now()
	parent := (&memShard{id: "shardId-0", ending: fakeSeq(999)}).addRecords(0, 4, now, key3)
	child := (&memShard{id: "shardId-1", parents: []string{"shardId-0"}}).addRecords(100, 2, now, key3)
	u := newUnit(t, newMemKinesis(parent, child), Config{})
	u.cps.Set(ushard(parent.id), fakeSeq(3), "")
	u.cps.Set(ushard(child.id), fakeSeq(101), "")
	q := &workQueue{}
	h := fanOutHandler(u, q, &bytes.Buffer{})
	msg := events.SQSMessage{MessageId: "early", EventSource: "aws:sqs", EventSourceARN: verifyARN, Attributes: map[string]string{"MessageGroupId": child.id},
		Body: fmt.Sprintf(`{"gapless":{"version":1,"command":"verify","group":%q,"stream":%q,"verify":{"shardId":%q}}}`, ugroup, ustream, child.id)}
	if resp := h.HandleSQS(context.Background(), events.SQSEvent{Records: []events.SQSMessage{msg}}); len(resp.BatchItemFailures) != 0 {
		t.Errorf("response %+v", resp)
	}
	if n := u.kin.count("GetRecords"); n != 0 || len(q.msgs) != 0 || len(u.rec.counts()) != 0 {
		t.Errorf("a waiting child was walked: %d pages, %d messages queued, %d records replayed", n, len(q.msgs), len(u.rec.counts()))
	}
}
