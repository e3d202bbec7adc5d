package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// fakeSeq is the i-th sequence number of the fake stream (56 digits, like real ones).
func fakeSeq(i int) string {
	return fmt.Sprintf("49590338271490256608559692538361571095921575989%09d", i)
}

// memShard is one shard of memKinesis.
type memShard struct {
	id      string
	parents []string
	ending  string // set: closed
	recs    []kintypes.Record
	trimmed int // records before this index have expired
}

// memKinesis is an in-memory kinesisAPI. TEST-ONLY. Hooks override single calls.
type memKinesis struct {
	mu     sync.Mutex
	shards []*memShard
	calls  map[string]int
	// at, when set, answers GetShardIterator AT_SEQUENCE_NUMBER instead of the default
	// (position of seq; ResourceNotFoundException "Unable to find record" when not held).
	at func(sh *memShard, seq string) (index int, err error)
}

var _ kinesisAPI = (*memKinesis)(nil)

func newMemKinesis(shards ...*memShard) *memKinesis {
	return &memKinesis{shards: shards, calls: map[string]int{}}
}

// addRecords appends n records to sh with sequence numbers fakeSeq(from..), arriving at arrival.
func (sh *memShard) addRecords(from, n int, arrival time.Time, key func(i int) string) *memShard {
	for i := from; i < from+n; i++ {
		sh.recs = append(sh.recs, kintypes.Record{SequenceNumber: aws.String(fakeSeq(i)), PartitionKey: aws.String(key(i)),
			Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), ApproximateArrivalTimestamp: aws.Time(arrival)})
	}
	return sh
}

func (m *memKinesis) shard(id string) (*memShard, error) {
	for _, s := range m.shards {
		if s.id == id {
			return s, nil
		}
	}
	return nil, &kintypes.ResourceNotFoundException{Message: aws.String("Shard " + id + " not found")}
}

func (m *memKinesis) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["ListShards"]++
	var out kinesis.ListShardsOutput
	for _, s := range m.shards {
		sh := kintypes.Shard{ShardId: aws.String(s.id), SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String("0")}}
		if len(s.parents) > 0 {
			sh.ParentShardId = aws.String(s.parents[0])
		}
		if len(s.parents) > 1 {
			sh.AdjacentParentShardId = aws.String(s.parents[1])
		}
		if s.ending != "" {
			sh.SequenceNumberRange.EndingSequenceNumber = aws.String(s.ending)
		}
		out.Shards = append(out.Shards, sh)
	}
	return &out, nil
}

func (m *memKinesis) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["GetShardIterator"]++
	sh, err := m.shard(aws.ToString(in.ShardId))
	if err != nil {
		return nil, err
	}
	idx := sh.trimmed
	switch in.ShardIteratorType {
	case kintypes.ShardIteratorTypeAtSequenceNumber, kintypes.ShardIteratorTypeAfterSequenceNumber:
		seq := aws.ToString(in.StartingSequenceNumber)
		if m.at != nil {
			if idx, err = m.at(sh, seq); err != nil {
				return nil, err
			}
			break
		}
		// As internal/local/retention over kinesis-local: the position of the record (after) seq;
		// refused as trimmed when that record expired; refused as unknown when seq is no record.
		idx = -1
		for i := range sh.recs {
			if aws.ToString(sh.recs[i].SequenceNumber) == seq {
				idx = i
			}
		}
		if idx < 0 {
			return nil, &kintypes.ResourceNotFoundException{Message: aws.String("Unable to find record with provided SequenceNumber " + seq)}
		}
		if in.ShardIteratorType == kintypes.ShardIteratorTypeAfterSequenceNumber {
			idx++
		}
		if idx < sh.trimmed {
			return nil, &kintypes.InvalidArgumentException{Message: aws.String("StartingSequenceNumber " + seq + " is older than the trim horizon")}
		}
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(sh.id + "|" + strconv.Itoa(idx))}, nil
}

func (m *memKinesis) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["GetRecords"]++
	id, pos, ok := strings.Cut(aws.ToString(in.ShardIterator), "|")
	if !ok {
		return nil, &kintypes.InvalidArgumentException{Message: aws.String("bad iterator")}
	}
	sh, err := m.shard(id)
	if err != nil {
		return nil, err
	}
	i, _ := strconv.Atoi(pos)
	j := min(len(sh.recs), i+int(aws.ToInt32(in.Limit)))
	out := &kinesis.GetRecordsOutput{Records: append([]kintypes.Record(nil), sh.recs[i:j]...), MillisBehindLatest: aws.Int64(int64(len(sh.recs) - j))}
	if j < len(sh.recs) || sh.ending == "" {
		out.NextShardIterator = aws.String(sh.id + "|" + strconv.Itoa(j))
	}
	return out, nil
}

func (m *memKinesis) count(call string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[call]
}

// unit is a Reconciler over in-memory fakes and the pipeline's test stores.
type unit struct {
	kin    *memKinesis
	cps    *pipelinetest.Checkpoint
	ledger *pipelinetest.Ledger
	parker *pipelinetest.Parker
	rec    *recorder
	r      *Reconciler
}

const (
	ugroup  = "g"
	ustream = "s"
)

func ushard(id string) recordid.Shard {
	return recordid.Shard{Group: ugroup, Stream: ustream, ShardID: id}
}

func newUnit(t *testing.T, kin *memKinesis, cfg Config, opts ...Option) *unit {
	t.Helper()
	u := &unit{kin: kin, cps: &pipelinetest.Checkpoint{}, ledger: &pipelinetest.Ledger{}, parker: &pipelinetest.Parker{}, rec: newRecorder()}
	p, err := pipeline.New(u.ledger, &pipelinetest.Checkpoint{}, u.parker, u.rec.process, pipeline.Config{MaxRecordAttempts: 2, MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Group, cfg.Stream = ugroup, ustream
	if cfg.ReadInterval == 0 {
		cfg.ReadInterval = time.Microsecond
	}
	if cfg.PageLimit == 0 {
		cfg.PageLimit = 4
	}
	u.r, err = New(kin, u.cps, p, cfg, append([]Option{WithClock(later), WithLogger(discard())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// markDone records ids as processed by the consumer.
func (u *unit) markDone(t *testing.T, shardID string, idx ...int) {
	t.Helper()
	e := pipeline.Entry{Source: pipeline.SourceConsumer}
	for _, i := range idx {
		e.Done = append(e.Done, recordid.ID{ShardID: shardID, Seq: fakeSeq(i)})
	}
	e.First, e.Last = e.Done[0].Seq, e.Done[len(e.Done)-1].Seq
	if err := u.ledger.Record(context.Background(), ushard(shardID), e); err != nil {
		t.Fatal(err)
	}
}

func fakeIDs(shardID string, from, to int) []recordid.ID {
	var out []recordid.ID
	for i := from; i <= to; i++ {
		out = append(out, recordid.ID{ShardID: shardID, Seq: fakeSeq(i)})
	}
	return out
}

var errBoom = errors.New("boom")
