package reconcile

import (
	"context"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/retention"
)

// trimmed puts the stack's Kinesis client behind a retention proxy (internal/local/retention): the
// records put before expire() is called are trimmed from the stream for every reader.
func (s *stack) trimmed() (expire func()) {
	s.t.Helper()
	p := s.retentionProxy()
	return func() {
		// Arrival times have millisecond resolution: keep the next records clear of the horizon.
		time.Sleep(10 * time.Millisecond)
		p.ExpireBefore(time.Now())
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *stack) retentionProxy() *retention.Proxy {
	s.t.Helper()
	p, err := retention.Start(os.Getenv("AWS_ENDPOINT_URL_KINESIS"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = p.Close() })
	s.kin = kinesis.NewFromConfig(stacktest.Config(s.t), func(o *kinesis.Options) { o.BaseEndpoint = aws.String(p.URL()) })
	return p
}

// ddbFaults returns a checkpoint store whose DynamoDB calls go through a fault proxy.
func (s *stack) ddbFaults() (*checkpoint.Store, *faultproxy.Proxy) {
	s.t.Helper()
	p, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = p.Close() })
	client := dynamodb.NewFromConfig(stacktest.Config(s.t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 3
			so.MaxBackoff = 20 * time.Millisecond
			so.RateLimiter = ratelimit.None
		})
	})
	return checkpoint.New(client, s.cpTable), p
}

func bodyHas(op string, parts ...string) func(*faultproxy.Request) bool {
	return func(r *faultproxy.Request) bool {
		if r.Operation != op {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(string(r.Body), p) {
				return false
			}
		}
		return true
	}
}

const opUpdateItem = "DynamoDB_20120810.UpdateItem"

// verifiedThenTrimmed builds the usual expiry: records 0-4 consumed and verified (watermark on
// 4), records 5-14 never consumed, then the trim horizon passes 0-14 and records 15-19 are put
// and consumed (checkpoint on 19). Records 5-14 are lost to retention: one span, (4, 15).
func verifiedThenTrimmed(t *testing.T, s *stack) (all []put) {
	t.Helper()
	expire := s.trimmed()
	cons := s.pipeline(newRecorder().process, 3)
	all = s.putN(5, "verified", keyMod(3), nil)
	s.consume(cons, all)
	if rep, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil || s.state(all[0].shard).Watermark != all[4].seq {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	all = append(all, s.putN(10, "lost", keyMod(3), nil)...)
	expire()
	late := s.putN(5, "late", keyMod(3), nil)
	s.consume(cons, late)
	return append(all, late...)
}

// TestRetentionLossThroughTrimHorizon: the stream really trims (through the
// retention proxy): the span is counted once, with the watermark advance that passes it.
func TestRetentionLossThroughTrimHorizon(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all := verifiedThenTrimmed(t, s)
	shardID := all[0].shard
	var logs logBuffer
	rec := newRecorder()
	r := s.reconciler(s.pipeline(rec.process, 3), Config{}, WithLogger(logs.logger()))
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.LostToRetention != 1 || len(rec.delivered()) != 0 {
		t.Errorf("lost %d, replayed %d; want 1 span and nothing to replay", rep.LostToRetention, len(rec.delivered()))
	}
	if st := s.state(shardID); st.LostToRetention != 1 || st.Watermark != all[19].seq {
		t.Errorf("item: lostToRetention %d watermark %s, want 1 and %s", st.LostToRetention, st.Watermark, all[19].seq)
	}
	found := false
	for _, l := range logs.lines("ERROR") {
		found = found || (l["lost_after_sequence_number"] == all[4].seq && l["first_sequence_number_held"] == all[15].seq)
	}
	if !found {
		t.Errorf("no ERROR line naming the span (%s, %s)", all[4].seq, all[15].seq)
	}
	if rep, err := r.Run(context.Background()); err != nil || rep.LostToRetention != 0 {
		t.Errorf("second run: lost %d, err %v", rep.LostToRetention, err)
	}
}

// TestRetentionCountSurvivesACrash: the counter write is cut off (as if the
// reconciler died after moving the watermark). The watermark must never be past the span while
// the count is missing; the next run counts it.
func TestRetentionCountSurvivesACrash(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all := verifiedThenTrimmed(t, s)
	shardID := all[0].shard
	cps, p := s.ddbFaults()
	// Every write of the lostToRetention attribute fails: the run "dies" before the count lands.
	p.SetRules(faultproxy.Rule{Match: bodyHas(opUpdateItem, `"lostToRetention"`), Fault: faultproxy.DropBeforeForward, Rate: 1})
	r, err := New(s.kin, cps, s.pipeline(newRecorder().process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute, ReadInterval: time.Millisecond},
		WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = r.Run(context.Background())
	if st := s.state(shardID); st.Watermark != all[4].seq && st.LostToRetention != 1 {
		t.Fatalf("watermark %s passed the lost span (4, 15) with lostToRetention %d: the count is lost", st.Watermark, st.LostToRetention)
	}
	p.SetRules()
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := s.state(shardID); st.LostToRetention != 1 || st.Watermark != all[19].seq || rep.LostToRetention != 1 {
		t.Errorf("after recovery: lostToRetention %d (run %d) watermark %s, want 1 and %s", st.LostToRetention, rep.LostToRetention, st.Watermark, all[19].seq)
	}
}

// TestRetentionCountSurvivesALostResponse: dynamoDB applies the watermark
// advance that passes the span, its response is lost, the SDK's retry fails the condition.
func TestRetentionCountSurvivesALostResponse(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all := verifiedThenTrimmed(t, s)
	shardID := all[0].shard
	cps, p := s.ddbFaults()
	// The first watermark write of the run is the one passing the span.
	p.SetRules(faultproxy.Rule{Match: bodyHas(opUpdateItem, `"watermarkEnc"`), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1})
	r, err := New(s.kin, cps, s.pipeline(newRecorder().process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute, ReadInterval: time.Millisecond},
		WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Op(opUpdateItem).DroppedAfter; got != 1 {
		t.Fatalf("%d responses dropped, want 1", got)
	}
	if st := s.state(shardID); rep.LostToRetention != 1 || st.LostToRetention != 1 || st.Watermark != all[19].seq {
		t.Errorf("LostToRetention %d (item %d), watermark %s; want 1, 1, %s", rep.LostToRetention, st.LostToRetention, st.Watermark, all[19].seq)
	}
}

// TestRetentionLossOnAShardNeverVerified: no watermark yet: records trimmed
// before anyone read them are counted, from the shard's own starting sequence number.
func TestRetentionLossOnAShardNeverVerified(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	expire := s.trimmed()
	lost := s.putN(10, "lost", keyMod(3), nil)
	expire()
	late := s.putN(5, "late", keyMod(3), nil)
	s.consume(s.pipeline(newRecorder().process, 3), late)
	rec := newRecorder()
	rep, err := s.reconciler(s.pipeline(rec.process, 3), Config{}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := s.state(lost[0].shard); rep.LostToRetention != 1 || st.LostToRetention != 1 || st.Watermark != late[4].seq {
		t.Errorf("LostToRetention %d (item %d), watermark %s; want 1, 1, %s", rep.LostToRetention, st.LostToRetention, st.Watermark, late[4].seq)
	}
	// Nothing trimmed: a shard read from its start counts nothing.
	s2 := newStack(t, 1)
	recs := s2.putN(5, "kept", keyMod(3), nil)
	s2.consume(s2.pipeline(newRecorder().process, 3), recs)
	if rep, err := s2.reconciler(s2.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil || rep.LostToRetention != 0 {
		t.Errorf("untrimmed shard: lost %d, err %v", rep.LostToRetention, err)
	}
}

// TestReplayRangeBelowTheShardIsNoLoss: `gapless replay --from 1 --to 2` on a
// fresh stream: the range lies below the shard's first sequence number, nothing was there.
func TestReplayRangeBelowTheShardIsNoLoss(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	recs := s.putN(3, "fresh", keyMod(3), nil)
	shardID := recs[0].shard
	rec := newRecorder()
	r := s.reconciler(s.pipeline(rec.process, 3), Config{})
	for _, rg := range [][2]string{{"1", "2"}, {"1", recs[1].seq}} {
		rep, err := r.ReplayRange(context.Background(), shardID, rg[0], rg[1])
		if err != nil {
			t.Fatal(err)
		}
		if rep.LostSpans != 0 || !rep.Accounted {
			t.Errorf("range %s..%s: lost %d accounted %v, want no loss, accounted", rg[0], rg[1], rep.LostSpans, rep.Accounted)
		}
	}
	st, err := s.cps.Get(context.Background(), s.shard(shardID))
	if err == nil && st.LostToRetention != 0 {
		t.Errorf("lostToRetention %d recorded on the item (status shows it forever)", st.LostToRetention)
	}
	checkOnce(t, "range from below the shard", rec.counts(), idsOf(recs[:2]))
}

// closedShard splits a one-shard stream holding 6 records that were never consumed; a child
// has a checkpoint, so the parent must be verified to its end.
func closedShard(t *testing.T, s *stack) (parent string, recs []put, p *retention.Proxy) {
	t.Helper()
	p = s.retentionProxy()
	parent = s.shardIDs()[0]
	recs = s.putN(6, "parent", keyMod(4), nil)
	if _, err := s.kin.SplitShard(context.Background(), splitInput(s.stream, parent, new(big.Int).Lsh(big.NewInt(1), 127))); err != nil {
		t.Fatal(err)
	}
	s.waitActive()
	child := s.putN(1, "child", keyMod(1), nil)
	s.consume(s.pipeline(newRecorder().process, 3), child)
	return parent, recs, p
}

// TestClosedShardEndsOnlyAtShardEnd: getRecords returns empty pages mid-shard
// (MillisBehindLatest 0); only a nil NextShardIterator ends a closed shard.
func TestClosedShardEndsOnlyAtShardEnd(t *testing.T) {
	t.Parallel()
	t.Run("scheduled pass", func(t *testing.T) {
		s := newStack(t, 1)
		parent, recs, p := closedShard(t, s)
		rec := newRecorder()
		p.StallPages(1)
		if _, err := s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 2}).Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkOnce(t, "closed parent", rec.counts(), idsOf(recs))
		if st := s.state(parent); !st.Closed {
			t.Errorf("parent not marked closed")
		}
	})
	t.Run("replay range", func(t *testing.T) {
		s := newStack(t, 1)
		parent, recs, p := closedShard(t, s)
		rec := newRecorder()
		r := s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 2})
		p.StallPages(1) // right after the first page
		rep, err := r.ReplayRange(context.Background(), parent, recs[0].seq, recs[5].seq)
		if err != nil || !rep.Accounted {
			t.Fatalf("accounted %v err %v", rep.Accounted, err)
		}
		checkOnce(t, "closed parent range", rec.counts(), idsOf(recs))
	})
}

// TestPartialCloseIsNoLoss: a closed shard verified to its end whose
// MarkClosed failed: the next pass must not read the refusal of its ending sequence number as
// records trimmed.
func TestPartialCloseIsNoLoss(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	trim := s.retentionProxy()
	parent := s.shardIDs()[0]
	recs := s.putN(5, "parent", keyMod(3), nil)
	time.Sleep(10 * time.Millisecond) // arrival times have millisecond resolution
	parentEnd := time.Now()
	time.Sleep(10 * time.Millisecond)
	if _, err := s.kin.SplitShard(context.Background(), splitInput(s.stream, parent, new(big.Int).Lsh(big.NewInt(1), 127))); err != nil {
		t.Fatal(err)
	}
	s.waitActive()
	cons := s.pipeline(newRecorder().process, 3)
	s.consume(cons, recs)
	s.consume(cons, s.putN(1, "child", keyMod(1), nil))
	cps, p := s.ddbFaults()
	p.SetRules(faultproxy.Rule{Match: bodyHas(opUpdateItem, `"closed"`), Fault: faultproxy.ServerError, Rate: 1})
	r, err := New(s.kin, cps, s.pipeline(newRecorder().process, 3), Config{Group: s.group, Stream: s.stream, SettleAfter: time.Minute, ReadInterval: time.Millisecond},
		WithClock(later))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background()); err == nil {
		t.Fatal("MarkClosed failed, yet the run reported no error")
	}
	st := s.state(parent)
	if st.Closed {
		t.Fatal("marked closed through a failing proxy")
	}
	t.Logf("watermark after the partial close %s (last record %s)", st.Watermark, recs[4].seq)
	// Then the whole parent expires: every record of it was verified, none is lost.
	trim.ExpireBefore(parentEnd)
	p.SetRules()
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := s.state(parent); rep.LostToRetention != 0 || st.LostToRetention != 0 || !st.Closed {
		t.Errorf("lost %d (item %d), closed %v; want no loss and the parent closed", rep.LostToRetention, st.LostToRetention, st.Closed)
	}
}
