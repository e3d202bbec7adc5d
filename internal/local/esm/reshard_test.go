package esm

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/ctxtime"
)

// reshardTimeout is the function timeout of the reshard tests, whose invocation reshards the
// stream, waits for it to be ACTIVE and writes a record per key before it returns: a dozen
// Kinesis calls under the invocation's deadline. The default 3s is not enough on a loaded
// machine: TestReshardMerge failed with `merge: ... PutRecord ... context deadline exceeded`
// on moto under -race. What the tests check is the order of parents and children, not how long
// the invocation takes; drain still bounds the whole run.
const reshardTimeout = 45 * time.Second

// waitActive waits (bounded) until the stream is ACTIVE again after a reshard.
func (s *stream) waitActive(ctx context.Context) error {
	for {
		out, err := s.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.name)})
		if err != nil {
			return err
		}
		if out.StreamDescriptionSummary.StreamStatus == kintypes.StreamStatusActive {
			return nil
		}
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

func (s *stream) shardIDs(t *testing.T) []string {
	t.Helper()
	out, err := s.kin.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.name)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sh := range out.Shards {
		ids = append(ids, aws.ToString(sh.ShardId))
	}
	return ids
}

// putKeys writes one record per key (from an invoker goroutine: errors are returned).
func (s *stream) putKeys(ctx context.Context, keys []string, tag string) ([]putResult, error) {
	var out []putResult
	for _, k := range keys {
		data := []byte(tag + "-" + k)
		o, err := s.kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.name), PartitionKey: aws.String(k), Data: data})
		if err != nil {
			return nil, err
		}
		out = append(out, putResult{key: k, seq: aws.ToString(o.SequenceNumber), shard: aws.ToString(o.ShardId), data: data})
	}
	return out, nil
}

// index returns the position of the first event matching pred, or -1.
func index(evs []Event, pred func(Event) bool) int {
	return slices.IndexFunc(evs, pred)
}

// checkReshard verifies that every record was delivered once, that no child was invoked before
// all its parents finished, and that per key the parents' records came first.
func checkReshard(t *testing.T, r *recorder, log *eventLog, before, after []putResult, parents []string) {
	t.Helper()
	all := append(slices.Clone(before), after...)
	if got, want := sortedSeqs(r.delivered()), sortedSeqs(seqsOf(all)); !slices.Equal(got, want) {
		t.Fatalf("delivered %d records, want each of %d once", len(got), len(want))
	}
	evs := log.all()
	children := map[string]bool{}
	for _, p := range after {
		if slices.Contains(parents, p.shard) {
			t.Fatalf("record written after the reshard landed in parent %s", p.shard)
		}
		children[p.shard] = true
	}
	for child := range children {
		started := index(evs, func(e Event) bool { return e.Type == EventShardStarted && e.ShardID == child })
		if started < 0 {
			t.Fatalf("child %s never started", child)
		}
		var ps []string
		ps = append(ps, evs[started].Parents...)
		slices.Sort(ps)
		if !slices.Equal(ps, parents) {
			t.Fatalf("child %s has parents %v, want %v", child, ps, parents)
		}
		firstInvoke := index(evs, func(e Event) bool { return e.Type == EventBatchInvoked && e.ShardID == child })
		for _, p := range parents {
			fin := index(evs, func(e Event) bool { return e.Type == EventShardFinished && e.ShardID == p })
			if fin < 0 || fin > started || fin > firstInvoke {
				t.Fatalf("child %s started (event %d) or invoked (event %d) before parent %s finished (event %d)", child, started, firstInvoke, p, fin)
			}
		}
	}
	// Per key: the parent's records, then the child's.
	pos := map[string]int{}
	for i, q := range r.delivered() {
		pos[q] = i
	}
	for _, a := range after {
		for _, b := range before {
			if a.key == b.key && pos[b.seq] > pos[a.seq] {
				t.Fatalf("key %s: child record %s delivered before parent record %s", a.key, a.seq, b.seq)
			}
		}
	}
}

func TestReshardSplit(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	parent := s.shardIDs(t)[0]
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	before := s.putN(t, len(keys), keys...)
	var (
		once  sync.Once
		after []putResult
		err   error
	)
	r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
		if inv.shard != parent {
			return nil, nil
		}
		// While the parent is being consumed, split it and write to the children; the mapping
		// must find them with ListShards and drain the parent first.
		once.Do(func() {
			mid := new(big.Int).Lsh(big.NewInt(1), 127)
			_, err = s.kin.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(s.name),
				ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String(mid.String())})
			if err == nil {
				err = s.waitActive(ctx)
			}
			if err == nil {
				after, err = s.putKeys(ctx, keys, "after")
			}
		})
		return nil, nil
	})
	cfg := baseConfig(s)
	cfg.BatchSize = 3
	cfg.FunctionTimeout = reshardTimeout
	_, log := drain(t, s, nil, r, cfg)
	if err != nil {
		t.Fatalf("split: %v", err)
	}
	if len(after) != len(keys) {
		t.Fatalf("wrote %d records after the split", len(after))
	}
	checkReshard(t, r, log, before, after, []string{parent})
	children := map[string]bool{}
	for _, a := range after {
		children[a.shard] = true
	}
	if len(children) != 2 {
		t.Logf("records after the split landed in %d children", len(children))
	}
}

func TestReshardMerge(t *testing.T) {
	t.Parallel()
	s := newStream(t, 2)
	parents := s.shardIDs(t)
	slices.Sort(parents)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("key-%d", i))
	}
	before := s.putN(t, len(keys), keys...)
	shardsHit := map[string]bool{}
	for _, p := range before {
		shardsHit[p.shard] = true
	}
	if len(shardsHit) != 2 {
		t.Fatalf("test keys hit %d shards, want both", len(shardsHit))
	}
	var (
		once  sync.Once
		after []putResult
		err   error
	)
	r := newRecorder(t, func(ctx context.Context, _ invocation, _ int) ([]byte, error) {
		once.Do(func() {
			_, err = s.kin.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String(s.name),
				ShardToMerge: aws.String(parents[0]), AdjacentShardToMerge: aws.String(parents[1])})
			if err == nil {
				err = s.waitActive(ctx)
			}
			if err == nil {
				after, err = s.putKeys(ctx, keys, "after")
			}
		})
		return nil, nil
	})
	cfg := baseConfig(s)
	cfg.BatchSize = 2
	cfg.FunctionTimeout = reshardTimeout
	_, log := drain(t, s, nil, r, cfg)
	if err != nil {
		t.Fatalf("merge: %v", err)
	}
	checkReshard(t, r, log, before, after, parents)
}
