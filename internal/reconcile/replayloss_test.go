package reconcile

import (
	"context"
	"testing"
	"time"
)

// TestReplayRangeLossCountedOnce: SPEC invariant 7 (never invented, never counted twice) for
// spans that ReplayRange finds expired. Each case replays a range whose start has expired and
// then runs the scheduled pass; the shard's LostToRetention counter must end at the number of
// spans an unverified record really expired in (0 or 1), whichever finds it first.
func TestReplayRangeLossCountedOnce(t *testing.T) {
	tests := []struct {
		name      string
		watermark int // verified watermark before the replay (-1: none)
		trimmed   int // records before this index expired
		from, to  int
		wantLost  int64
	}{
		// Records 0-2 expired after the pass had verified them (watermark 5): the range 0..9
		// starts in expired but verified records. Nothing unverified expired.
		{"expired part was verified", 5, 3, 0, 9, 0},
		// As above, the first held record (3) right after the watermark (2).
		{"watermark just before the first held record", 2, 3, 0, 9, 0},
		// Record 2 expired unverified (watermark 1): one span, found by the replay first and by
		// the scheduled pass after it.
		{"one span, replay then pass", 1, 3, 2, 6, 1},
		// The same span from a range that expired entirely (first held record past the range).
		{"whole range expired", 1, 5, 2, 4, 1},
		// A shard never verified whose first records expired.
		{"never verified", -1, 3, 0, 6, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := (&memShard{id: "shardId-0"}).addRecords(0, 12, time.Now(), key3)
			sh.trimmed = tt.trimmed
			u := newUnit(t, newMemKinesis(sh), Config{})
			wm := ""
			if tt.watermark >= 0 {
				wm = fakeSeq(tt.watermark)
			}
			u.cps.set(ushard(sh.id), fakeSeq(11), wm)
			rep, err := u.r.ReplayRange(context.Background(), sh.id, fakeSeq(tt.from), fakeSeq(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Accounted {
				t.Fatalf("range not accounted for: %+v", rep)
			}
			// A redelivered failure-queue message replays the same range again.
			if _, err := u.r.ReplayRange(context.Background(), sh.id, fakeSeq(tt.from), fakeSeq(tt.to)); err != nil {
				t.Fatal(err)
			}
			if _, err := u.r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := u.cps.state(sh.id)
			if st.LostToRetention != tt.wantLost {
				t.Errorf("LostToRetention %d after replay, replay and pass; want %d", st.LostToRetention, tt.wantLost)
			}
			if st.Watermark != fakeSeq(11) {
				t.Errorf("watermark %s, want %s", st.Watermark, fakeSeq(11))
			}
		})
	}
}
