package baseline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// memCheckpoints is an in-memory CheckpointStore (test-only). before, when set, runs before
// every call with its name and the caller's consumer, and may block it to order a race.
type memCheckpoints struct {
	mu     sync.Mutex
	vals   map[string]string
	before func(op string, ctx context.Context)
}

type consumerKey struct{}

func (m *memCheckpoints) Get(ctx context.Context, key string) (string, error) {
	if m.before != nil {
		m.before("get", ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vals[key], nil
}

func (m *memCheckpoints) Replace(ctx context.Context, key, old, next string) (bool, error) {
	if m.before != nil {
		m.before("replace", ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vals[key] != old {
		return false, nil
	}
	m.vals[key] = next
	return true, nil
}

// shardEvent is a Kinesis event of the given sequence numbers (short decimal strings) of one
// shard, partition key "k<seq mod keys>".
func shardEvent(keys int, seqs ...int) events.KinesisEvent {
	var ev events.KinesisEvent
	for _, s := range seqs {
		seq := fmt.Sprintf("4959%052d", s)
		ev.Records = append(ev.Records, events.KinesisEventRecord{
			EventID:        shardID + ":" + seq,
			EventSourceArn: "arn:aws:kinesis:us-east-1:000000000000:stream/seed",
			Kinesis:        events.KinesisRecord{SequenceNumber: seq, PartitionKey: fmt.Sprintf("k%d", s%keys), Data: []byte("{}")},
		})
	}
	return ev
}

func seqOf(s int) string { return fmt.Sprintf("4959%052d", s) }

// TestCheckpointDecidesAloneLosesNothing: one consumer reading a shard in order, retrying from
// the lowest failure as Lambda does, processes every record (the recipe is not wrong alone).
func TestCheckpointDecidesAloneLosesNothing(t *testing.T) {
	store := &memCheckpoints{vals: map[string]string{}}
	rec := &recorder{fail: map[string]error{seqOf(4): errors.New("transient"), seqOf(13): errors.New("transient")}}
	var stats baseline.Stats
	h := baseline.CheckpointDecides(store, "g", rec.process, baseline.WithStats(&stats))
	pos, failedOnce := 1, map[string]bool{}
	for pos <= 20 {
		var seqs []int
		for s := pos; s <= min(pos+4, 20); s++ {
			seqs = append(seqs, s)
		}
		resp, err := h(context.Background(), shardEvent(1, seqs...))
		if err != nil {
			t.Fatal(err)
		}
		f := failure(t, resp)
		if f == "" {
			pos = seqs[len(seqs)-1] + 1
			continue
		}
		rec.mu.Lock()
		if failedOnce[f] {
			delete(rec.fail, f) // it fails once
		}
		failedOnce[f] = true
		rec.mu.Unlock()
		for _, s := range seqs {
			if seqOf(s) == f {
				pos = s
			}
		}
	}
	for s := 1; s <= 20; s++ {
		if rec.count(seqOf(s)) == 0 {
			t.Errorf("record %d never processed", s)
		}
	}
	if stats.RacesLost.Load() != 0 || stats.Abandoned.Load() != 0 {
		t.Fatalf("alone: %d races lost, %d abandoned", stats.RacesLost.Load(), stats.Abandoned.Load())
	}
}

// gate orders the store calls of consumers running in their own goroutines: step i may run
// only after steps 0..i-1 ran. Steps are "<consumer> <op>".
type gate struct {
	mu    sync.Mutex
	cond  *sync.Cond
	steps []string
	next  int
}

func newGate(steps ...string) *gate {
	g := &gate{steps: steps}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) before(op string, ctx context.Context) {
	me, _ := ctx.Value(consumerKey{}).(string)
	step := me + " " + op
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.next < len(g.steps) && g.steps[g.next] != step {
		g.cond.Wait()
	}
	if g.next < len(g.steps) {
		g.next++
	}
	g.cond.Broadcast()
}

// TestCheckpointDecidesLosesUnderARace runs two consumers of one shard at once in goroutines,
// their checkpoint calls ordered as in the report, and shows the records they lose.
func TestCheckpointDecidesLosesUnderARace(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
		a, b  []int       // the consumers' batches
		fail  map[int]int // sequence -> times it fails before succeeding
		lost  []int
	}{
		{
			// Two concurrent batches of one shard holding different partition keys (a
			// ParallelizationFactor of 2): B checkpoints past A's records before A reads the
			// checkpoint, so A drops its whole batch as "processed by the other consumer".
			name:  "a faster batch moves the checkpoint past a slower one's records",
			steps: []string{"B get", "B replace", "A get", "A replace"},
			a:     []int{1, 3, 5}, b: []int{2, 4, 6},
			lost: []int{1, 3, 5},
		},
		{
			// Both read the same checkpoint; A's record 3 fails, B's replace wins first, A's
			// replace loses and A skips the rest of its batch: 3 is never retried.
			name:  "a lost replace skips the batch's failed records",
			steps: []string{"A get", "B get", "B replace", "A replace"},
			a:     []int{1, 3, 5}, b: []int{2, 4, 6},
			fail: map[int]int{3: 1},
			lost: []int{3},
		},
		{
			// The report's own overlap: two consumers with overlapping batches of the same
			// records; B (behind) reads the checkpoint after A moved it and filters; A's
			// failed record 7 is abandoned because B's replace won in between.
			name:  "overlapping batches of the same records",
			steps: []string{"A get", "B get", "B replace", "A replace"},
			a:     []int{5, 6, 7, 8}, b: []int{3, 4, 5, 6},
			fail: map[int]int{7: 1},
			lost: []int{7},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(tt.steps...)
			store := &memCheckpoints{vals: map[string]string{}, before: g.before}
			rec := &recorder{fail: map[string]error{}}
			for s, n := range tt.fail {
				if n > 0 {
					rec.fail[seqOf(s)] = errors.New("transient")
				}
			}
			var okMu sync.Mutex
			ok := map[string]int{} // successful calls by sequence number
			process := func(ctx context.Context, r pipeline.Record) error {
				if err := rec.process(ctx, r); err != nil {
					return err
				}
				okMu.Lock()
				ok[r.ID.Seq]++
				okMu.Unlock()
				return nil
			}
			var stats baseline.Stats
			h := baseline.CheckpointDecides(store, "g", process, baseline.WithStats(&stats), baseline.WithConcurrency(2))
			// Each consumer runs its batch as a mapping lane would: again from the reported
			// failure, until the handler reports none.
			lane := func(name string, seqs []int) error {
				ctx := context.WithValue(context.Background(), consumerKey{}, name)
				for len(seqs) > 0 {
					resp, err := h(ctx, shardEvent(2, seqs...))
					if err != nil {
						return err
					}
					if len(resp.BatchItemFailures) == 0 {
						return nil
					}
					f := resp.BatchItemFailures[0].ItemIdentifier
					rec.mu.Lock()
					delete(rec.fail, f) // the retry succeeds
					rec.mu.Unlock()
					for i, s := range seqs {
						if seqOf(s) == f {
							seqs = seqs[i:]
							break
						}
					}
					ctx = context.WithValue(context.Background(), consumerKey{}, name+" retry")
				}
				return nil
			}
			var wg sync.WaitGroup
			errs := make(chan error, 2)
			wg.Go(func() { errs <- lane("A", tt.a) })
			wg.Go(func() { errs <- lane("B", tt.b) })
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("consumers stuck: the gate's steps never all happened")
			}
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var lost []int
			for _, s := range append(append([]int(nil), tt.a...), tt.b...) {
				if ok[seqOf(s)] == 0 {
					if !contains(lost, s) {
						lost = append(lost, s)
					}
				}
			}
			want := 0
			for _, s := range tt.lost {
				if contains(tt.a, s) || contains(tt.b, s) {
					want++
					if !contains(lost, s) {
						t.Errorf("record %d was processed; expected the race to lose it", s)
					}
				}
			}
			if len(lost) != want || want == 0 {
				t.Fatalf("lost %v, want %d records %v", lost, want, tt.lost)
			}
			if stats.Filtered.Load()+stats.Abandoned.Load() == 0 {
				t.Fatal("the handler's stats do not show why records were lost")
			}
		})
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestDynamoCheckpointsReplace: the DynamoDB store's compare-and-replace against the emulator.
func TestDynamoCheckpointsReplace(t *testing.T) {
	ctx := context.Background()
	table := stacktest.Name(t, "cpd")
	if err := baseline.Ensure(ctx, stacktest.DynamoDB(t), table); err != nil {
		t.Fatal(err)
	}
	s := baseline.NewDynamoCheckpoints(stacktest.DynamoDB(t), table)
	key := baseline.CheckpointKey("g", "s", shardID)
	if v, err := s.Get(ctx, key); err != nil || v != "" {
		t.Fatalf("Get of a new key = %q, %v", v, err)
	}
	steps := []struct {
		old, next string
		won       bool
	}{
		{"", seqOf(5), true},
		{"", seqOf(6), false},       // someone put it first
		{seqOf(4), seqOf(9), false}, // stale old value
		{seqOf(5), seqOf(100), true},
	}
	for _, st := range steps {
		won, err := s.Replace(ctx, key, st.old, st.next)
		if err != nil || won != st.won {
			t.Fatalf("Replace(%q -> %q) = %v, %v; want %v", st.old, st.next, won, err, st.won)
		}
	}
	if v, err := s.Get(ctx, key); err != nil || v != seqOf(100) {
		t.Fatalf("Get = %q, %v; want %s", v, err, seqOf(100))
	}
}

// TestCheckpointDecidesSlowLaneLosesItsRecords: two lanes of one shard (different partition
// keys, as with a ParallelizationFactor of 2) run freely in their own goroutines; lane A's first
// record is slow — it finishes only after lane B has consumed all of its batches. Every batch A
// reads afterwards is at or below B's checkpoint, so A drops it unprocessed.
func TestCheckpointDecidesSlowLaneLosesItsRecords(t *testing.T) {
	store := &memCheckpoints{vals: map[string]string{}}
	aSlow, bDone := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	done := map[string]bool{}
	process := func(_ context.Context, r pipeline.Record) error {
		if r.ID.Seq == seqOf(1) {
			close(aSlow) // A has read the checkpoint and is processing
			<-bDone      // the slow record
		}
		mu.Lock()
		done[r.ID.Seq] = true
		mu.Unlock()
		return nil
	}
	var stats baseline.Stats
	h := baseline.CheckpointDecides(store, "g", process, baseline.WithStats(&stats))
	lane := func(first int, after func()) error {
		defer after()
		for b := 0; b < 4; b++ { // 4 batches of 3 records: first, first+2, first+4, ...
			var seqs []int
			for i := 0; i < 3; i++ {
				seqs = append(seqs, first+2*(3*b+i))
			}
			if _, err := h(context.Background(), shardEvent(2, seqs...)); err != nil {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- lane(1, func() {}) })
	wg.Go(func() {
		<-aSlow
		errs <- lane(2, func() { close(bDone) })
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var lost []int
	for s := 1; s <= 24; s++ {
		if !done[seqOf(s)] {
			lost = append(lost, s)
		}
	}
	// A processed its first batch (1, 3, 5); its other 9 records are at or below B's checkpoint
	// (24) when it reads it.
	if len(lost) != 9 || lost[0] != 7 || stats.Filtered.Load() != 9 || stats.RacesLost.Load() != 1 {
		t.Fatalf("lost %v, filtered %d, races lost %d; want A's last 9 records, filtered 9, 1 race lost",
			lost, stats.Filtered.Load(), stats.RacesLost.Load())
	}
}
