package reconcile

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// consumerInvoker runs the real consumer handler in-process for the local mapping.
type consumerInvoker struct{ h *consumer.Handler }

func (c consumerInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	resp, err := c.h.HandleJSON(ctx, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// iteratorSignal is the mapping's Kinesis client, closing positioned once a LATEST iterator has
// been handed out: from then on every record written is after the mapping's starting point.
type iteratorSignal struct {
	*kinesis.Client
	once       sync.Once
	positioned chan struct{}
}

func (k *iteratorSignal) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	out, err := k.Client.GetShardIterator(ctx, in, opts...)
	if err == nil && in.ShardIteratorType == "LATEST" {
		k.once.Do(func() { close(k.positioned) })
	}
	return out, err
}

// TestReconcilerReplaysWhatALatestRestartSkipped: changing StreamArn or StartingPosition makes
// CloudFormation replace the event-source mapping; a new mapping at LATEST starts at the tip and
// never reads what was written while no mapping ran. The checkpoint mirror is per group and
// shard, not per mapping, so the reconciler's next pass reads from the verified watermark to the
// new checkpoint and replays exactly the skipped records.
// consumerMapping is the consumer function (the real handler over s's stores, a recorder as
// Process, 3 attempts) behind a local mapping configuration for s's stream with
// ReportBatchItemFailures; the caller sets the starting position.
func (s *stack) consumerMapping(poll time.Duration) (*recorder, *pipeline.Pipeline, func(string, int) (esm.Invoker, error), esm.Config) {
	rec := newRecorder()
	p := s.pipeline(rec.process, 3)
	h := consumer.NewHandler(p, s.group, nil)
	lanes := func(string, int) (esm.Invoker, error) { return consumerInvoker{h}, nil }
	cfg := esm.DefaultConfig()
	cfg.StreamName, cfg.FunctionName = s.stream, "consumer"
	cfg.ReportBatchItemFailures = true
	cfg.FunctionTimeout = 30 * time.Second
	cfg.PollInterval = poll
	return rec, p, lanes, cfg
}

func TestReconcilerReplaysWhatALatestRestartSkipped(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	rec, p, lanes, cfg := s.consumerMapping(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 1. The first mapping (TRIM_HORIZON) consumes A; a reconciler pass verifies it.
	a := s.putN(10, "A", keyMod(3), nil)
	cfg.StartingPosition = esm.TrimHorizon
	m1, err := esm.New(s.kin, nil, lanes, cfg, esm.WithStopWhenDrained())
	if err != nil {
		t.Fatal(err)
	}
	if err := m1.Run(ctx); err != nil {
		t.Fatalf("first mapping: %v", err)
	}
	checkOnce(t, "first mapping", rec.counts(), idsOf(a))
	r := s.reconciler(p, Config{})
	if _, err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	shardID := a[0].shard
	if st := s.state(shardID); st.Watermark != a[len(a)-1].seq {
		t.Fatalf("watermark %q after the first pass, want A's last %s", st.Watermark, a[len(a)-1].seq)
	}

	// 2. The mapping is replaced: B is written while none runs.
	b := s.putN(10, "B", keyMod(3), nil)

	// 3. The new mapping starts at LATEST and consumes C, written after it is positioned.
	kin := &iteratorSignal{Client: s.kin, positioned: make(chan struct{})}
	cfg.StartingPosition = esm.Latest
	var mu sync.Mutex
	checkpoints := map[string]bool{}
	m2, err := esm.New(kin, nil, lanes, cfg, esm.WithObserver(func(e esm.Event) {
		if e.Type == esm.EventCheckpoint {
			mu.Lock()
			checkpoints[e.Checkpoint] = true
			mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m2.Run(runCtx) }()
	select {
	case <-kin.positioned:
	case err := <-done:
		t.Fatalf("second mapping ended before positioning: %v", err)
	}
	c := s.putN(5, "C", keyMod(3), nil)
	last := c[len(c)-1].seq
	for {
		mu.Lock()
		reached := checkpoints[last]
		mu.Unlock()
		if reached {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("second mapping never checkpointed C")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done

	counts := rec.counts()
	for _, id := range idsOf(b) {
		if counts[id] != 0 {
			t.Fatalf("the LATEST mapping delivered %v, written before it started: the fault did not happen", id)
		}
	}
	if st := s.state(shardID); st.Checkpoint != last {
		t.Fatalf("checkpoint %s, want C's last %s", st.Checkpoint, last)
	}

	// 4. The reconciler's next pass replays B, exactly once, and nothing else.
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != len(b) {
		t.Errorf("GapsReplayed %d, want %d (the records the restart skipped)", rep.GapsReplayed, len(b))
	}
	want := append(append(idsOf(a), idsOf(b)...), idsOf(c)...)
	checkOnce(t, "mappings and reconciler together", rec.counts(), want)
	if st := s.state(shardID); st.Watermark != last {
		t.Errorf("watermark %s, want C's last %s: B is not proven accounted for", st.Watermark, last)
	}
}
