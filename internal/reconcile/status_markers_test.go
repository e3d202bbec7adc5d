package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestStatusShowsMarkers: per shard, Status counts the live in-flight markers from the
// checkpoint on and the dead ones still naming a record not done; completed markers and dead
// ones whose records are all done are history and not shown.
func TestStatusShowsMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 10, now.Add(-time.Hour), key3)
	cps := &pipelinetest.Checkpoint{}
	cps.Set(ushard(sh.id), fakeSeq(4), fakeSeq(4))
	ledger := &pipelinetest.Ledger{}
	id := func(i int) recordid.ID { return recordid.ID{ShardID: sh.id, Seq: fakeSeq(i)} }
	mark := func(nonce string, deadline time.Time, ids ...int) {
		m := pipeline.Marker{Nonce: nonce, First: fakeSeq(ids[0]), Last: fakeSeq(ids[len(ids)-1]),
			Started: deadline.Add(-time.Minute), Deadline: deadline, Source: pipeline.SourceConsumer}
		for _, i := range ids {
			m.IDs = append(m.IDs, id(i))
		}
		if err := ledger.Mark(ctx, ushard(sh.id), m); err != nil {
			t.Fatal(err)
		}
	}
	record := func(nonce string, done ...int) {
		e := pipeline.Entry{First: fakeSeq(done[0]), Last: fakeSeq(done[len(done)-1]), Source: pipeline.SourceConsumer, Nonce: nonce}
		for _, i := range done {
			e.Done = append(e.Done, id(i))
		}
		if err := ledger.Record(ctx, ushard(sh.id), e); err != nil {
			t.Fatal(err)
		}
	}
	mark("dead1", now.Add(-time.Hour), 5, 6) // died; 5 still not done
	record("other", 6)
	mark("dead2", now.Add(-time.Hour), 7) // died, but 7 was done since
	record("other2", 7)
	mark("live", now.Add(time.Hour), 8, 9) // working now
	mark("done", now.Add(-time.Hour), 9)   // completed by its entry
	record("done", 9)

	st, err := Status(ctx, newMemKinesis(sh), cps, ledger, StatusConfig{Group: ugroup, Stream: ustream, Now: func() time.Time { return now }, ReadInterval: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 1 || st.Shards[0].MarkersLive != 1 || st.Shards[0].MarkersDead != 1 || st.Shards[0].Error != "" {
		t.Errorf("status = %+v, want 1 live and 1 dead marker", st.Shards)
	}
}
