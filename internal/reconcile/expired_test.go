package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// memCensus is a Census taken from memKinesis shards before any trim: every record each shard
// held. TEST-ONLY.
type memCensus struct {
	ids map[string][]recordid.ID
	// gaps, when set, leaves the census without that shard's records in it (ok false).
	missing bool
}

func censusOf(shards ...*memShard) *memCensus {
	c := &memCensus{ids: map[string][]recordid.ID{}}
	for _, sh := range shards {
		for _, rec := range sh.recs {
			c.ids[sh.id] = append(c.ids[sh.id], recordid.ID{ShardID: sh.id, Seq: aws.ToString(rec.SequenceNumber)})
		}
	}
	return c
}

func (c *memCensus) Records(_ context.Context, shard recordid.Shard, after, before string) ([]recordid.ID, bool, error) {
	if c.missing {
		return nil, false, nil
	}
	var out []recordid.ID
	for _, id := range c.ids[shard.ShardID] {
		if (after == "" || seqnum.Compare(id.Seq, after) > 0) && seqnum.Compare(id.Seq, before) < 0 {
			out = append(out, id)
		}
	}
	return out, true, nil
}

// farBehind is a shard whose reconciler fell behind: records 0-19 arrived long ago, the
// consumer's checkpoint is on 19, the verified watermark on 4, and retention has trimmed 0-14
// before any pass verified 5-14. The census is taken before the trim.
func farBehind() (*memShard, *memCensus) {
	sh := (&memShard{id: "shardId-000000000000"}).addRecords(0, 20, time.Now().Add(-20*time.Hour), key3)
	c := censusOf(sh)
	sh.trimmed = 15
	return sh, c
}

// TestExpiredSpanClassified: a span that expired before the reconciler verified it is
// ExpiredUnverified only when the census names every record it held and the ledger shows each
// one done; otherwise it stays LostToRetention, whatever part of it was done.
func TestExpiredSpanClassified(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name       string
		done       []int // records of the expired span 5-14 the consumer processed
		census     bool  // a census is configured
		missing    bool  // the census does not cover the span
		wantExpire int
		wantLost   int
	}{
		{name: "processed records trimmed before verification", done: span(5, 14), census: true, wantExpire: 1},
		{name: "unprocessed records trimmed", census: true, wantLost: 1},
		{name: "only some records processed", done: []int{5, 6, 7, 8, 10, 11, 12, 13, 14}, census: true, wantLost: 1},
		{name: "one done record in the span", done: []int{5}, census: true, wantLost: 1},
		{name: "all processed but no census", done: span(5, 14), wantLost: 1},
		{name: "all processed, census without the span", done: span(5, 14), census: true, missing: true, wantLost: 1},
	}
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			sh, c := farBehind()
			c.missing = tt.missing
			var opts []Option
			if tt.census {
				opts = append(opts, WithCensus(c))
			}
			u := newUnit(t, newMemKinesis(sh), Config{}, opts...)
			u.cps.Set(ushard(sh.id), fakeSeq(19), fakeSeq(4))
			u.markDone(t, sh.id, span(0, 4)...)
			if len(tt.done) > 0 {
				u.markDone(t, sh.id, tt.done...)
			}
			u.markDone(t, sh.id, span(15, 19)...)
			rep, err := u.r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st := u.cps.State(sh.id)
			if rep.ExpiredUnverified != tt.wantExpire || rep.LostToRetention != tt.wantLost {
				t.Errorf("pass: ExpiredUnverified %d LostToRetention %d, want %d and %d", rep.ExpiredUnverified, rep.LostToRetention, tt.wantExpire, tt.wantLost)
			}
			if st.ExpiredUnverified != int64(tt.wantExpire) || st.LostToRetention != int64(tt.wantLost) || st.Watermark != fakeSeq(19) {
				t.Errorf("item: expiredUnverified %d lostToRetention %d watermark %s, want %d, %d, %s",
					st.ExpiredUnverified, st.LostToRetention, st.Watermark, tt.wantExpire, tt.wantLost, fakeSeq(19))
			}
			// The span is counted once: the next pass finds nothing expired.
			again, err := u.r.Run(context.Background())
			if err != nil || again.ExpiredUnverified+again.LostToRetention != 0 {
				t.Errorf("second pass: expired %d lost %d err %v", again.ExpiredUnverified, again.LostToRetention, err)
			}
		})
	}
}

// TestExpiredUnverifiedInSummaryAndMetrics: the scheduled pass's JSON answer and its EMF line
// carry ExpiredUnverified apart from LostToRetention.
func TestExpiredUnverifiedInSummaryAndMetrics(t *testing.T) {
	t.Parallel()
	sh, c := farBehind()
	u := newUnit(t, newMemKinesis(sh), Config{}, WithCensus(c))
	u.cps.Set(ushard(sh.id), fakeSeq(19), fakeSeq(4))
	u.markDone(t, sh.id, span(0, 19)...)
	var buf bytes.Buffer
	h := NewHandler(u.r, metrics.New(&buf, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: ugroup}}), discard())
	sum, err := h.HandleSchedule(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(sum)
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got["expiredUnverified"] != 1.0 || got["lostToRetention"] != 0.0 {
		t.Errorf("summary %s: want expiredUnverified 1, lostToRetention 0", raw)
	}
	var last metrics.Line
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		if last, err = metrics.Parse(sc.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if last.Values[MetricExpiredUnverified] != 1 || last.Values["LostToRetention"] != 0 {
		t.Errorf("run line %v: want ExpiredUnverified 1, LostToRetention 0", last.Values)
	}
}

// TestDeferredShardReportsLag: a shard the pass does not reach (its budget is spent before it)
// still reports its verified lag: from what the last walk found, or, on a reconciler that never
// walked it, from the time its watermark last moved.
func TestDeferredShardReportsLag(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := now
	sh := (&memShard{id: "shardId-000000000000"}).addRecords(0, 6, now.Add(-time.Minute), key3)
	u := newUnit(t, newMemKinesis(sh), Config{}, WithClock(func() time.Time { return clock }))
	u.cps.Set(ushard(sh.id), fakeSeq(5), "")
	if rep, err := u.r.Run(context.Background()); err != nil || !rep.Shards[0].Complete {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	spent, cancel := context.WithCancel(context.Background())
	cancel()

	clock = now.Add(10 * time.Minute)
	rep, _ := u.r.Run(spent)
	if len(rep.Shards) != 1 || !rep.Shards[0].Deferred {
		t.Fatalf("second pass %+v: want the shard deferred", rep)
	}
	lags := shardLags(rep, clock)
	if len(lags) != 1 || lags[0].lag != 10*time.Minute || rep.VerifiedLag != 10*time.Minute {
		t.Errorf("deferred shard after a caught-up walk 10 minutes ago: lags %v, pass lag %s; want 10m each", lags, rep.VerifiedLag)
	}

	// A cold reconciler (no walk of its own) measures from the stored watermark's last move.
	cold := newUnit(t, newMemKinesis(sh), Config{}, WithClock(func() time.Time { return clock }))
	cold.cps.Set(ushard(sh.id), fakeSeq(5), fakeSeq(2))
	cold.cps.Edit(ushard(sh.id), func(st *checkpoint.State) { st.WatermarkAt = now.Add(-time.Hour) })
	rep, _ = cold.r.Run(spent)
	if lags := shardLags(rep, clock); len(lags) != 1 || lags[0].lag != time.Hour+10*time.Minute {
		t.Errorf("cold reconciler, deferred shard: lags %v, want 1h10m", lags)
	}
	var buf bytes.Buffer
	h := &Handler{r: cold.r, log: discard(), emit: metrics.New(&buf, metrics.Namespace, []metrics.Dimension{{Name: metrics.DimensionGroup, Value: ugroup}})}
	h.emitShardLags(rep)
	if l, err := metrics.Parse(bytes.TrimSpace(buf.Bytes())); err != nil || l.Dimensions[metrics.DimensionShard] != sh.id || l.Values[MetricVerifiedLag] != (time.Hour+10*time.Minute).Seconds() {
		t.Errorf("per-shard line %q (%v): want the deferred shard's lag", buf.String(), err)
	}
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
