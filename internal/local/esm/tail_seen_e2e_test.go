package esm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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

// The last batch of a quiet shard fails in the consumer until the mapping gives it up, and the
// on-failure message is not delivered: no later batch moves the checkpoint mirror past it, so
// its records lie past the checkpoint, where the tail rule waits MaximumRecordAge + settle
// (hours) before replaying. The consumer has had them in hand (failed attempts and markers in
// the ledger), so the first scheduled pass after they settle replays them.
func TestSeenTailOfAQuietShardReplayedAfterSettle(t *testing.T) {
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
	var mu sync.Mutex
	done := map[string]int{}
	var failing atomic.Bool
	failing.Store(true)
	last := q[15:]
	process := func(_ context.Context, r pipeline.Record) error {
		if failing.Load() && slices.Contains(last, r.ID.Seq) {
			return errors.New("downstream refuses the record")
		}
		mu.Lock()
		defer mu.Unlock()
		done[r.ID.Seq]++
		return nil
	}
	newPipeline := func() *pipeline.Pipeline {
		p, err := pipeline.New(pipeline.DedupeLedger{L: ledger}, pipeline.CheckpointStore{S: cps}, parker, process,
			pipeline.Config{MaxRecordAttempts: 5, MaxConcurrency: 4, DeadlineMargin: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const group = "g"
	h := consumer.NewHandler(newPipeline(), group, slog.New(slog.DiscardHandler))
	r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
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
	if ev := log.all(EventRetriesExhausted); len(ev) != 1 || ev[0].FirstSeq != q[15] || ev[0].LastSeq != q[19] {
		t.Fatalf("given up %+v, want the last batch %s..%s", ev, q[15], q[19])
	}
	st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard})
	if err != nil {
		t.Fatal(err)
	}
	if st.Checkpoint != q[14] {
		t.Fatalf("checkpoint mirror %s, want %s (the batch before the given-up one)", st.Checkpoint, q[14])
	}
	failing.Store(false) // downstream is back

	// The scheduled pass two minutes later: past the settle window (one minute), hours before
	// the tail rule (MaximumRecordAge 6 h + settle).
	rec, err := reconcile.New(s.kin, cps, newPipeline(), reconcile.Config{Group: group, Stream: s.name,
		SettleAfter: time.Minute, MaxRecordAge: 6 * time.Hour, ReadInterval: time.Millisecond},
		reconcile.WithClock(func() time.Time { return time.Now().Add(2 * time.Minute) }), reconcile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := rec.Run(ctx)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if rep.TailReplayed != len(last) {
		t.Errorf("tail replayed %d, want the %d records of the given-up batch", rep.TailReplayed, len(last))
	}
	mu.Lock()
	defer mu.Unlock()
	for i, seq := range q {
		if done[seq] != 1 {
			t.Errorf("record %d (%s) processed %d times, want once", i, seq, done[seq])
		}
	}
	if st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard}); err != nil || st.Watermark != q[19] {
		t.Errorf("verified watermark %s (%v), want %s", st.Watermark, err, q[19])
	}
}
