package esm

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestFilteredRecordsAreNotGaps: a mapping with FilterCriteria drops a third of the records
// before the consumer sees them. The scheduled reconciler pass, given the same pattern, counts
// them as accounted for: no gap is reported, no filtered record is ever processed, every other
// record is processed once, and the verified watermark reaches the end of each shard. Without
// the filter the reconciler would take each filtered record for a gap and replay it through
// Process.
func TestFilteredRecordsAreNotGaps(t *testing.T) {
	t.Parallel()
	const pattern = `{"data": {"kind": ["order"]}}`
	s := newStream(t, 2)
	var puts []putResult
	isNoise := map[recordid.ID]bool{}
	for i := range 300 {
		kind := "order"
		if i%3 == 2 {
			kind = "noise"
		}
		p := s.put(t, fmt.Sprintf("key-%d", i%12), fmt.Appendf(nil, `{"kind":%q,"n":%d}`, kind, i))
		puts = append(puts, p)
		isNoise[recordid.ID{ShardID: p.shard, Seq: p.seq}] = kind == "noise"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	ddb, sqsc := stacktest.DynamoDB(t), stacktest.SQS(t)
	cps := checkpoint.New(ddb, stacktest.CheckpointTable(t))
	ledger := dedupe.New(ddb, stacktest.LedgerTable(t), dedupe.WithLogger(slog.New(slog.DiscardHandler)))
	parker := park.New(sqsc, stacktest.Queue(t, "parked", false))
	done := &processed{n: map[recordid.ID]int{}}
	newPipeline := func() *pipeline.Pipeline {
		p, err := pipeline.New(pipeline.DedupeLedger{L: ledger}, pipeline.CheckpointStore{S: cps}, parker, done.process,
			pipeline.Config{MaxRecordAttempts: 5, MaxConcurrency: 4, DeadlineMargin: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	flt := filter.MustParse(pattern)
	const group = "g"
	h := consumer.NewHandler(newPipeline(), group, slog.New(slog.DiscardHandler), consumer.WithFilter(flt))
	r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
		resp, err := h.HandleJSON(ctx, inv.payload)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	})
	cfg := baseConfig(s)
	cfg.BatchSize = 25
	cfg.ParallelizationFactor = 2
	cfg.FunctionTimeout = e2eFunctionTimeout
	cfg.ReportBatchItemFailures = true
	cfg.FilterCriteria = []string{pattern}
	drain(t, s, nil, r, cfg)

	// The scheduled pass, an hour later (past any settle window), then one past the tail bound
	// (reconcile.TailAfter): filtered records after a shard's last delivered record lie past the
	// checkpoint mirror (the consumer never saw them) and are verified as the shard's tail.
	noise := 0
	for _, n := range isNoise {
		if n {
			noise++
		}
	}
	filteredRuns := 0
	for _, ahead := range []time.Duration{time.Hour, reconcile.TailAfter(0, time.Minute) + time.Hour} {
		rec, err := reconcile.New(s.kin, cps, newPipeline(), reconcile.Config{Group: group, Stream: s.name,
			SettleAfter: time.Minute, ReadInterval: time.Millisecond, Filter: flt},
			reconcile.WithClock(func() time.Time { return time.Now().Add(ahead) }), reconcile.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := rec.Run(ctx)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		if rep.GapsDetected != 0 || rep.GapsReplayed != 0 {
			t.Errorf("pass %s ahead: %d gaps (%d replayed), want none: filtered records are not gaps", ahead, rep.GapsDetected, rep.GapsReplayed)
		}
		filteredRuns += rep.Filtered
	}
	if filteredRuns != noise {
		t.Errorf("reconciler passes counted %d filtered records, want %d", filteredRuns, noise)
	}
	for i, p := range puts {
		id := recordid.ID{ShardID: p.shard, Seq: p.seq}
		want := 1
		if isNoise[id] {
			want = 0
		}
		if n := done.count(p.shard, p.seq); n != want {
			t.Errorf("record %d (%s, noise=%v) processed %d times, want %d", i, p.seq, isNoise[id], n, want)
		}
	}
	last := map[string]string{}
	for _, p := range puts {
		last[p.shard] = p.seq
	}
	var filtered int64
	for shard, seq := range last {
		st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard})
		if err != nil {
			t.Fatal(err)
		}
		filtered += st.Filtered
		if st.Watermark != seq {
			t.Errorf("shard %s: verified watermark %s, want %s", shard, st.Watermark, seq)
		}
	}
	if filtered != int64(noise) {
		t.Errorf("checkpoint items count %d filtered records, want %d", filtered, noise)
	}
}
