package reconcile

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// The consumer writes its ledger entry and its checkpoint advance in parallel (two sequential
// round trips per batch). These tests make the crash between the two writes real and show that
// a checkpoint ahead of the ledger causes a replay, never a skip (docs/consumer.md, "Two round
// trips").

// entryPuts matches the ledger entry writes (sort key "...#B#nonce#part"), not the in-flight
// marker ("...#M#nonce"), whatever operation carries them.
func entryPuts(r *faultproxy.Request) bool {
	switch r.Action() {
	case "PutItem", "BatchWriteItem":
		return bytes.Contains(r.Body, []byte("#B#"))
	}
	return false
}

// dynamoThroughProxy is a DynamoDB client through endpoint (a fault proxy) with few, fast retries.
func dynamoThroughProxy(t *testing.T, endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(stacktest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 2
			so.MaxBackoff = 20 * time.Millisecond
		})
	})
}

// TestCheckpointAheadOfLostLedgerEntryIsReplayed: the consumer's checkpoint advance lands and
// its ledger entry never reaches DynamoDB (the fault proxy drops every entry write: a crash
// between the two writes, as far as the table can tell). The batch fails with ErrLedger; if the
// mapping then gives up on it, the reconciler finds the checkpoint-covered records absent from
// the ledger, judges them gaps and replays each once.
func TestCheckpointAheadOfLostLedgerEntryIsReplayed(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetRules(faultproxy.Rule{Match: entryPuts, Fault: faultproxy.DropBeforeForward, Rate: 1})

	table := stacktest.LedgerTable(t)
	quiet := dedupe.WithLogger(slog.New(slog.DiscardHandler))
	lossy := pipeline.DedupeLedger{L: dedupe.New(dynamoThroughProxy(t, proxy.URL()), table, quiet)}
	good := pipeline.DedupeLedger{L: dedupe.New(stacktest.DynamoDB(t), table, quiet)}

	recs := s.putN(10, "ckpt-ahead", keyMod(3), nil)
	shard := s.shard(recs[0].shard)
	first, last := recs[0].seq, recs[len(recs)-1].seq
	consumer := newRecorder()
	p1, err := pipeline.New(lossy, pipeline.CheckpointStore{S: s.cps}, s.parker, consumer.process,
		pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4, DeadlineMargin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
	for _, r := range recs {
		b.Records = append(b.Records, pipeline.Record{ID: r.id(), PartitionKey: r.key, Data: r.data, ArrivalTime: time.Now()})
	}
	res, err := p1.Run(context.Background(), b)
	if !errors.Is(err, pipeline.ErrLedger) {
		t.Fatalf("Run: %v, want ErrLedger", err)
	}
	if proxy.Stats().Total().Faults() == 0 {
		t.Fatal("the proxy dropped nothing")
	}
	// The fault is real: the checkpoint is past every record, the ledger holds none of them.
	if !res.CheckpointAdvanced || s.state(shard.ShardID).Checkpoint != last {
		t.Fatalf("checkpoint %q (advanced %v), want it on the last record %s", s.state(shard.ShardID).Checkpoint, res.CheckpointAdvanced, last)
	}
	view, err := good.Lookup(context.Background(), shard, first, last)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if view.Done(r.id()) {
			t.Fatalf("record %s in the ledger although its entry was dropped", r.seq)
		}
	}
	checkOnce(t, "consumer", consumer.counts(), idsOf(recs))

	// The mapping gave up (no retry here): the reconciler replays the records behind the
	// checkpoint that the ledger lacks.
	replays := newRecorder()
	p2, err := pipeline.New(good, pipeline.CheckpointStore{S: s.cps}, s.parker, replays.process,
		pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4, DeadlineMargin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.reconciler(p2, Config{}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsDetected != len(recs) || rep.GapsReplayed != len(recs) {
		t.Errorf("gaps detected %d, replayed %d; want %d each", rep.GapsDetected, rep.GapsReplayed, len(recs))
	}
	checkOnce(t, "reconciler", replays.counts(), idsOf(recs))
	if st := s.state(shard.ShardID); st.Watermark != last {
		t.Errorf("watermark %q, want %s", st.Watermark, last)
	}
}

// heldEntryLedger holds every Record call until its gate is closed: a slow ledger write.
type heldEntryLedger struct {
	pipeline.DedupeLedger
	entered chan struct{}
	gate    chan struct{}
}

func (g heldEntryLedger) Record(ctx context.Context, shard recordid.Shard, e pipeline.Entry) error {
	close(g.entered)
	<-g.gate
	return g.DedupeLedger.Record(ctx, shard, e)
}

// TestSlowLedgerEntryBehindCheckpointIsNotReplayed: the checkpoint has landed while the ledger
// entry is still on its way, and a reconciler pass reads the checkpoint in between with the
// records already past its settle window (a consumer lagging by more than SETTLE_AFTER). The
// consumer's in-flight marker, live until the entry completes it, holds the records: the pass
// replays none of them and leaves the watermark behind them. Once the entry lands, the next
// pass verifies them without a replay: every record was processed exactly once.
func TestSlowLedgerEntryBehindCheckpointIsNotReplayed(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	recs := s.putN(10, "slow-entry", keyMod(3), nil)
	shard := s.shard(recs[0].shard)
	last := recs[len(recs)-1].seq
	gated := heldEntryLedger{DedupeLedger: pipeline.DedupeLedger{L: s.ledger}, entered: make(chan struct{}), gate: make(chan struct{})}
	processed := newRecorder()
	p1, err := pipeline.New(gated, pipeline.CheckpointStore{S: s.cps}, s.parker, processed.process,
		pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4, DeadlineMargin: time.Second},
		pipeline.WithMarkerLease(time.Minute)) // the pass below runs well inside the lease
	if err != nil {
		t.Fatal(err)
	}
	b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
	for _, r := range recs {
		b.Records = append(b.Records, pipeline.Record{ID: r.id(), PartitionKey: r.key, Data: r.data, ArrivalTime: time.Now()})
	}
	type ran struct {
		res pipeline.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := p1.Run(context.Background(), b)
		done <- ran{res, err}
	}()
	<-gated.entered
	// The checkpoint goes out beside the entry: wait until it is stored (bounded).
	for i := 0; ; i++ {
		st, err := s.cps.Get(context.Background(), shard)
		if err == nil && st.Checkpoint == last {
			break
		}
		if i == 500 {
			t.Fatalf("checkpoint never reached the last record while the entry was held: %+v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	p2 := s.pipeline(processed.process, 3) // the same business logic: a replay would count twice
	r := s.reconciler(p2, Config{})
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != 0 {
		t.Errorf("pass during the slow write replayed %d records, want 0 (held by the live marker)", rep.GapsReplayed)
	}
	if st := s.state(shard.ShardID); st.Watermark == last {
		t.Errorf("watermark passed records whose entry was not written yet")
	}

	close(gated.gate)
	out := <-done
	if out.err != nil || !out.res.LedgerWritten || !out.res.CheckpointAdvanced {
		t.Fatalf("consumer run: %+v %v", out.res, out.err)
	}
	rep, err = r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != 0 {
		t.Errorf("pass after the write replayed %d records, want 0", rep.GapsReplayed)
	}
	if st := s.state(shard.ShardID); st.Watermark != last {
		t.Errorf("watermark %q, want %s", st.Watermark, last)
	}
	checkOnce(t, "all passes", processed.counts(), idsOf(recs))
}
