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
	"github.com/gapless-dev/gapless/internal/faultproxy"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestSeedInterleaving replays the seed report's race through the real handler and the real
// stores: two invocations (two execution environments, A and B) work on overlapping batches of
// one shard, interleaved exactly as
//
//	A gets 1; B gets 1–3; A commits 1; B fails to commit 3;
//	A gets 2–5; B gets 4–6; B commits 6; A fails to commit 5.
//
// "gets" is the batch's ledger lookup, "commits" its checkpoint write. B's first checkpoint
// write fails with a DynamoDB server error (fault proxy); A's last one loses the conditional
// race to B's 6. In the seed, the loser skipped its batch and records were lost. Here no
// record is skipped: all six reach the processor, and the duplicates are counted.
func TestSeedInterleaving(t *testing.T) {
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

	// The script. Each step is a channel closed when it has happened.
	var (
		aLooked1 = make(chan struct{}) // A (1) looked up and is processing record 1
		bLooked1 = make(chan struct{}) // B (1–3) looked up and is processing
		aDone1   = make(chan struct{}) // A committed 1 and returned
		aLooked2 = make(chan struct{}) // A (2–5) looked up and is processing
		bDone2   = make(chan struct{}) // B (4–6) committed 6 and returned
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
			return wait(bLooked1) // B gets 1–3 before A commits 1
		case r.ID == id(1) && ctx.Value(envKey{}) == "B":
			close(bLooked1)
			return wait(aDone1) // A commits 1 before B commits
		case r.ID == id(4) && ctx.Value(envKey{}) == "A":
			close(aLooked2)
			return wait(bDone2) // B gets 4–6 and commits 6 before A commits 5
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
	aOut1, bOut1 := make(chan outcome, 1), make(chan outcome, 1)
	go func() { o := run(a, "A", batch(1, 1)); close(aDone1); aOut1 <- o }()
	if err := wait(aLooked1); err != nil {
		t.Fatal(err)
	}
	go func() { bOut1 <- run(b, "B", batch(1, 3)) }()
	a1, b1 := <-aOut1, <-bOut1

	aOut2, bOut2 := make(chan outcome, 1), make(chan outcome, 1)
	go func() { aOut2 <- run(a, "A", batch(2, 5)) }()
	if err := wait(aLooked2); err != nil {
		t.Fatal(err)
	}
	go func() { o := run(b, "B", batch(4, 6)); close(bDone2); bOut2 <- o }()
	b2, a2 := <-bOut2, <-aOut2

	for name, o := range map[string]outcome{"A(1)": a1, "B(1-3)": b1, "A(2-5)": a2, "B(4-6)": b2} {
		if o.err != nil || failureOf(t, o.resp) != "" {
			t.Errorf("%s: response %+v err %v: every batch succeeds", name, o.resp, o.err)
		}
	}

	// No record skipped: all six reached the processor.
	for i := 1; i <= 6; i++ {
		if shared.count(id(i)) == 0 {
			t.Errorf("record %d never reached the processor: LOST", i)
		}
	}
	// The interleaving really happened as scripted.
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
	if m := metricsOf(b, 0); m[MetricCheckpointWriteFailures] != 1 || m[MetricRecordsProcessed] != 3 {
		t.Errorf("B(1-3): %v, want its checkpoint write to fail and all 3 processed", m)
	}
	if m := metricsOf(a, 1); m[MetricDuplicatesSkipped] != 2 || m[MetricRecordsProcessed] != 2 || m[MetricCheckpointRacesLost] != 1 {
		t.Errorf("A(2-5): %v, want 2 and 3 skipped as done by B, 4 and 5 processed, race lost to 6", m)
	}
	if m := metricsOf(b, 1); m[MetricRecordsProcessed] != 3 || m[MetricCheckpointRacesLost] != 0 {
		t.Errorf("B(4-6): %v", m)
	}
	// Duplicates are the documented concurrent-batch window: 1 (A and B both held it before
	// either recorded it), 4 and 5 (A and B again). They are counted, never lost.
	if dups := shared.total() - 6; dups != 3 {
		t.Errorf("%d duplicate deliveries, want 3 (records 1, 4, 5)", dups)
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
