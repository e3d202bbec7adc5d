package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// TestReplayRangeLossCountedOnce: a loss is never invented and never counted twice, for
// spans that ReplayRange finds expired. Each case replays a range whose start has expired and
// then runs the scheduled pass; the shard's LostToRetention counter must end at the number of
// spans an unverified record really expired in (0 or 1), whichever finds it first.
func TestReplayRangeLossCountedOnce(t *testing.T) {
	t.Parallel()
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
			u.cps.Set(ushard(sh.id), fakeSeq(11), wm)
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
			st := u.cps.State(sh.id)
			if st.LostToRetention != tt.wantLost {
				t.Errorf("LostToRetention %d after replay, replay and pass; want %d", st.LostToRetention, tt.wantLost)
			}
			if st.Watermark != fakeSeq(11) {
				t.Errorf("watermark %s, want %s", st.Watermark, fakeSeq(11))
			}
		})
	}
}

// TestReplayRangeLossCountedOnceOnTheStack: the same through a stream that really trims
// (internal/local/retention over kinesis-local) and the DynamoDB checkpoint store. A failure-queue
// message naming a range whose start expired is replayed twice (a redelivery) and then the
// scheduled pass runs: the span is counted once; a range whose expired part had been verified
// counts nothing.
func TestReplayRangeLossCountedOnceOnTheStack(t *testing.T) {
	t.Parallel()
	t.Run("a span lost", func(t *testing.T) {
		s := newStack(t, 1)
		all := verifiedThenTrimmed(t, s) // (4, 15) lost; 15-19 consumed
		shardID := all[0].shard
		r := s.reconciler(s.pipeline(newRecorder().process, 3), Config{})
		for range 2 {
			rep, err := r.ReplayRange(context.Background(), shardID, all[2].seq, all[17].seq)
			if err != nil || !rep.Accounted {
				t.Fatalf("replay: %+v %v", rep, err)
			}
		}
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.state(shardID); st.LostToRetention != 1 || st.Watermark != all[19].seq {
			t.Errorf("lostToRetention %d watermark %s, want 1 and %s", st.LostToRetention, st.Watermark, all[19].seq)
		}
	})
	t.Run("expired after it was verified", func(t *testing.T) {
		s := newStack(t, 1)
		expire := s.trimmed()
		cons := s.pipeline(newRecorder().process, 3)
		all := s.putN(10, "verified", keyMod(3), nil)
		s.consume(cons, all)
		r := s.reconciler(s.pipeline(newRecorder().process, 3), Config{})
		if _, err := r.Run(context.Background()); err != nil || s.state(all[0].shard).Watermark != all[9].seq {
			t.Fatalf("first pass: %v, watermark %s", err, s.state(all[0].shard).Watermark)
		}
		expire()
		late := s.putN(5, "late", keyMod(3), nil)
		s.consume(cons, late)
		rep, err := r.ReplayRange(context.Background(), all[0].shard, all[0].seq, late[2].seq)
		if err != nil || !rep.Accounted {
			t.Fatalf("replay: %+v %v", rep, err)
		}
		if st := s.state(all[0].shard); st.LostToRetention != 0 || rep.LostSpans != 0 {
			t.Errorf("lostToRetention %d (replay reported %d spans): the expired records were all verified", st.LostToRetention, rep.LostSpans)
		}
	})
}

// TestReplayRangeRefusalWithoutExpiry: Kinesis refuses the range's start with
// InvalidArgumentException although nothing expired (a number it cannot serve; records before it
// are still held). That proves no loss: nothing is counted, and the watermark never passes the
// held records between it and the range unverified (they are gaps: nobody processed them).
func TestReplayRangeRefusalWithoutExpiry(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 12, time.Now(), key3)
	kin := newMemKinesis(sh)
	kin.at = func(sh *memShard, seq string) (int, error) {
		if seq == fakeSeq(5) {
			return 0, &kintypes.InvalidArgumentException{Message: aws.String("StartingSequenceNumber " + seq + " is invalid")}
		}
		for i := range sh.recs {
			if aws.ToString(sh.recs[i].SequenceNumber) == seq {
				return i + 1, nil // AFTER_SEQUENCE_NUMBER: the only other position asked here
			}
		}
		return 0, &kintypes.ResourceNotFoundException{Message: aws.String("Unable to find record with provided SequenceNumber " + seq)}
	}
	u := newUnit(t, kin, Config{})
	u.cps.Set(ushard(sh.id), fakeSeq(11), fakeSeq(1))
	rep, err := u.r.ReplayRange(context.Background(), sh.id, fakeSeq(5), fakeSeq(8))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Accounted || rep.LostSpans != 0 {
		t.Errorf("replay: accounted %v, lost spans %d; want accounted, nothing lost", rep.Accounted, rep.LostSpans)
	}
	if _, err := u.r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, "replayed", u.rec.counts(), fakeIDs(sh.id, 2, 11))
	if st := u.cps.State(sh.id); st.LostToRetention != 0 || st.Watermark != fakeSeq(11) {
		t.Errorf("lostToRetention %d watermark %s, want 0 and %s", st.LostToRetention, st.Watermark, fakeSeq(11))
	}
}
