package reconcile

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

// splitInHalves splits shardID at the middle of the hash range, waits for the children and
// puts n records (prefix, 16 keys) that land on them, returned by child in shard-id order.
func (s *stack) splitInHalves(shardID string, n int, prefix string) (first, second []put) {
	s.t.Helper()
	if _, err := s.kin.SplitShard(context.Background(), splitInput(s.stream, shardID, new(big.Int).Lsh(big.NewInt(1), 127))); err != nil {
		s.t.Fatal(err)
	}
	s.waitActive()
	children := map[string][]put{}
	for _, p := range s.putN(n, prefix, keyMod(16), nil) {
		children[p.shard] = append(children[p.shard], p)
	}
	kids := make([]string, 0, len(children))
	for id := range children {
		kids = append(kids, id)
	}
	slices.Sort(kids)
	if len(kids) != 2 {
		s.t.Fatalf("records after the split landed in %d shards, want 2", len(kids))
	}
	return children[kids[0]], children[kids[1]]
}

// lastArrival is the latest ApproximateArrivalTimestamp of recs, all of shard shardID.
func (s *stack) lastArrival(shardID string, recs []put) time.Time {
	s.t.Helper()
	arr := s.arrivals(shardID)
	var last time.Time
	for _, p := range recs {
		if a := arr[p.seq]; a.After(last) {
			last = a
		}
	}
	return last
}

// arrivals returns the ApproximateArrivalTimestamp of every record of the stream's shard.
func (s *stack) arrivals(shardID string) map[string]time.Time {
	s.t.Helper()
	ctx := context.Background()
	it, err := s.kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(s.stream), ShardId: aws.String(shardID),
		ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]time.Time{}
	iter := it.ShardIterator
	for iter != nil {
		page, err := s.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			s.t.Fatal(err)
		}
		for _, r := range page.Records {
			out[aws.ToString(r.SequenceNumber)] = aws.ToTime(r.ApproximateArrivalTimestamp)
		}
		if len(page.Records) == 0 {
			break
		}
		iter = page.NextShardIterator
	}
	return out
}

// clock is a settable clock for a Reconciler.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// TestLatestScopeOfANeverCheckpointedShard: both sides of the rule with StartingPosition
// LATEST, on a shard the mapping never checkpointed. Records B were written before the group's
// scope started (the first pass records it, as the time a mapping at LATEST took over): they
// were never the mapping's, and no pass replays them, however old. Records A arrived after it:
// the mapping gave them up (no checkpoint), so the pass replays each once, once older than
// TailAfter, and the watermark lands on A's last record. The scope start is durable: a
// reconciler started later (a new instance, a cold start) keeps it.
func TestLatestScopeOfANeverCheckpointedShard(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	b := s.putN(6, "B", keyMod(3), nil)
	shardID := b[0].shard
	lastB := s.lastArrival(shardID, b)
	rec := newRecorder()
	clk := &clock{t: lastB.Add(time.Millisecond)}
	cfg := Config{MaxRecordAge: 10 * time.Minute, StartingPosition: StartLatest}
	r := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	scope := s.state(shardID).ScopeFrom
	if !scope.Equal(lastB.Add(time.Millisecond)) {
		t.Fatalf("scope start %v, want the first pass's clock %v", scope, lastB.Add(time.Millisecond))
	}
	if rep.GapsReplayed != 0 {
		t.Fatalf("first pass replayed %d, want 0 (B is out of scope, nothing else is there)", rep.GapsReplayed)
	}

	a := s.putN(8, "A", keyMod(3), nil)
	arr := s.arrivals(shardID)
	for _, p := range a {
		if !arr[p.seq].After(scope) {
			t.Fatalf("record A %s arrived %v, not after the scope start %v: the setup did not happen", p.seq, arr[p.seq], scope)
		}
	}
	if _, err := s.cps.Get(context.Background(), s.shard(shardID)); err != nil {
		t.Fatal(err) // the item holds the scope start, and no checkpoint
	}
	if st := s.state(shardID); st.Checkpoint != "" {
		t.Fatalf("checkpoint %q, want none", st.Checkpoint)
	}

	// A fresh reconciler an hour later (past MaximumRecordAge 10m + settle 30m): every record is
	// old enough, only A is in scope.
	clk.set(time.Now().Add(time.Hour))
	r2 := s.reconciler(s.pipeline(rec.process, 3), cfg, WithClock(clk.now))
	var replayed, tail int
	for range 2 {
		rep, err := r2.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		replayed += rep.GapsReplayed
		tail += rep.TailReplayed
	}
	checkOnce(t, "reconciler", rec.counts(), idsOf(a)) // B never processed
	if replayed != len(a) || tail != len(a) {
		t.Errorf("GapsReplayed %d, TailReplayed %d, want %d each (A only)", replayed, tail, len(a))
	}
	st := s.state(shardID)
	if st.Watermark != a[len(a)-1].seq {
		t.Errorf("watermark %q, want A's last %s", st.Watermark, a[len(a)-1].seq)
	}
	if !st.ScopeFrom.Equal(scope) {
		t.Errorf("scope start moved from %v to %v", scope, st.ScopeFrom)
	}
}

// TestTrimHorizonRootIsLeftToTheMappingWhileYoung: the other side with TRIM_HORIZON: a shard
// without a checkpoint whose records are younger than TailAfter may simply not be reached yet
// by the mapping (a new deployment on a backlog): the pass replays nothing and leaves no
// watermark. Once they are older than TailAfter they are replayed once.
func TestTrimHorizonRootIsLeftToTheMappingWhileYoung(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	s.waitActive()
	recs := s.putN(5, "Y", keyMod(2), nil)
	shardID := recs[0].shard
	rec := newRecorder()
	clk := &clock{t: time.Now().Add(time.Hour)} // past settle (30m), short of TailAfter (12h30 with no age limit)
	r := s.reconciler(s.pipeline(rec.process, 3), Config{}, WithClock(clk.now))
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsReplayed != 0 || len(rec.counts()) != 0 {
		t.Fatalf("young records: GapsReplayed %d, processed %d, want 0", rep.GapsReplayed, len(rec.counts()))
	}
	if _, err := s.cps.Get(context.Background(), s.shard(shardID)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("shard item after a pass over young records: %v, want none", err)
	}
	clk.set(time.Now().Add(13 * time.Hour))
	rep, err = r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkOnce(t, "reconciler", rec.counts(), idsOf(recs))
	if rep.TailReplayed != len(recs) {
		t.Errorf("TailReplayed %d, want %d", rep.TailReplayed, len(recs))
	}
}

func TestNeverCheckpointed(t *testing.T) {
	t.Parallel()
	in := map[string]bool{"p": true}
	tests := []struct {
		name    string
		sh      shardInfo
		st      checkpoint.State
		drained bool
		want    bool
	}{
		{"original shard, no checkpoint", shardInfo{id: "s", startingSeq: "1"}, checkpoint.State{}, false, true},
		{"original shard with a checkpoint", shardInfo{id: "s", startingSeq: "1"}, checkpoint.State{Checkpoint: "5"}, false, false},
		{"parent still in the stream", shardInfo{id: "s", parents: []string{"p"}, startingSeq: "1"}, checkpoint.State{}, false, false},
		{"parents expired from the stream", shardInfo{id: "s", parents: []string{"gone"}, startingSeq: "1"}, checkpoint.State{}, false, true},
		{"drained: a descendant has a checkpoint", shardInfo{id: "s", startingSeq: "1", endingSeq: "9"}, checkpoint.State{}, true, false},
		{"no starting sequence number", shardInfo{id: "s"}, checkpoint.State{}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := neverCheckpointed(tc.sh, tc.st, in, tc.drained); got != tc.want {
				t.Errorf("neverCheckpointed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStartingPositionValidated(t *testing.T) {
	t.Parallel()
	for _, pos := range []string{"", StartTrimHorizon, StartLatest, "AT_TIMESTAMP", "latest"} {
		_, err := New(newMemKinesis(), &pipelinetest.Checkpoint{}, nopReplayer{}, Config{Group: "g", Stream: "s", StartingPosition: pos})
		if wantErr := pos == "AT_TIMESTAMP" || pos == "latest"; errors.Is(err, ErrConfig) != wantErr {
			t.Errorf("StartingPosition %q: error %v, want error %v", pos, err, wantErr)
		}
	}
}

// nopReplayer processes nothing. TEST-ONLY.
type nopReplayer struct{}

func (nopReplayer) Run(context.Context, pipeline.Batch) (pipeline.Result, error) {
	return pipeline.Result{}, nil
}
