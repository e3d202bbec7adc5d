package reconcile

import (
	"context"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// closedWithExpiredTail builds a closed parent verified up to its third record (the watermark),
// whose three later records were never consumed and then expired; a child has a checkpoint, so
// the parent must be verified to its end. Records 3-5 are one lost span, after the watermark.
func closedWithExpiredTail(t *testing.T, s *stack) (parent string) {
	t.Helper()
	expire := s.trimmed()
	parent = s.shardIDs()[0]
	cons := s.pipeline(newRecorder().process, 3)
	verified := s.putN(3, "verified", keyMod(3), nil)
	s.consume(cons, verified)
	if _, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil || s.state(parent).Watermark != verified[2].seq {
		t.Fatalf("first pass: err %v, watermark %s, want %s", err, s.state(parent).Watermark, verified[2].seq)
	}
	s.putN(3, "lost", keyMod(3), nil)
	if _, err := s.kin.SplitShard(context.Background(), splitInput(s.stream, parent, new(big.Int).Lsh(big.NewInt(1), 127))); err != nil {
		t.Fatal(err)
	}
	s.waitActive()
	expire()
	s.consume(cons, s.putN(1, "child", keyMod(1), nil))
	return parent
}

// TestClosedParentNotFinalBeforeItsLossIsCounted: a closed parent whose records after the
// watermark all expired is marked closed only once the write counting the span is durable. A
// counting write that fails (throttled past the SDK's retries, a 5xx, never forwarded) leaves the
// pass in error and the parent open, so the next pass counts the span; a write applied whose
// every response was lost is confirmed by reading the item back, and counted once.
func TestClosedParentNotFinalBeforeItsLossIsCounted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fault faultproxy.Fault
		// landed: the faulted write reaches the table (the count is durable after pass 1).
		landed bool
	}{
		{"throttled past retries", faultproxy.Throttle, false},
		{"server error", faultproxy.ServerError, false},
		{"never forwarded", faultproxy.DropBeforeForward, false},
		{"every response lost", faultproxy.DropAfterForward, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, 1)
			parent := closedWithExpiredTail(t, s)
			cps, p := s.ddbFaults()
			p.SetRules(faultproxy.Rule{Match: bodyHas(opUpdateItem, `"lostToRetention"`), Fault: tc.fault, Rate: 1})
			r, err := New(s.kin, cps, s.pipeline(newRecorder().process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute, ReadInterval: time.Millisecond},
				WithClock(later))
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Run(context.Background())
			if p.Stats().Op(opUpdateItem).Faults() == 0 {
				t.Fatal("the counting write was never attempted")
			}
			st := s.state(parent)
			switch {
			case tc.landed && (err != nil || !st.Closed || st.LostToRetention != 1):
				t.Fatalf("pass 1 (write applied, answers lost): err %v, closed %v, lostToRetention %d; want no error, closed, 1", err, st.Closed, st.LostToRetention)
			case !tc.landed && err == nil:
				t.Fatal("pass 1: the counting write failed, yet the pass reported no error (the errors alarm stays quiet)")
			case !tc.landed && (st.Closed || st.LostToRetention != 0):
				t.Fatalf("pass 1: counting write failed, yet closed %v with lostToRetention %d: the span is never counted", st.Closed, st.LostToRetention)
			}
			p.SetRules()
			rep, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st = s.state(parent)
			if !st.Closed || st.LostToRetention != 1 {
				t.Errorf("pass 2: closed %v lostToRetention %d; want closed and the span counted once", st.Closed, st.LostToRetention)
			}
			if want := 1; tc.landed {
				if rep.LostToRetention != 0 {
					t.Errorf("pass 2 reported %d lost spans after pass 1 counted the span", rep.LostToRetention)
				}
			} else if rep.LostToRetention != want {
				t.Errorf("pass 2 reported %d lost spans, want %d", rep.LostToRetention, want)
			}
		})
	}
}

// gatedCounts is the real checkpoint store whose span-counting writes wait at a gate: reached
// is closed when the first one arrives, and it proceeds once release is closed.
type gatedCounts struct {
	*checkpoint.Store
	once             sync.Once
	reached, release chan struct{}
}

func newGatedCounts(s *checkpoint.Store) *gatedCounts {
	return &gatedCounts{Store: s, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedCounts) wait() {
	g.once.Do(func() { close(g.reached) })
	<-g.release
}

func (g *gatedCounts) CountLoss(ctx context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error) {
	g.wait()
	return g.Store.CountLoss(ctx, shard, l)
}

// TestExpiredSpanCountedOnceByReplayAndPass: one expired span, found both by a failure-queue
// replay of a range inside it and by a scheduled pass, is counted once whoever counts first,
// against the real DynamoDB emulator (conditional writes on one item).
func TestExpiredSpanCountedOnceByReplayAndPass(t *testing.T) {
	t.Parallel()
	stacktest.RequireAtomicItemWrites(t)
	// The pass has read the watermark and found the span; the replay runs to its end before the
	// pass's counting write goes out (the replay counts first, with a smaller advance).
	t.Run("the pass counts after the replay", func(t *testing.T) {
		s := newStack(t, 1)
		all := verifiedThenTrimmed(t, s) // (4, 15) lost; 15-19 consumed
		shardID := all[0].shard
		gate := newGatedCounts(s.cps)
		pass, err := New(s.kin, gate, s.pipeline(newRecorder().process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute, ReadInterval: time.Millisecond},
			WithClock(later), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		replay := s.reconciler(s.pipeline(newRecorder().process, 3), Config{})
		var wg sync.WaitGroup
		var passErr, replayErr error
		var passRep Report
		var replayRep RangeReport
		wg.Add(2)
		go func() {
			defer wg.Done()
			passRep, passErr = pass.Run(context.Background())
		}()
		go func() {
			defer wg.Done()
			defer close(gate.release)
			<-gate.reached
			replayRep, replayErr = replay.ReplayRange(context.Background(), shardID, all[6].seq, all[12].seq)
		}()
		wg.Wait()
		if passErr != nil || replayErr != nil || !replayRep.Accounted {
			t.Fatalf("pass err %v; replay err %v accounted %v", passErr, replayErr, replayRep.Accounted)
		}
		st := s.state(shardID)
		if st.LostToRetention != 1 || passRep.LostToRetention+replayRep.LostSpans != 1 {
			t.Errorf("lostToRetention %d (pass reported %d, replay %d): one span, want it counted once",
				st.LostToRetention, passRep.LostToRetention, replayRep.LostSpans)
		}
		if st.Watermark != all[19].seq {
			t.Errorf("watermark %s, want %s", st.Watermark, all[19].seq)
		}
	})
	// Nothing is held after the span: the replay counts it without a watermark move (nothing to
	// move it to), then the scheduled pass finds the same span after the same watermark and
	// passes it, up to the checkpoint.
	t.Run("nothing held after the span", func(t *testing.T) {
		s := newStack(t, 1)
		expire := s.trimmed()
		cons := s.pipeline(newRecorder().process, 3)
		verified := s.putN(3, "verified", keyMod(3), nil)
		s.consume(cons, verified)
		r := s.reconciler(s.pipeline(newRecorder().process, 3), Config{})
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		lost := s.putN(4, "lost", keyMod(3), nil)
		s.consume(cons, lost) // consumed, never verified: the checkpoint is on lost[3]
		expire()
		replayRep, err := r.ReplayRange(context.Background(), lost[0].shard, lost[0].seq, lost[3].seq)
		if err != nil || !replayRep.Accounted {
			t.Fatalf("replay: %+v %v", replayRep, err)
		}
		passRep, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		again, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st := s.state(lost[0].shard); st.LostToRetention != 1 {
			t.Errorf("lostToRetention %d (replay reported %d, passes %d and %d): one span, want it counted once",
				st.LostToRetention, replayRep.LostSpans, passRep.LostToRetention, again.LostToRetention)
		}
	})
}
