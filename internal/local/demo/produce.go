package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// putRecordsAPI is what loadgen.Produce calls.
type putRecordsAPI interface {
	PutRecords(context.Context, *kinesis.PutRecordsInput, ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// written is one record as Kinesis stored it.
type written struct {
	id, key, shard, seq string
	at                  time.Time
}

// ledgerOfWrites wraps the producer's Kinesis client and remembers where every accepted record
// landed (shard, sequence number), read from the PutRecords responses: the demo's record of
// what was produced, per shard, for the chart and for knowing when the mappings are drained.
type ledgerOfWrites struct {
	next putRecordsAPI

	mu      sync.Mutex
	byID    map[string]written
	byShard map[string][]string // sequence numbers in arrival order (ascending per shard)
}

func newLedgerOfWrites(next putRecordsAPI) *ledgerOfWrites {
	return &ledgerOfWrites{next: next, byID: map[string]written{}, byShard: map[string][]string{}}
}

// PutRecords implements putRecordsAPI.
func (w *ledgerOfWrites) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	out, err := w.next.PutRecords(ctx, in, opts...)
	if err != nil || out == nil {
		return out, err
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range out.Records {
		if r.ErrorCode != nil || i >= len(in.Records) {
			continue
		}
		var p loadgen.Payload
		if json.Unmarshal(in.Records[i].Data, &p) != nil || p.ID == "" {
			continue
		}
		shard, seq := aws.ToString(r.ShardId), aws.ToString(r.SequenceNumber)
		if _, dup := w.byID[p.ID]; dup {
			continue // a retried PutRecords entry stored twice: keep the first
		}
		w.byID[p.ID] = written{id: p.ID, key: p.Key, shard: shard, seq: seq, at: now}
		w.byShard[shard] = append(w.byShard[shard], seq)
	}
	return out, nil
}

// snapshot returns, per shard, the sorted sequence numbers written so far.
func (w *ledgerOfWrites) snapshot() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]string, len(w.byShard))
	for s, seqs := range w.byShard {
		c := append([]string(nil), seqs...)
		sort.Slice(c, func(i, j int) bool { return seqnum.Compare(c[i], c[j]) < 0 })
		out[s] = c
	}
	return out
}

func (w *ledgerOfWrites) records() []written {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]written, 0, len(w.byID))
	for _, r := range w.byID {
		out = append(out, r)
	}
	return out
}

func (w *ledgerOfWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byID)
}

// position is how many of seqs (sorted) are at or below seq: a sequence number as a record count.
func position(seqs []string, seq string) int {
	if seq == "" {
		return 0
	}
	return sort.Search(len(seqs), func(i int) bool { return seqnum.Compare(seqs[i], seq) > 0 })
}

// laneOf is the mapping's lane of a partition key with ParallelizationFactor n (esm.LaneOf). The
// demo uses it to know when every lane reached its last record.
func laneOf(key string, n int) int { return esm.LaneOf(key, n) }

// kinesisAdminAPI is what the demo calls on Kinesis besides producing.
type kinesisAdminAPI interface {
	ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	SplitShard(context.Context, *kinesis.SplitShardInput, ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error)
	DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	DeleteStream(context.Context, *kinesis.DeleteStreamInput, ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error)
}

var _ kinesisAdminAPI = (*kinesis.Client)(nil)

// splitShard splits the open shard with the lowest id at the middle of its hash-key range and
// waits until the stream is ACTIVE again. It returns the parent's id.
func splitShard(ctx context.Context, kin kinesisAdminAPI, stream string) (string, error) {
	out, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return "", fmt.Errorf("demo: list shards of %s: %w", stream, err)
	}
	var target *kintypes.Shard
	for i := range out.Shards {
		s := &out.Shards[i]
		if s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil {
			continue // closed
		}
		if target == nil || aws.ToString(s.ShardId) < aws.ToString(target.ShardId) {
			target = s
		}
	}
	if target == nil || target.HashKeyRange == nil {
		return "", fmt.Errorf("demo: stream %s has no open shard to split", stream)
	}
	lo, ok1 := new(big.Int).SetString(aws.ToString(target.HashKeyRange.StartingHashKey), 10)
	hi, ok2 := new(big.Int).SetString(aws.ToString(target.HashKeyRange.EndingHashKey), 10)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("demo: shard %s has a malformed hash key range", aws.ToString(target.ShardId))
	}
	mid := new(big.Int).Add(lo, hi)
	mid.Rsh(mid, 1)
	mid.Add(mid, big.NewInt(1)) // NewStartingHashKey must be greater than the range's start
	id := aws.ToString(target.ShardId)
	if _, err := kin.SplitShard(ctx, &kinesis.SplitShardInput{
		StreamName: aws.String(stream), ShardToSplit: aws.String(id), NewStartingHashKey: aws.String(mid.String()),
	}); err != nil {
		return "", fmt.Errorf("demo: split %s of %s: %w", id, stream, err)
	}
	for {
		d, err := kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err != nil {
			return "", fmt.Errorf("demo: describe %s after the split: %w", stream, err)
		}
		if d.StreamDescriptionSummary.StreamStatus == kintypes.StreamStatusActive {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// produce writes recs at rate records per second (0: as fast as possible) in slices of at most
// 100 records, calling split once, after splitAt records (a negative splitAt: never), and tick
// after every slice.
func produce(ctx context.Context, kin putRecordsAPI, stream string, recs []loadgen.Payload, rate int, splitAt int, split func(context.Context) error, tick func(int)) error {
	start := time.Now()
	step := 100
	if rate > 0 {
		step = max(1, min(100, rate/5)) // about five calls a second
	}
	done := 0
	for done < len(recs) {
		if splitAt >= 0 && done >= splitAt && split != nil {
			if err := split(ctx); err != nil {
				return err
			}
			split = nil
		}
		end := min(done+step, len(recs))
		if splitAt > done && splitAt < end {
			end = splitAt
		}
		if err := loadgen.Produce(ctx, kin, stream, recs[done:end], 0, nil); err != nil {
			return fmt.Errorf("demo: produce records %d..%d: %w", done+1, end, err)
		}
		done = end
		if tick != nil {
			tick(done)
		}
		if rate > 0 {
			ahead := time.Duration(float64(done)/float64(rate)*float64(time.Second)) - time.Since(start)
			if ahead > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(ahead):
				}
			}
		}
	}
	if split != nil && splitAt >= 0 && splitAt <= len(recs) {
		return split(ctx)
	}
	return nil
}
