package reconcile

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/lanes"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/retention"
)

// twoLaneKeys returns a key of lane 0 and a key of lane 1 of two lanes (lanes.Of).
func twoLaneKeys(t *testing.T) (string, string) {
	t.Helper()
	var byLane [2]string
	for i := 0; byLane[0] == "" || byLane[1] == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		if l := lanes.Of(k, 2); byLane[l] == "" {
			byLane[l] = k
		}
	}
	return byLane[0], byLane[1]
}

// expireOnIterator is the stack's Kinesis client with one fault: once GetShardIterator has been
// answered `after` times, the trim horizon moves to cut (the stream trims while a replay reads).
type expireOnIterator struct {
	*kinesis.Client
	p     *retention.Proxy
	cut   time.Time
	after int

	mu    sync.Mutex
	calls int
}

func (k *expireOnIterator) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := k.Client.GetShardIterator(ctx, in, opts...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.calls++; k.calls == k.after {
		k.p.ExpireBefore(k.cut)
	}
	return out, err
}

// TestS3ObjectReplaysOnlyItsLane: ParallelizationFactor 2. Lane A gave up a0..a2 as one batch
// (an S3 destination object holds a0, a1, a2); the range's sequence numbers are shard-wide, so
// it also spans lane B's b0 and b1, which lane B has not processed yet (its own batch is still
// in flight). The stream has trimmed a0 (before the replay looked, or while it read). The
// reconciler must replay a0..a2 and leave b0 and b1 to lane B: replaying them would apply lane
// B's records out of its order (a later record of a key before an earlier one lane B still
// holds). The watermark must not pass b0 or b1 either: lane B may still give them up. The span
// trimmed at the range's start is counted once, also after the scheduled pass finds it.
//
// Before the fix the trimmed path replayed the rest of the range with ReplayRange (every lane):
// b0 and b1 were applied by the reconciler; the "trimmed while it was read" path lost the lane
// with the range's first record and replayed every lane too.
func TestS3ObjectReplaysOnlyItsLane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// expireAfter: 0 trims a0 before the replay looks; n trims it once n GetShardIterator
		// calls are answered (1: the look found a0 held, the read then finds it trimmed).
		expireAfter int
	}{
		{"trimmed before the look", 0},
		{"trimmed while it was read", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, 1)
			p := s.retentionProxy()
			kA, kB := twoLaneKeys(t)
			one := func(tag, key string) put { return s.putN(1, tag, func(int) string { return key }, nil)[0] }
			a0 := one("a0", kA)
			time.Sleep(10 * time.Millisecond)
			cut := time.Now()
			time.Sleep(10 * time.Millisecond)
			b0, a1, b1, a2 := one("b0", kB), one("a1", kA), one("b1", kB), one("a2", kA)
			given := []put{a0, a1, a2}
			objects := stacktest.S3(t)
			bucket := stacktest.Bucket(t)
			note, _ := failureObject(t, objects, bucket, s.stream, given)

			kin := &expireOnIterator{Client: s.kin, p: p, cut: cut, after: tc.expireAfter}
			if tc.expireAfter == 0 {
				p.ExpireBefore(cut)
			}
			rec := newRecorder()
			var logs logBuffer
			r, err := New(kin, s.cps, s.pipeline(rec.process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: 30 * time.Minute, ReadInterval: time.Millisecond},
				WithClock(later), WithLogger(logs.logger()))
			if err != nil {
				t.Fatal(err)
			}
			h := NewHandler(r, nil, logs.logger(), WithFailureBucket(objects, bucket), WithLanes(2))
			resp := h.HandleSQS(context.Background(), sqsEvent(note))
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("failures %v; errors %v", resp.BatchItemFailures, logs.lines("ERROR"))
			}
			if tc.expireAfter > 0 && kin.calls < tc.expireAfter {
				t.Fatalf("%d GetShardIterator calls: the stream never trimmed a0 during the replay", kin.calls)
			}
			if st, _, err := r.trimmedAt(context.Background(), a0.shard, a0.seq); err != nil || !st {
				t.Fatalf("a0 not trimmed after the replay (%v): the test proves nothing", err)
			}
			for _, b := range []put{b0, b1} {
				if n := rec.counts()[b.id()]; n != 0 {
					t.Errorf("lane B's %s (%s) replayed %d times by the reconciler, want 0: it is lane B's to process", b.data, b.seq, n)
				}
			}
			checkOnce(t, "object's lane", rec.counts(), idsOf(given))
			if wm := s.state(a0.shard).Watermark; wm != "" && !seqLess(wm, b0.seq) {
				t.Errorf("watermark %s passed lane B's unprocessed b0 %s", wm, b0.seq)
			}
			if n := s.state(a0.shard).LostToRetention; n != 1 {
				t.Errorf("LostToRetention %d, want 1 (a0's span expired unverified)", n)
			}

			// Lane B then processes its own records; a scheduled pass finds everything accounted
			// for and does not count the span again.
			cons := s.pipeline(rec.process, 3)
			s.consume(cons, []put{b0, b1})
			if _, err := s.reconciler(s.pipeline(rec.process, 3), Config{}).Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkOnce(t, "after lane B and a pass", rec.counts(), idsOf([]put{a0, b0, a1, b1, a2}))
			if n := s.state(a0.shard).LostToRetention; n != 1 {
				t.Errorf("LostToRetention %d after the scheduled pass, want 1", n)
			}
			order := rec.delivered()
			if i, j := slices.Index(order, b0.id()), slices.Index(order, b1.id()); i > j {
				t.Errorf("key %s: b1 applied before b0 (%v)", kB, order)
			}
		})
	}
}
