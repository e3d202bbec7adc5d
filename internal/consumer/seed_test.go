package consumer

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestSeedInterleaving replays the seed report's race through the real handler and the real
// stores: two invocations (two execution environments, A and B) work on overlapping batches of
// one shard, interleaved as
//
//	A gets 1; B gets 1–3 while A works on 1; A commits 1;
//	A gets 2–5; B gets 4–6 while A works on 4 and 5; A commits 5.
//
// "gets" is the batch's ledger lookup (with its in-flight marker written beside it), "commits"
// its ledger and checkpoint writes. In the seed, the loser of the checkpoint race skipped its
// batch and records were lost. Before in-flight markers, gapless processed 1, 4 and 5 twice
// here (both invocations held them before either recorded them). Now B sees A's live marker:
// it skips what A holds (failed, not attempted: Lambda retries it), processes the rest, and its
// retries find A's records done. No record is lost, none is processed twice, and B's checkpoint
// write failure (fault proxy) changes nothing.
func TestSeedInterleaving(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const group = "seed"
	seq := func(i int) string { return fixtures.Seq(100 + i) } // records 1..6
	id := func(i int) recordid.ID { return recordid.ID{ShardID: fixtures.Shard, Seq: seq(i)} }
	batch := func(from, to int) []byte {
		var rs []rec
		for i := from; i <= to; i++ {
			rs = append(rs, rec{seq: seq(i), pk: fixtures.PartitionKeys[i%3], data: fixtures.OrderPayload(i)})
		}
		return mkEvent(t, rs...)
	}

	// B's checkpoint client goes through a proxy that fails its first UpdateItem (no retries).
	proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetRules(faultproxy.Rule{Match: faultproxy.Ops("DynamoDB_20120810.UpdateItem"), Fault: faultproxy.ServerError, Rate: 1, Count: 1})
	bCheckpoint := pipeline.CheckpointStore{S: checkpoint.New(dynamoVia(t, proxy.URL(), 1), s.cpTable)}

	shared := newProcessor() // one business logic: counts every delivery of every record
	a := s.rig(t, group, withProcessor(shared))
	b := s.rig(t, group, withProcessor(shared), withCheckpoint(bCheckpoint))

	var (
		aLooked1 = make(chan struct{}) // A (1) looked up and is processing record 1
		bDone1   = make(chan struct{}) // B (1–3) returned
		aLooked2 = make(chan struct{}) // A (2–5) looked up and is processing record 4
		bDone2   = make(chan struct{}) // B (4–6) returned
	)
	wait := func(ch <-chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("script step never happened")
		}
	}
	// The processor hook runs after the lookup, so reaching it means "got the batch".
	shared.hook = func(ctx context.Context, r pipeline.Record) error {
		switch {
		case r.ID == id(1) && ctx.Value(envKey{}) == "A":
			close(aLooked1)
			return wait(bDone1) // B gets 1–3 and returns while A holds 1
		case r.ID == id(4) && ctx.Value(envKey{}) == "A":
			close(aLooked2)
			return wait(bDone2) // B gets 4–6 and returns while A holds 4 and 5
		}
		return nil
	}

	type outcome struct {
		resp events.KinesisEventResponse
		err  error
	}
	run := func(r *rig, env string, raw []byte) outcome {
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), envKey{}, env), 60*time.Second)
		defer cancel()
		resp, err := r.h.HandleJSON(ctx, raw)
		return outcome{resp, err}
	}
	aOut1 := make(chan outcome, 1)
	go func() { aOut1 <- run(a, "A", batch(1, 1)) }()
	if err := wait(aLooked1); err != nil {
		t.Fatal(err)
	}
	b1 := run(b, "B", batch(1, 3))
	close(bDone1)
	a1 := <-aOut1

	aOut2 := make(chan outcome, 1)
	go func() { aOut2 <- run(a, "A", batch(2, 5)) }()
	if err := wait(aLooked2); err != nil {
		t.Fatal(err)
	}
	b2 := run(b, "B", batch(4, 6))
	close(bDone2)
	a2 := <-aOut2

	for name, o := range map[string]outcome{"A(1)": a1, "A(2-5)": a2} {
		if o.err != nil || failureOf(t, o.resp) != "" {
			t.Errorf("%s: response %+v err %v: A's batches succeed", name, o.resp, o.err)
		}
	}
	// B reports the first record A held; Lambda retries B's batches from there.
	if b1.err != nil || failureOf(t, b1.resp) != seq(1) {
		t.Errorf("B(1-3): %+v %v, want failure at 1 (held by A)", b1.resp, b1.err)
	}
	if b2.err != nil || failureOf(t, b2.resp) != seq(4) {
		t.Errorf("B(4-6): %+v %v, want failure at 4 (held by A)", b2.resp, b2.err)
	}
	b3 := run(b, "B", batch(1, 3))
	b4 := run(b, "B", batch(4, 6))
	for name, o := range map[string]outcome{"B(1-3) retry": b3, "B(4-6) retry": b4} {
		if o.err != nil || failureOf(t, o.resp) != "" {
			t.Errorf("%s: response %+v err %v", name, o.resp, o.err)
		}
	}

	metricsOf := func(r *rig, n int) map[string]float64 { // n-th invocation of this rig (0-based)
		lines := r.metrics.jsonLines(t)
		if len(lines) <= n {
			t.Fatalf("rig has %d metric lines", len(lines))
		}
		out := map[string]float64{}
		for k, v := range lines[n] {
			if f, ok := v.(float64); ok {
				out[k] = f
			}
		}
		return out
	}
	if m := metricsOf(b, 0); m[MetricRecordsProcessed] != 2 || m[MetricRecordsFailed] != 1 || m[MetricRecordsHeld] != 1 {
		t.Errorf("B(1-3): %v, want 2 and 3 processed, 1 held by A", m)
	}
	if m := metricsOf(a, 1); m[MetricDuplicatesSkipped] != 2 || m[MetricRecordsProcessed] != 2 {
		t.Errorf("A(2-5): %v, want 2 and 3 skipped as done by B, 4 and 5 processed", m)
	}
	if m := metricsOf(b, 1); m[MetricRecordsProcessed] != 1 || m[MetricRecordsHeld] != 2 {
		t.Errorf("B(4-6): %v, want 6 processed, 4 and 5 held by A", m)
	}
	if m := metricsOf(b, 2); m[MetricDuplicatesSkipped] != 3 || m[MetricCheckpointWriteFailures] != 1 {
		t.Errorf("B(1-3) retry: %v, want all done and its checkpoint write failed (proxy)", m)
	}
	for i := 1; i <= 6; i++ {
		if n := shared.count(id(i)); n != 1 {
			t.Errorf("record %d reached the processor %d times, want exactly once", i, n)
		}
	}
	st, err := s.checkpoint().Get(context.Background(), shardFor(group))
	if err != nil || st.Checkpoint != seq(6) {
		t.Errorf("checkpoint %q (%v), want %s", st.Checkpoint, err, seq(6))
	}
	rng, err := s.ledger().Lookup(context.Background(), shardFor(group), seq(1), seq(6))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		if !rng.Done(id(i)) {
			t.Errorf("record %d not done in the ledger", i)
		}
	}
	if proxy.Stats().Total().Faults() != 1 {
		t.Errorf("proxy injected %d faults, want B's one checkpoint failure", proxy.Stats().Total().Faults())
	}
}

// envKey marks which execution environment (A or B) an invocation runs in.
type envKey struct{}
