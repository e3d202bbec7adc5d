package esm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// processed counts Process calls per record.
type processed struct {
	mu sync.Mutex
	n  map[recordid.ID]int
}

func (p *processed) process(_ context.Context, r pipeline.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n[r.ID]++
	return nil
}

func (p *processed) count(shard, seq string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[recordid.ID{ShardID: shard, Seq: seq}]
}

// The mapping gives up a batch (its invocations crash), the OnFailure delivery fails
// (DestinationDeliveryFailures), so the failure queue never hears of it: the scheduled
// reconciler pass still replays every record of it, because it reads the stream after the
// verified watermark up to the checkpoint mirror, which later batches moved past the range.
func TestDeliveryFailureIsCaughtByTheScheduledPass(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	puts := s.putN(t, 20, "k0", "k1", "k2", "k3")
	q, shard := seqsOf(puts), puts[0].shard
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	const group = "g"
	h := consumer.NewHandler(newPipeline(), group, slog.New(slog.DiscardHandler))
	// The function's runtime crashes on every invocation holding records 5..9 (before it does
	// anything); every other invocation runs the real consumer.
	crashes := q[5:10]
	r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
		if slices.ContainsFunc(inv.seqs(), func(seq string) bool { return slices.Contains(crashes, seq) }) {
			return nil, errors.New("Runtime.ExitError")
		}
		resp, err := h.HandleJSON(ctx, inv.payload)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	})
	fq := newFailureQueue(t)
	cfg := baseConfig(s)
	cfg.BatchSize = 5
	cfg.MaximumRetryAttempts = 1
	cfg.FunctionTimeout = e2eFunctionTimeout
	cfg.ReportBatchItemFailures = true
	cfg.OnFailureQueueURL = fq.url
	m, log := drain(t, s, fq.sqs, r, cfg, WithDestinationFault(func(onfailure.Message) error { return errors.New("AccessDenied") }))

	if n := m.DestinationDeliveryFailures(); n != 1 {
		t.Fatalf("DestinationDeliveryFailures %d, want 1", n)
	}
	if ev := log.all(EventDestinationDeliveryFailed); len(ev) != 1 || ev[0].FirstSeq != q[5] || ev[0].LastSeq != q[9] {
		t.Fatalf("delivery-failed events %+v, want one for %s..%s", ev, q[5], q[9])
	}
	fq.receive(t, 0) // the failure queue never hears of the range
	for _, seq := range crashes {
		if n := done.count(shard, seq); n != 0 {
			t.Fatalf("record %s processed %d times by the mapping, want 0 (given up)", seq, n)
		}
	}
	st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard})
	if err != nil {
		t.Fatal(err)
	}
	if st.Checkpoint != q[19] {
		t.Fatalf("checkpoint mirror %s, want %s (later batches succeeded)", st.Checkpoint, q[19])
	}

	// The scheduled pass, an hour later (past any settle window).
	rec, err := reconcile.New(s.kin, cps, newPipeline(), reconcile.Config{Group: group, Stream: s.name,
		SettleAfter: time.Minute, ReadInterval: time.Millisecond},
		reconcile.WithClock(func() time.Time { return time.Now().Add(time.Hour) }), reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rec.Run(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if rep.GapsReplayed != len(crashes) {
		t.Errorf("gaps replayed %d, want %d", rep.GapsReplayed, len(crashes))
	}
	for i, seq := range q {
		if n := done.count(shard, seq); n != 1 {
			t.Errorf("record %d (%s) processed %d times, want once", i, seq, n)
		}
	}
	if st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard}); err != nil || st.Watermark != q[19] {
		t.Errorf("verified watermark %s (%v), want %s", st.Watermark, err, q[19])
	}
}
