package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestRefusedWatermarkTailLoss: the watermark is on the checkpoint and Kinesis (through the
// retention proxy) refuses its position because everything up to now expired. The refusal alone
// proves nothing: on an idle shard, or one whose later records the consumer processed without
// its checkpoint write landing, nothing is lost and no span may be counted, pass after pass. But
// a tail after the watermark that the consumer had in hand and did not finish (a failed attempt
// in the ledger: the mapping gave the batch up and its on-failure message was lost), trimmed
// while the reconciler was held up, is a loss: counted once, with an ERROR line, and never again
// by a later pass. Before the ledger was read there the span was dropped: LostToRetention 0.
func TestRefusedWatermarkTailLoss(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// tail puts records after the watermark and runs them through the consumer (nil: none).
		tail     func(s *stack) []put
		wantLost int
		// late: a record put after the expiry is consumed and a pass verifies it. Not for the
		// processed tail: with the checkpoint then past the watermark, the pass counts the expiry
		// after the watermark whatever the ledger shows (the conservative rule below the
		// checkpoint).
		late bool
	}{
		{"idle shard: only the watermark's record expired", nil, 0, true},
		{"tail processed, its checkpoint write lost", func(s *stack) []put {
			tail := s.putN(2, "done", keyMod(3), nil)
			s.consumeNoCheckpoint(s.pipeline(newRecorder().process, 3), tail)
			return tail
		}, 0, false},
		{"tail seen, failed and given up", func(s *stack) []put {
			tail := s.putN(2, "failing", keyMod(3), nil)
			rec := newRecorder()
			rec.fail = func(context.Context, pipeline.Record) error { return errors.New("downstream unavailable") }
			if res := s.consume(s.pipeline(rec.process, 3), tail); res.Failed == 0 {
				t.Fatalf("consumer result %+v, want the tail failed", res)
			}
			return tail
		}, 1, true},
		{"tail in the batch of an invocation that died", func(s *stack) []put {
			tail := s.putN(2, "killer", keyMod(3), nil)
			now := time.Now()
			m := dedupe.Marker{Nonce: "died1", First: tail[0].seq, Last: tail[1].seq, IDs: []recordid.ID{tail[0].id(), tail[1].id()},
				Started: now, Deadline: now.Add(time.Minute), Source: string(pipeline.SourceConsumer)}
			if err := s.ledger.Mark(context.Background(), s.shard(tail[0].shard), m); err != nil {
				t.Fatal(err)
			}
			return tail
		}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStack(t, 1)
			expire := s.trimmed()
			verified := s.putN(3, "verified", keyMod(3), nil)
			s.consume(s.pipeline(newRecorder().process, 3), verified)
			shardID := verified[0].shard
			if _, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := s.state(shardID); st.Watermark != verified[2].seq || st.Checkpoint != verified[2].seq {
				t.Fatalf("first pass: watermark %s checkpoint %s, want both on %s", st.Watermark, st.Checkpoint, verified[2].seq)
			}
			if tt.tail != nil {
				tt.tail(s)
				if st := s.state(shardID); st.Checkpoint != verified[2].seq {
					t.Fatalf("checkpoint %s moved past the watermark %s", st.Checkpoint, verified[2].seq)
				}
			}
			expire() // the reconciler was held up past retention: everything put so far is trimmed
			var logs logBuffer
			rec := newRecorder()
			r := s.reconciler(s.pipeline(rec.process, 3), Config{}, WithLogger(logs.logger()))
			for pass := range 3 {
				rep, err := r.Run(context.Background())
				if err != nil {
					t.Fatalf("pass %d: %v", pass, err)
				}
				want := 0
				if pass == 0 {
					want = tt.wantLost
				}
				if rep.LostToRetention != want {
					t.Errorf("pass %d: LostToRetention %d, want %d", pass, rep.LostToRetention, want)
				}
				if st := s.state(shardID); st.LostToRetention != int64(tt.wantLost) || st.Watermark != verified[2].seq {
					t.Errorf("pass %d: item lostToRetention %d watermark %s, want %d and %s", pass, st.LostToRetention, st.Watermark, tt.wantLost, verified[2].seq)
				}
			}
			found := false
			for _, l := range logs.lines("ERROR") {
				found = found || l["lost_after_sequence_number"] == verified[2].seq
			}
			if found != (tt.wantLost > 0) {
				t.Errorf("ERROR line naming the span after %s: %v, want %v", verified[2].seq, found, tt.wantLost > 0)
			}
			if n := len(rec.delivered()); n != 0 {
				t.Errorf("%d records replayed; every record was trimmed", n)
			}
			if !tt.late {
				return
			}
			// A record put after the expiry is held: the shard verifies on, the count unchanged.
			late := s.putN(1, "late", keyMod(1), nil)
			s.consume(s.pipeline(newRecorder().process, 3), late)
			time.Sleep(10 * time.Millisecond)
			if _, err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := s.state(shardID); st.LostToRetention != int64(tt.wantLost) || st.Watermark != late[0].seq {
				t.Errorf("after a later record: lostToRetention %d watermark %s, want %d and %s", st.LostToRetention, st.Watermark, tt.wantLost, late[0].seq)
			}
		})
	}
}

// consumeNoCheckpoint runs recs through p as a consumer invocation whose checkpoint write never
// landed: the ledger shows them done, the mirror stays where it was.
func (s *stack) consumeNoCheckpoint(p *pipeline.Pipeline, recs []put) {
	s.t.Helper()
	b := pipeline.Batch{Shard: s.shard(recs[0].shard), Source: pipeline.SourceConsumer}
	for _, r := range recs {
		b.Records = append(b.Records, pipeline.Record{ID: r.id(), PartitionKey: r.key, Data: r.data, ArrivalTime: time.Now()})
	}
	if _, err := p.Run(context.Background(), b); err != nil {
		s.t.Fatalf("consume: %v", err)
	}
}
