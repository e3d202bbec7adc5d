package reconcile

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestUndeliverableRecordReplayed: a record larger than one Lambda invocation can carry (a
// stream whose maximum record size was raised past it) is never delivered by the mapping, so
// the scheduled pass replays it through Process as soon as it reads it, past the checkpoint and
// inside the settle window alike, instead of leaving it to the mapping; the small records after
// it, which the mapping can still deliver, are left to it. kinesis-local holds records of at
// most 1 MiB, so the stream here is the in-memory one (the reader, the bounds and the pipeline
// are the real ones).
func TestUndeliverableRecordReplayed(t *testing.T) {
	t.Parallel()
	arrival := later() // the pass's clock: they arrived just now
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 6, arrival, key3)
	big := bytes.Repeat([]byte("x"), MaxDeliverableData+1)
	sh.recs[3].Data = big
	u := newUnit(t, newMemKinesis(sh), Config{SettleAfter: 30 * time.Minute})
	u.markDone(t, sh.id, 0, 1, 2)
	u.cps.Set(ushard(sh.id), fakeSeq(2), fakeSeq(2))
	rep, err := u.r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := u.rec.counts()
	if got[recordid.ID{ShardID: sh.id, Seq: fakeSeq(3)}] != 1 {
		t.Fatalf("the %d-byte record was replayed %d times, want once (delivered %v)", len(big), got[recordid.ID{ShardID: sh.id, Seq: fakeSeq(3)}], u.rec.delivered())
	}
	for _, i := range []int{4, 5} {
		if n := got[recordid.ID{ShardID: sh.id, Seq: fakeSeq(i)}]; n != 0 {
			t.Errorf("record %d (deliverable, past the checkpoint, unsettled) replayed %d times: it is still the mapping's", i, n)
		}
	}
	if st := u.cps.State(sh.id); st.Watermark != fakeSeq(3) {
		t.Errorf("watermark %s, want %s (the replayed record)", st.Watermark, fakeSeq(3))
	}
	if rep.TailReplayed != 1 {
		t.Errorf("TailReplayed %d, want 1 (the record past the checkpoint)", rep.TailReplayed)
	}

	// Behind the checkpoint and unsettled (another lane moved the checkpoint past it): replayed
	// too, the settle window waits for nothing the mapping could still deliver.
	sh2 := (&memShard{id: "shardId-0"}).addRecords(0, 6, arrival, key3)
	sh2.recs[3].Data = big
	u2 := newUnit(t, newMemKinesis(sh2), Config{SettleAfter: 30 * time.Minute})
	u2.markDone(t, sh2.id, 0, 1, 2, 4, 5)
	u2.cps.Set(ushard(sh2.id), fakeSeq(5), fakeSeq(2))
	if _, err := u2.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := u2.rec.counts()[recordid.ID{ShardID: sh2.id, Seq: fakeSeq(3)}]; n != 1 {
		t.Errorf("behind the checkpoint: replayed %d times, want once", n)
	}
}

func TestUndeliverableBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want bool
	}{{1 << 20, false}, {MaxDeliverableData, false}, {MaxDeliverableData + 1, true}, {10 << 20, true}} {
		if got := Undeliverable(c.n); got != c.want {
			t.Errorf("Undeliverable(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	// base64 of the data plus the record's JSON must fit the invocation payload.
	if enc := (MaxDeliverableData+2)/3*4 + recordEnvelope; enc > MaxInvocationPayload {
		t.Errorf("a record of MaxDeliverableData bytes takes %d bytes of payload, over %d", enc, MaxInvocationPayload)
	}
}
