package reconcile

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/faultproxy"
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
