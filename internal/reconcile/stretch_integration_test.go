package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// stretchKinesis puts a long stretch of empty GetRecords pages in one shard of kinesis-local, at
// its start or right after the record after, as Kinesis serves a part of a shard where no records
// arrived for a long time ("If there are no records available in the portion of the shard that
// the iterator points to, GetRecords returns an empty list. It might take multiple calls to get
// to a portion of the shard that contains records", GetRecords API reference). The stretch covers
// the time before the first record after it (first), in steps: step k is the portion starting at
// first-from+k*step. Each empty page reports MillisBehindLatest as the distance of its portion
// from now (how far behind current time the reader is) and returns the next step's iterator;
// past the last step the shard is served by kinesis-local from the record after the stretch.
// AT_TIMESTAMP inside the stretch starts at the step holding the time. perPass bounds the stretch
// pages served until the next newPass: the call after them waits for its context, as a reader
// slower than its budget.
type stretchKinesis struct {
	kinesisAPI
	stream     string
	shardID    string
	after      string        // the record the stretch follows ("" the shard's start)
	from, step time.Duration // the stretch starts at first-from, in steps of step
	first      time.Time     // arrival of the first record after the stretch
	steps      int
	perPass    int

	mu     sync.Mutex
	served int // stretch pages served since newPass
	pages  int // stretch pages served in all
}

const stretchIter = "stretch:"

func (k *stretchKinesis) newPass() {
	k.mu.Lock()
	k.served = 0
	k.mu.Unlock()
}

func (k *stretchKinesis) at(i int) time.Time { return k.first.Add(-k.from + time.Duration(i)*k.step) }

func (k *stretchKinesis) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if aws.ToString(in.ShardId) != k.shardID {
		return k.kinesisAPI.GetShardIterator(ctx, in, opts...)
	}
	step := -1
	switch in.ShardIteratorType {
	case kintypes.ShardIteratorTypeTrimHorizon, kintypes.ShardIteratorTypeAtSequenceNumber:
		if k.after == "" {
			step = 0 // the shard's start (AT_SEQUENCE_NUMBER: its starting sequence number, the only one asked here)
		}
	case kintypes.ShardIteratorTypeAfterSequenceNumber:
		if k.after != "" && aws.ToString(in.StartingSequenceNumber) == k.after {
			step = 0
		}
	case kintypes.ShardIteratorTypeAtTimestamp:
		if t := aws.ToTime(in.Timestamp); t.Before(k.first) && (k.after == "" || !t.Before(k.at(0))) {
			step = max(int(t.Sub(k.at(0))/k.step), 0)
		}
	}
	if step < 0 {
		return k.kinesisAPI.GetShardIterator(ctx, in, opts...)
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(stretchIter + strconv.Itoa(step))}, nil
}

func (k *stretchKinesis) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	it := aws.ToString(in.ShardIterator)
	if !strings.HasPrefix(it, stretchIter) {
		return k.kinesisAPI.GetRecords(ctx, in, opts...)
	}
	step, err := strconv.Atoi(strings.TrimPrefix(it, stretchIter))
	if err != nil {
		return nil, fmt.Errorf("stretch iterator %q: %w", it, err)
	}
	if step >= k.steps { // past the stretch: the shard's records, from kinesis-local
		past := &kinesis.GetShardIteratorInput{StreamName: aws.String(k.stream), ShardId: aws.String(k.shardID), ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon}
		if k.after != "" {
			past.ShardIteratorType, past.StartingSequenceNumber = kintypes.ShardIteratorTypeAfterSequenceNumber, aws.String(k.after)
		}
		out, err := k.kinesisAPI.GetShardIterator(ctx, past)
		if err != nil {
			return nil, err
		}
		in := *in
		in.ShardIterator = out.ShardIterator
		return k.kinesisAPI.GetRecords(ctx, &in, opts...)
	}
	k.mu.Lock()
	over := k.served >= k.perPass
	if !over {
		k.served++
		k.pages++
	}
	k.mu.Unlock()
	if over {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &kinesis.GetRecordsOutput{Records: []kintypes.Record{}, NextShardIterator: aws.String(stretchIter + strconv.Itoa(step+1)),
		MillisBehindLatest: aws.Int64(time.Since(k.at(step)).Milliseconds())}, nil
}

// TestEmptyStretchCrossedOverPasses: a closed parent whose records come after a stretch of empty
// pages longer than one pass's share of it. Each pass keeps the position it reached, so the
// stretch is crossed over several passes and the parent's records verified; every pass reports
// the parent's verified lag; the child is verified once the parent is.
func TestEmptyStretchCrossedOverPasses(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	parent, recs, _ := closedShard(t, s)
	first, err := s.kin.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: aws.String(s.stream), ShardId: aws.String(parent),
		ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	page, err := s.kin.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: first.ShardIterator})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("parent's first record: %v", err)
	}
	kin := &stretchKinesis{kinesisAPI: s.kin, stream: s.stream, shardID: parent, first: aws.ToTime(page.Records[0].ApproximateArrivalTimestamp),
		from: 30 * time.Minute, step: time.Minute, steps: 30, perPass: 8}
	rec := newRecorder()
	// DeadlineMargin gives a walk cut short by its budget 3 s (half of it) to return, time
	// enough for its last writes on a loaded machine; MaxRunTime bounds each pass.
	r, err := New(kin, s.cps, s.pipeline(rec.process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute,
		ReadInterval: time.Millisecond, MaxRunTime: 3 * time.Second, DeadlineMargin: 6 * time.Second}, WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	closed := func() bool {
		st, err := s.cps.Get(context.Background(), s.shard(parent))
		return err == nil && st.Closed
	}
	passes := 0
	for ; passes < 12 && !closed(); passes++ {
		kin.newPass()
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("pass %d: %v", passes+1, err)
		}
		if st, err := s.cps.Get(context.Background(), s.shard(parent)); err == nil {
			t.Logf("pass %d: %d stretch pages so far, kept %+v", passes+1, kin.pages, st.Empty)
		}
		lagged := false
		for _, l := range shardLags(rep, r.now()) {
			lagged = lagged || (l.shardID == parent && l.lag > 0)
		}
		if !lagged && !closed() {
			t.Errorf("pass %d: no verified lag reported for the parent still behind its stretch: %+v", passes+1, shardLags(rep, r.now()))
		}
	}
	if !closed() {
		t.Fatalf("after %d passes (%d stretch pages read) the parent is still not verified: its stretch of %d pages is never crossed", passes, kin.pages, kin.steps)
	}
	if passes < 3 {
		t.Errorf("crossed in %d passes: the test does not make the stretch longer than a pass", passes)
	}
	checkOnce(t, "parent after its stretch", rec.counts(), idsOf(recs))
	t.Logf("crossed in %d passes, %d stretch pages read for %d steps", passes, kin.pages, kin.steps)
	// The child (its only record consumed) is verified next.
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	children := 0
	for _, id := range s.shardIDs() {
		st, err := s.cps.Get(context.Background(), s.shard(id))
		if id == parent || err != nil || st.Checkpoint == "" {
			continue
		}
		children++
		if st.Watermark != st.Checkpoint {
			t.Errorf("child %s verified to %q, want its checkpoint %s", id, st.Watermark, st.Checkpoint)
		}
	}
	if children != 1 {
		t.Errorf("%d children with a checkpoint, want 1", children)
	}
}

// TestEmptyStretchAfterTheWatermarkCrossedOverPasses: an open shard verified up to a record,
// then a stretch of empty pages longer than a pass's share, then records the consumer
// processed. The position kept through the stretch follows the watermark; the stretch is
// crossed over several passes, every pass reports the shard's lag, and the watermark reaches
// the checkpoint.
func TestEmptyStretchAfterTheWatermarkCrossedOverPasses(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	cons := s.pipeline(newRecorder().process, 3)
	before := s.putN(3, "before", keyMod(3), nil)
	s.consume(cons, before)
	if _, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil || s.state(before[0].shard).Watermark != before[2].seq {
		t.Fatalf("first pass: %v", err)
	}
	// A real gap between the arrivals, which the stretch fills in 100 ms steps.
	time.Sleep(3 * time.Second)
	after := s.putN(3, "after", keyMod(3), nil)
	s.consume(cons, after)
	shardID := after[0].shard
	it, err := s.kin.GetShardIterator(context.Background(), &kinesis.GetShardIteratorInput{StreamName: aws.String(s.stream), ShardId: aws.String(shardID),
		ShardIteratorType: kintypes.ShardIteratorTypeAtSequenceNumber, StartingSequenceNumber: aws.String(after[0].seq)})
	if err != nil {
		t.Fatal(err)
	}
	page, err := s.kin.GetRecords(context.Background(), &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil || len(page.Records) == 0 {
		t.Fatalf("first record after the stretch: %v", err)
	}
	kin := &stretchKinesis{kinesisAPI: s.kin, stream: s.stream, shardID: shardID, after: before[2].seq,
		first: aws.ToTime(page.Records[0].ApproximateArrivalTimestamp), from: 2500 * time.Millisecond, step: 100 * time.Millisecond, steps: 25, perPass: 15}
	rec := newRecorder()
	// DeadlineMargin gives a walk cut short by its budget 3 s (half of it) to return, time
	// enough for its last writes on a loaded machine; MaxRunTime bounds each pass.
	r, err := New(kin, s.cps, s.pipeline(rec.process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute,
		ReadInterval: time.Millisecond, MaxRunTime: 3 * time.Second, DeadlineMargin: 6 * time.Second}, WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	passes := 0
	for ; passes < 12; passes++ {
		kin.newPass()
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("pass %d: %v", passes+1, err)
		}
		st := s.state(shardID)
		t.Logf("pass %d: %d stretch pages so far, kept %+v", passes+1, kin.pages, st.Empty)
		if st.Watermark == after[2].seq {
			break
		}
		if lags := shardLags(rep, r.now()); len(lags) != 1 || lags[0].lag <= 0 {
			t.Errorf("pass %d: verified lag %+v, want the shard's lag", passes+1, lags)
		}
		if st.Empty.After != before[2].seq {
			t.Errorf("pass %d: progress kept after %q, want the watermark %s", passes+1, st.Empty.After, before[2].seq)
		}
	}
	if st := s.state(shardID); st.Watermark != after[2].seq {
		t.Fatalf("after %d passes (%d stretch pages) the watermark is %s, want %s: the stretch is never crossed", passes, kin.pages, st.Watermark, after[2].seq)
	}
	if passes < 1 {
		t.Errorf("crossed in %d passes: the test does not make the stretch longer than a pass", passes+1)
	}
	if len(rec.delivered()) != 0 {
		t.Errorf("%d records replayed; the consumer processed them all", len(rec.delivered()))
	}
}

// TestKeptEmptyPositionYieldsToAnExpiry: progress kept through empty pages after the watermark
// never hides an expiry or skips a record: when the records after the watermark expired (the
// usual position is refused), the pass reads from the trim horizon, replays the gaps held there
// and counts the span, even with a kept position past every record.
func TestKeptEmptyPositionYieldsToAnExpiry(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	expire := s.trimmed()
	cons := s.pipeline(newRecorder().process, 3)
	verified := s.putN(3, "verified", keyMod(3), nil)
	s.consume(cons, verified)
	if _, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.putN(3, "lost", keyMod(3), nil)
	expire()
	gaps := s.putN(3, "gap", keyMod(3), nil) // never consumed: the mapping delivered only the next
	tip := s.putN(1, "tip", keyMod(1), nil)
	s.consume(cons, tip)
	shardID := tip[0].shard
	time.Sleep(1500 * time.Millisecond) // the kept position, less its margin, lies after every record
	if ok, err := s.cps.SetEmptyThrough(context.Background(), s.shard(shardID), checkpoint.EmptyThrough{After: verified[2].seq, Through: time.Now()}); err != nil || !ok {
		t.Fatalf("keeping a position: %v %v", ok, err)
	}
	rec := newRecorder()
	rep, err := s.reconciler(s.pipeline(rec.process, 3), Config{}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := s.state(shardID); rep.LostToRetention != 1 || st.LostToRetention != 1 || st.Watermark != tip[0].seq {
		t.Errorf("lost %d (item %d), watermark %s; want the span counted once and the watermark on %s", rep.LostToRetention, st.LostToRetention, st.Watermark, tip[0].seq)
	}
	checkOnce(t, "gaps after the expired span", rec.counts(), idsOf(gaps))
}
