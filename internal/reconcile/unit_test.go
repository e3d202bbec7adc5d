package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func key3(i int) string { return fmt.Sprintf("k%d", i%3) }

func TestRefusalClassified(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error {
		return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "GetShardIterator", Err: err}
	}
	tests := []struct {
		name string
		err  error
		want error // errTrimmed, errNoRecord or nil (neither)
	}{
		{"kinesis: invalid argument", wrap(&kintypes.InvalidArgumentException{Message: aws.String("StartingSequenceNumber ... is not valid")}), errTrimmed},
		{"kinesis-local: unable to find record", wrap(&kintypes.ResourceNotFoundException{Message: aws.String("Unable to find record with provided SequenceNumber 1")}), errNoRecord},
		{"missing shard", wrap(&kintypes.ResourceNotFoundException{Message: aws.String("Shard shardId-000000000009 not found")}), nil},
		{"throttled", wrap(&kintypes.ProvisionedThroughputExceededException{Message: aws.String("slow down")}), nil},
		{"other", errBoom, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kin := newMemKinesis((&memShard{id: "shardId-0"}).addRecords(0, 1, time.Now(), key3))
			kin.at = func(*memShard, string) (int, error) { return 0, tt.err }
			rd := &shardReader{kin: kin, stream: "s", shardID: "shardId-0"}
			err := rd.open(context.Background(), kintypes.ShardIteratorTypeAfterSequenceNumber, fakeSeq(0))
			for _, sentinel := range []error{errTrimmed, errNoRecord} {
				if errors.Is(err, sentinel) != (tt.want == sentinel) {
					t.Errorf("open: %v; is %v = %v", err, sentinel, errors.Is(err, sentinel))
				}
			}
			if err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestLineageOrderAndDrained(t *testing.T) {
	t.Parallel()
	shards := []shardInfo{
		{id: "d", parents: []string{"b", "c"}},
		{id: "b", parents: []string{"a"}, endingSeq: "9"},
		{id: "c", parents: []string{"a"}, endingSeq: "9"},
		{id: "a", endingSeq: "9"},
		{id: "e", parents: []string{"gone"}}, // parent already out of retention
	}
	var order []string
	for _, s := range lineageOrder(shards) {
		order = append(order, s.id)
	}
	pos := func(id string) int { return slices.Index(order, id) }
	for _, edge := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}} {
		if pos(edge[0]) > pos(edge[1]) {
			t.Errorf("order %v: %s after its child %s", order, edge[0], edge[1])
		}
	}
	if len(order) != 5 {
		t.Errorf("order %v lost shards", order)
	}
	tests := []struct {
		name        string
		checkpoints map[string]string
		want        map[string]bool
	}{
		{"nothing consumed", nil, map[string]bool{"a": false, "b": false, "c": false, "d": false}},
		{"a child consumed", map[string]string{"b": "5"}, map[string]bool{"a": true, "b": false, "c": false}},
		{"grandchild consumed", map[string]string{"d": "5"}, map[string]bool{"a": true, "b": true, "c": true, "d": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states := map[string]checkpoint.State{}
			for id, cp := range tt.checkpoints {
				states[id] = checkpoint.State{Checkpoint: cp}
			}
			got := drainedShards(shards, states)
			for id, want := range tt.want {
				if got[id] != want {
					t.Errorf("drained[%s] = %v, want %v", id, got[id], want)
				}
			}
		})
	}
}

func TestWatermarkRecordGone(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name      string
		at        func(sh *memShard, seq string) (int, error)
		trimmed   int
		wantLost  int
		wantFirst int // first record replayed
	}{
		// Real Kinesis may refuse the expired position (InvalidArgumentException)...
		{"refused", func(*memShard, string) (int, error) {
			return 0, &kintypes.InvalidArgumentException{Message: aws.String("not valid")}
		}, 3, 1, 3},
		// The records after the watermark are still there: nothing lost.
		{"held", nil, 0, 0, 2},
		// The watermark's own record expired, the one after it is held: nothing lost.
		{"only the watermark's record expired", nil, 2, 0, 2},
		// The record after the watermark expired (as internal/local/retention answers).
		{"the record after it expired", nil, 3, 1, 3},
		// kinesis-local refuses a number that is no record: no proof of expiry, no loss.
		{"not a record", func(*memShard, string) (int, error) {
			return 0, &kintypes.ResourceNotFoundException{Message: aws.String("Unable to find record with provided SequenceNumber 1")}
		}, 0, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := (&memShard{id: "shardId-0"}).addRecords(0, 12, now, key3)
			sh.trimmed = tt.trimmed
			kin := newMemKinesis(sh)
			kin.at = tt.at
			u := newUnit(t, kin, Config{})
			u.cps.Set(ushard(sh.id), fakeSeq(9), fakeSeq(1))
			rep, err := u.r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.LostToRetention != tt.wantLost {
				t.Errorf("lost %d, want %d", rep.LostToRetention, tt.wantLost)
			}
			checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, tt.wantFirst, 9))
			st := u.cps.State(sh.id)
			if st.Watermark != fakeSeq(9) || st.LostToRetention != int64(tt.wantLost) {
				t.Errorf("watermark %s lost %d", st.Watermark, st.LostToRetention)
			}
			// Counted once.
			rep, _ = u.r.Run(context.Background())
			if rep.LostToRetention != 0 {
				t.Errorf("second run lost %d", rep.LostToRetention)
			}
		})
	}
}

// TestLossCountFailureHoldsTheWatermark: when the write that passes a lost span (and counts it)
// fails, no later page of the run may move the watermark past the span uncounted.
func TestLossCountFailureHoldsTheWatermark(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 12, time.Now(), key3)
	sh.trimmed = 3 // the records after the watermark (1) expired: 2 is gone, 3 is held
	u := newUnit(t, newMemKinesis(sh), Config{PageLimit: 4})
	u.cps.Set(ushard(sh.id), fakeSeq(11), fakeSeq(1))
	u.cps.FailLoss = errBoom
	rep, _ := u.r.Run(context.Background())
	if st := u.cps.State(sh.id); st.Watermark != fakeSeq(1) || rep.LostToRetention != 0 {
		t.Fatalf("watermark %s (lost %d) after the counting write failed: want it held at %s", st.Watermark, rep.LostToRetention, fakeSeq(1))
	}
	u.cps.FailLoss = nil
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := u.cps.State(sh.id); st.Watermark != fakeSeq(11) || st.LostToRetention != 1 || rep.LostToRetention != 1 {
		t.Errorf("watermark %s lost %d (run %d), want %s and 1", st.Watermark, st.LostToRetention, rep.LostToRetention, fakeSeq(11))
	}
}

func TestEverythingUpToCheckpointExpired(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 10, time.Now(), key3)
	sh.trimmed = 6 // records 0-5 gone; the checkpoint (4) and watermark (1) with them
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(4), fakeSeq(1))
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.LostToRetention != 1 || len(u.rec.delivered()) != 0 {
		t.Fatalf("lost %d, processed %d: want the span counted and nothing past the checkpoint touched", rep.LostToRetention, len(u.rec.delivered()))
	}
	if st := u.cps.State(sh.id); st.Watermark != fakeSeq(4) {
		t.Errorf("watermark %s, want the checkpoint %s", st.Watermark, fakeSeq(4))
	}
}

func TestSettleWithLostSpanWaits(t *testing.T) {
	t.Parallel()
	// The first record still held is too young: the span is reported when it is verified.
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 5, later(), key3)
	sh.trimmed = 2
	u := newUnit(t, newMemKinesis(sh), Config{SettleAfter: time.Minute})
	u.cps.Set(ushard(sh.id), fakeSeq(4), fakeSeq(0))
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.LostToRetention != 0 || u.cps.State(sh.id).Watermark != fakeSeq(0) {
		t.Fatalf("lost %d watermark %s: want nothing decided yet", rep.LostToRetention, u.cps.State(sh.id).Watermark)
	}
}

func TestClosedShardBound(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name           string
		childCP        string
		wantProcessed  []int
		wantParentDone bool
	}{
		// The mapping has not reached the children: the parent is verified up to its checkpoint
		// only (its tail may still be in flight) and the children wait.
		{"not drained", "", []int{1, 2, 3}, false},
		// A child has a checkpoint: the parent was drained; all of it is verified, then the children.
		{"drained", fakeSeq(102), []int{1, 2, 3, 4, 5, 6, 7, 100, 101}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := (&memShard{id: "shardId-0", ending: fakeSeq(999)}).addRecords(0, 8, now, key3)
			child := (&memShard{id: "shardId-1", parents: []string{"shardId-0"}}).addRecords(100, 3, now, key3)
			u := newUnit(t, newMemKinesis(parent, child), Config{})
			u.markDone(t, parent.id, 0)
			u.cps.Set(ushard(parent.id), fakeSeq(3), "")
			if tt.childCP != "" {
				u.markDone(t, child.id, 102)
				u.cps.Set(ushard(child.id), tt.childCP, "")
			}
			rep, err := u.r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var want []recordid.ID
			for _, i := range tt.wantProcessed {
				id := parent.id
				if i >= 100 {
					id = child.id
				}
				want = append(want, recordid.ID{ShardID: id, Seq: fakeSeq(i)})
			}
			checkOnce(t, "replayed", u.rec.counts(), want)
			if got := slices.Contains(u.cps.Closed, parent.id); got != tt.wantParentDone {
				t.Errorf("parent marked closed: %v, want %v", got, tt.wantParentDone)
			}
			childRep := rep.Shards[slices.IndexFunc(rep.Shards, func(s ShardReport) bool { return s.ShardID == child.id })]
			if childRep.Deferred == tt.wantParentDone {
				t.Errorf("child deferred %v with parent done %v", childRep.Deferred, tt.wantParentDone)
			}
			if tt.wantParentDone {
				if st := u.cps.State(parent.id); st.Watermark != fakeSeq(999) || st.EndingSeq != fakeSeq(999) {
					t.Errorf("parent watermark %s ending %s, want its ending sequence", st.Watermark, st.EndingSeq)
				}
			}
		})
	}
}

func TestTimeBudgetDefers(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 40, time.Now(), key3)
	kin := newMemKinesis(sh)
	u := newUnit(t, kin, Config{PageLimit: 2})
	u.cps.Set(ushard(sh.id), fakeSeq(39), "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	u.rec.fail = func(context.Context, pipeline.Record) error {
		if n.Add(1) == 7 {
			cancel() // the budget ends mid-run
		}
		return nil
	}
	rep, err := u.r.Run(ctx)
	if err != nil {
		t.Fatalf("an exhausted budget is not an error: %v", err)
	}
	if !rep.Shards[0].Deferred {
		t.Errorf("shard not reported deferred: %+v", rep.Shards[0])
	}
	wm := u.cps.State(sh.id).Watermark
	if wm == "" || seqLess(fakeSeq(8), wm) {
		t.Fatalf("watermark %s after 7 records processed", wm)
	}
	// The next run resumes from the watermark and finishes.
	u.rec.fail = nil
	if _, err := u.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range fakeIDs(sh.id, 0, 39) {
		if u.rec.counts()[id] == 0 {
			t.Errorf("record %s never processed", id)
		}
	}
	if u.cps.State(sh.id).Watermark != fakeSeq(39) {
		t.Errorf("watermark %s", u.cps.State(sh.id).Watermark)
	}
}

func TestWatermarkWriteFailureIsRetriedNextRun(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 6, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(5), "")
	u.cps.FailWatermark = func(recordid.Shard, string) error { return errBoom }
	if _, err := u.r.Run(context.Background()); err != nil {
		t.Fatalf("a failed watermark write is logged, not an error: %v", err)
	}
	if wm := u.cps.State(sh.id).Watermark; wm != "" {
		t.Fatalf("watermark %s", wm)
	}
	u.cps.FailWatermark = nil
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != 0 || rep.RecordsVerified != 6 || u.cps.State(sh.id).Watermark != fakeSeq(5) {
		t.Errorf("second run: replayed %d verified %d watermark %s", rep.GapsReplayed, rep.RecordsVerified, u.cps.State(sh.id).Watermark)
	}
	checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 0, 5))
}

func TestLedgerFailureFailsTheShard(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 4, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(3), "")
	u.ledger.Fail = func(op string) error {
		if op == "record" {
			return errBoom
		}
		return nil
	}
	_, err := u.r.Run(context.Background())
	if !errors.Is(err, pipeline.ErrLedger) {
		t.Fatalf("err %v, want ErrLedger", err)
	}
	if wm := u.cps.State(sh.id).Watermark; wm != "" {
		t.Fatalf("watermark %s moved over unrecorded records", wm)
	}
}

func TestReplayRangeArguments(t *testing.T) {
	t.Parallel()
	u := newUnit(t, newMemKinesis(&memShard{id: "shardId-0"}), Config{})
	for _, tt := range []struct{ shard, from, to string }{
		{"shardId-0", "12", "011"}, {"shardId-0", "x", "1"}, {"shardId-0", "5", "4"}, {"bad|shard", "1", "2"},
	} {
		if _, err := u.r.ReplayRange(context.Background(), tt.shard, tt.from, tt.to); !errors.Is(err, ErrInvalidRange) {
			t.Errorf("ReplayRange(%q, %q, %q) = %v, want ErrInvalidRange", tt.shard, tt.from, tt.to, err)
		}
	}
}

func TestReplayRangeStopsAtTheRange(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 20, later(), key3) // young: no settle window here
	u := newUnit(t, newMemKinesis(sh), Config{SettleAfter: time.Hour})
	u.markDone(t, sh.id, 6)
	rep, err := u.r.ReplayRange(context.Background(), sh.id, fakeSeq(4), fakeSeq(9))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Accounted || rep.GapsReplayed != 5 {
		t.Errorf("accounted %v replayed %d", rep.Accounted, rep.GapsReplayed)
	}
	want := append(fakeIDs(sh.id, 4, 5), fakeIDs(sh.id, 7, 9)...)
	checkOnce(t, "range", u.rec.counts(), want)
	if wm := u.cps.State(sh.id).Watermark; wm != "" {
		t.Errorf("ReplayRange moved the watermark to %s", wm)
	}
}

func TestReplayRangeNotAccountedWhileFailing(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 5, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.rec.fail = func(_ context.Context, r pipeline.Record) error {
		if r.ID.Seq == fakeSeq(2) {
			return errBoom
		}
		return nil
	}
	rep, err := u.r.ReplayRange(context.Background(), sh.id, fakeSeq(0), fakeSeq(4))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accounted || rep.StillFailing == 0 {
		t.Fatalf("accounted %v still failing %d", rep.Accounted, rep.StillFailing)
	}
	// The second attempt reaches MaxRecordAttempts (2): parked, and the range is accounted for.
	rep, err = u.r.ReplayRange(context.Background(), sh.id, fakeSeq(0), fakeSeq(4))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Accounted || rep.Parked != 1 || len(u.parker.Records()) != 1 {
		t.Fatalf("accounted %v parked %d (%d in the parker)", rep.Accounted, rep.Parked, len(u.parker.Records()))
	}
}

func TestHandleDispatch(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 3, time.Now(), key3)
	u := newUnit(t, newMemKinesis(sh), Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(2), "")
	var m emf
	h := NewHandler(u.r, m.emitter(), discard())
	schedule := `{"version":"0","id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa","detail-type":"Scheduled Event","source":"aws.events",
		"account":"123456789012","time":"2015-10-08T16:53:06Z","region":"us-east-1","resources":["arn:aws:events:us-east-1:123456789012:rule/my-scheduled-rule"],"detail":{}}`
	tests := []struct {
		name    string
		payload string
		check   func(t *testing.T, out any, err error)
	}{
		{"schedule", schedule, func(t *testing.T, out any, err error) {
			sum, ok := out.(Summary)
			if err != nil || !ok || sum.GapsReplayed != 3 || sum.RecordsVerified != 3 {
				t.Fatalf("out %+v err %v", out, err)
			}
			if l := m.last(t); l.Values["GapsReplayed"] != 3 || l.Units["VerifiedLagSeconds"] != "Seconds" {
				t.Errorf("metrics %v %v", l.Values, l.Units)
			}
		}},
		{"empty object runs a pass", `{}`, func(t *testing.T, out any, err error) {
			if _, ok := out.(Summary); !ok || err != nil {
				t.Fatalf("out %T err %v", out, err)
			}
		}},
		{"sqs", `{"Records":[{"messageId":"m1","body":"nope","eventSource":"aws:sqs"}]}`, func(t *testing.T, out any, err error) {
			resp, ok := out.(events.SQSEventResponse)
			if err != nil || !ok || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m1" {
				t.Fatalf("out %+v err %v", out, err)
			}
		}},
		{"kinesis event is refused", `{"Records":[{"eventSource":"aws:kinesis"}]}`, func(t *testing.T, _ any, err error) {
			if !errors.Is(err, ErrUnknownEvent) {
				t.Fatalf("err %v", err)
			}
		}},
		{"not an object", `[1,2]`, func(t *testing.T, _ any, err error) {
			if !errors.Is(err, ErrUnknownEvent) {
				t.Fatalf("err %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := h.Handle(context.Background(), json.RawMessage(tt.payload))
			tt.check(t, out, err)
		})
	}
}

func TestRedriveLedgerFreshBudget(t *testing.T) {
	t.Parallel()
	l := &pipelinetest.Ledger{}
	shard := ushard("shardId-0")
	id := recordid.ID{ShardID: "shardId-0", Seq: fakeSeq(1)}
	ctx := context.Background()
	// Parked by the consumer after three failures.
	for i := range 3 {
		e := pipeline.Entry{First: id.Seq, Last: id.Seq, Failed: []recordid.ID{id}, Source: pipeline.SourceConsumer}
		if i == 2 {
			e.Done, e.Parked = []recordid.ID{id}, []recordid.ID{id}
		}
		if err := l.Record(ctx, shard, e); err != nil {
			t.Fatal(err)
		}
	}
	rl := NewRedriveLedger(l)
	v, err := rl.Lookup(ctx, shard, id.Seq, id.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if v.Done(id) || v.Attempts(id) != 0 {
		t.Fatalf("parked record: done %v attempts %d, want not done with a fresh budget", v.Done(id), v.Attempts(id))
	}
	// A failed redrive attempt counts from the fresh budget.
	if err := rl.Record(ctx, shard, pipeline.Entry{First: id.Seq, Last: id.Seq, Failed: []recordid.ID{id}, Source: pipeline.SourceRedrive}); err != nil {
		t.Fatal(err)
	}
	v, _ = rl.Lookup(ctx, shard, id.Seq, id.Seq)
	if v.Attempts(id) != 1 {
		t.Errorf("attempts after one redrive failure %d, want 1", v.Attempts(id))
	}
	// A record done without parking (processed) is done for redrive too.
	other := recordid.ID{ShardID: "shardId-0", Seq: fakeSeq(2)}
	_ = l.Record(ctx, shard, pipeline.Entry{First: other.Seq, Last: other.Seq, Done: []recordid.ID{other}, Source: pipeline.SourceConsumer})
	v, _ = rl.Lookup(ctx, shard, other.Seq, other.Seq)
	if !v.Done(other) {
		t.Error("processed record not done for redrive")
	}
}

func TestReaderPacesBySize(t *testing.T) {
	t.Parallel()
	sh := &memShard{id: "shardId-0"}
	for i := range 4 {
		sh.recs = append(sh.recs, kintypes.Record{SequenceNumber: aws.String(fakeSeq(i)), PartitionKey: aws.String("k"), Data: make([]byte, 512<<10)})
	}
	rd := &shardReader{kin: newMemKinesis(sh), stream: ustream, shardID: sh.id, interval: time.Millisecond, bytesPerSec: 1 << 20, limit: 4}
	if err := rd.open(context.Background(), "", ""); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, _, err := rd.next(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 2 MiB read at 1 MiB/s: the next call may not start for two seconds.
	if gap := rd.nextAt.Sub(before); gap < 2*time.Second {
		t.Errorf("next call allowed %s after a 2 MiB page, want at least 2s", gap)
	}
}

func TestClosedShardCheckpointAtItsEnd(t *testing.T) {
	t.Parallel()
	// The mapping checkpointed the parent's last record and its children have no records yet:
	// the parent is read to its end, marked closed, and its children become verifiable.
	parent := (&memShard{id: "shardId-0", ending: fakeSeq(999)}).addRecords(0, 4, time.Now(), key3)
	child := &memShard{id: "shardId-1", parents: []string{"shardId-0"}}
	u := newUnit(t, newMemKinesis(parent, child), Config{PageLimit: 10})
	u.cps.Set(ushard(parent.id), fakeSeq(3), "")
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(u.cps.Closed, parent.id) || rep.Shards[1].Deferred {
		t.Fatalf("parent closed %v, child report %+v", u.cps.Closed, rep.Shards[1])
	}
	checkOnce(t, "replayed", u.rec.counts(), fakeIDs(parent.id, 0, 3))
}
