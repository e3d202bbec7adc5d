package reconcile

import (
	"context"
	"testing"
	"time"
)

// TestIteratorAcrossTheTrimHorizon: retention trims records after the walk's position between
// the call that gave the walk its iterator and the GetRecords that uses it. GetRecords then
// reads on from the trim horizon without an error, so the page starts past records the walk
// never saw; a record among them that nobody processed expired unseen, and its span must be
// counted with the advance past it (the simulator's "verified across the trim horizon").
func TestIteratorAcrossTheTrimHorizon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trimAt   int // the GetRecords call before which records 0-2 expire
		pageSize int32
	}{
		// GetShardIterator AFTER_SEQUENCE_NUMBER the watermark (1) succeeds while 2 is held;
		// 2 expires before the first GetRecords.
		{"after the iterator was opened", 1, 4},
		// The first page is record 1 alone: record 2 expires before the NextShardIterator
		// of that page is read.
		{"between two pages", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := (&memShard{id: "shardId-0"}).addRecords(0, 12, time.Now(), key3)
			kin := newMemKinesis(sh)
			kin.beforeGetRecords = func(n int, sh *memShard) {
				if n == tc.trimAt {
					sh.trimmed = 3 // 0, 1 (the watermark) and 2 (never processed) expire
				}
			}
			u := newUnit(t, kin, Config{PageLimit: tc.pageSize})
			u.cps.set(ushard(sh.id), fakeSeq(9), fakeSeq(0))
			if tc.trimAt == 2 {
				u.markDone(t, sh.id, 1) // the first page (0 is the watermark's) verifies 1
			}
			rep, err := u.r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st := u.cps.state(sh.id)
			if st.LostToRetention != 1 || rep.LostToRetention != 1 {
				t.Fatalf("record 2 expired unseen and the watermark is at %s: LostToRetention %d (run %d), want 1",
					st.Watermark, st.LostToRetention, rep.LostToRetention)
			}
			if st.Watermark != fakeSeq(9) {
				t.Errorf("watermark %s, want the checkpoint %s", st.Watermark, fakeSeq(9))
			}
		})
	}
}
