package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// keepBelow4 keeps the fake records {"n": 0..3} and drops the others.
var keepBelow4 = filter.MustParse(`{"data": {"n": [{"numeric": ["<", 4]}]}}`)

// TestFilteredRecordsAreAccountedFor: records the record filter drops (the mapping never sent
// them) are neither gaps nor replayed, whole pages of them included; they are counted, and the
// watermark passes them. The same holds for a failure-queue range and for status.
func TestFilteredRecordsAreAccountedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newShard := func() *memShard { return (&memShard{id: "shardId-0"}).addRecords(0, 12, time.Now(), key3) }

	t.Run("scheduled pass", func(t *testing.T) {
		sh := newShard()
		u := newUnit(t, newMemKinesis(sh), Config{Filter: keepBelow4}) // PageLimit 4: pages 4-7 and 8-11 are all filtered
		u.cps.Set(ushard(sh.id), fakeSeq(11), "")
		rep, err := u.r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GapsDetected != 4 || rep.GapsReplayed != 4 || rep.Filtered != 8 {
			t.Errorf("gaps %d replayed %d filtered %d, want 4, 4, 8", rep.GapsDetected, rep.GapsReplayed, rep.Filtered)
		}
		checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 0, 3))
		if st := u.cps.State(sh.id); st.Watermark != fakeSeq(11) || st.Filtered != 8 || st.GapsDetected != 4 {
			t.Errorf("state: watermark %s filtered %d gaps %d; want %s, 8, 4", st.Watermark, st.Filtered, st.GapsDetected, fakeSeq(11))
		}
		if s := rep.ShardReport(); s.Filtered != 8 {
			t.Errorf("summed shard report filtered %d, want 8", s.Filtered)
		}
	})

	t.Run("without the filter every record is a gap", func(t *testing.T) {
		sh := newShard()
		u := newUnit(t, newMemKinesis(sh), Config{})
		u.cps.Set(ushard(sh.id), fakeSeq(11), "")
		rep, err := u.r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.GapsReplayed != 12 || rep.Filtered != 0 {
			t.Errorf("replayed %d filtered %d, want 12 and 0", rep.GapsReplayed, rep.Filtered)
		}
	})

	t.Run("failure-queue range", func(t *testing.T) {
		sh := newShard()
		u := newUnit(t, newMemKinesis(sh), Config{Filter: keepBelow4})
		rep, err := u.r.ReplayRange(ctx, sh.id, fakeSeq(2), fakeSeq(9))
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Accounted || rep.GapsReplayed != 2 || rep.Filtered != 6 {
			t.Errorf("accounted %v replayed %d filtered %d, want true, 2, 6", rep.Accounted, rep.GapsReplayed, rep.Filtered)
		}
		checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 2, 3))
	})

	t.Run("status", func(t *testing.T) {
		sh := newShard()
		cps := &pipelinetest.Checkpoint{}
		cps.Set(ushard(sh.id), fakeSeq(11), "")
		cps.Edit(ushard(sh.id), func(st *checkpoint.State) { st.Filtered = 5 })
		ledger := &pipelinetest.Ledger{}
		now := time.Now().Add(time.Hour)
		st, err := Status(ctx, newMemKinesis(sh), cps, ledger, StatusConfig{Group: ugroup, Stream: ustream, Filter: keepBelow4,
			Now: func() time.Time { return now }, ReadInterval: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Shards) != 1 {
			t.Fatalf("status %+v", st)
		}
		s := st.Shards[0]
		if s.Gaps != 4 || s.Filtered != 8 || s.LagRecords != 12 || s.FilteredTotal != 5 {
			t.Errorf("status gaps %d filtered %d lag %d filtered_total %d, want 4, 8, 12, 5", s.Gaps, s.Filtered, s.LagRecords, s.FilteredTotal)
		}
	})
}

// TestFilterJudgesUserRecordsOfAnAggregate: the filter judges the user records of a KPL
// aggregate one by one (as Lambda does with enhanced fan-out): a user record the pattern keeps
// is replayed when the ledger lacks it, whatever happened to its siblings, and only the others
// count as filtered. Judging the aggregate whole (not JSON, so dropped) would count the kept
// user record as filtered and never replay it.
func TestFilterJudgesUserRecordsOfAnAggregate(t *testing.T) {
	t.Parallel()
	agg, err := kpl.Aggregate([]kpl.UserRecord{
		{PartitionKey: "a", Data: []byte(`{"n":1}`)},
		{PartitionKey: "b", Data: []byte(`{"n":9}`)},
		{PartitionKey: "c", Data: []byte(`{"n":2}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	sh := &memShard{id: "shardId-0"}
	sh.recs = append(sh.recs, kintypes.Record{SequenceNumber: aws.String(fakeSeq(0)), PartitionKey: aws.String("a"),
		Data: agg, ApproximateArrivalTimestamp: aws.Time(time.Now())})
	u := newUnit(t, newMemKinesis(sh), Config{Filter: keepBelow4})
	u.cps.Set(ushard(sh.id), fakeSeq(0), "")
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != 2 || rep.Filtered != 1 {
		t.Errorf("replayed %d filtered %d, want 2 and 1", rep.GapsReplayed, rep.Filtered)
	}
	checkOnce(t, "replayed", u.rec.counts(), []recordid.ID{
		{ShardID: sh.id, Seq: fakeSeq(0), Sub: 0}, {ShardID: sh.id, Seq: fakeSeq(0), Sub: 2}})
	if st := u.cps.State(sh.id); st.Watermark != fakeSeq(0) {
		t.Errorf("watermark %s, want %s", st.Watermark, fakeSeq(0))
	}
}
