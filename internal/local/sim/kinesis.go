package sim

import (
	"context"
	"crypto/md5"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// iteratorLife is how long a shard iterator is valid ("A shard iterator expires 5 minutes after
// it is returned to the requester", Kinesis API reference, GetShardIterator).
const iteratorLife = 5 * time.Minute

// Kinesis is an in-memory stream: shards with sequence numbers spaced as Kinesis spaces them
// (56-digit decimals, increasing by large irregular steps, a shard's range starting below its
// first record and, once closed, ending above its last), a trim horizon that follows the clock
// (retention), splits, and the page and iterator rules of GetShardIterator and GetRecords as
// the retention proxy documents them.
type Kinesis struct {
	mu        sync.Mutex
	stream    string
	arn       string
	retention time.Duration
	shards    []*shard
	rng       *rand.Rand
	// trimmed: every record the horizon passed, by id, for the loss check.
	trimmed map[string]bool
	// crossed: GetRecords calls whose iterator pointed at a record trimmed since it was issued
	// (the page starts at the trim horizon instead), and the records they skipped.
	crossed, skipped int
}

type shard struct {
	id, parent  string
	start, end  *big.Int // end nil while open
	next        *big.Int // the next record's sequence number
	recs        []krec
	lo, hi      *big.Int // hash key range
	trimmedUpTo int      // recs[:trimmedUpTo] are gone
}

type krec struct {
	seq     string
	key     string
	data    []byte
	arrival time.Time
}

// NewKinesis returns a stream with n open shards.
func NewKinesis(stream string, n int, retention time.Duration, rng *rand.Rand) *Kinesis {
	k := &Kinesis{stream: stream, arn: "arn:aws:kinesis:us-east-1:123456789012:stream/" + stream,
		retention: retention, rng: rng, trimmed: map[string]bool{}}
	maxHash := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))
	step := new(big.Int).Div(maxHash, big.NewInt(int64(n)))
	for i := range n {
		lo := new(big.Int).Mul(step, big.NewInt(int64(i)))
		hi := new(big.Int).Sub(new(big.Int).Add(lo, step), big.NewInt(1))
		if i == n-1 {
			hi = maxHash
		}
		k.addShard("", lo, hi)
	}
	return k
}

// ARN is the stream's ARN.
func (k *Kinesis) ARN() string { return k.arn }

func (k *Kinesis) addShard(parent string, lo, hi *big.Int) *shard {
	// 4959 + 52 digits: the shape of a Kinesis sequence number; each shard starts above the
	// highest number any earlier shard used, as a child's numbers exceed its parent's.
	base, _ := new(big.Int).SetString("49590000000000000000000000000000000000000000000000000000", 10)
	for _, s := range k.shards {
		if s.next.Cmp(base) > 0 {
			base = new(big.Int).Set(s.next)
		}
	}
	start := new(big.Int).Add(base, k.step())
	s := &shard{id: fmt.Sprintf("shardId-%012d", len(k.shards)), parent: parent, start: start,
		next: new(big.Int).Add(start, k.step()), lo: lo, hi: hi}
	k.shards = append(k.shards, s)
	return s
}

func (k *Kinesis) step() *big.Int {
	return new(big.Int).Add(big.NewInt(1<<40), new(big.Int).Mul(big.NewInt(k.rng.Int64N(1<<20)), big.NewInt(1<<40)))
}

// Put appends a record to the open shard owning the key's hash and returns its shard and
// sequence number.
func (k *Kinesis) Put(key string, data []byte, now time.Time) (string, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := hashKey(key)
	for _, s := range k.shards {
		if s.end == nil && h.Cmp(s.lo) >= 0 && h.Cmp(s.hi) <= 0 {
			seq := s.next.String()
			s.recs = append(s.recs, krec{seq: seq, key: key, data: append([]byte(nil), data...), arrival: now})
			s.next = new(big.Int).Add(s.next, k.step())
			return s.id, seq
		}
	}
	panic("no open shard for key " + key)
}

// Split closes the open shard i and opens two children sharing its hash range.
func (k *Kinesis) Split() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var open []*shard
	for _, s := range k.shards {
		if s.end == nil {
			open = append(open, s)
		}
	}
	p := open[k.rng.IntN(len(open))]
	p.end = new(big.Int).Add(p.next, k.step())
	mid := new(big.Int).Rsh(new(big.Int).Add(p.lo, p.hi), 1)
	k.addShard(p.id, p.lo, mid)
	k.addShard(p.id, new(big.Int).Add(mid, big.NewInt(1)), p.hi)
	return p.id
}

// Trim moves the horizon to now - retention.
func (k *Kinesis) Trim(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	horizon := now.Add(-k.retention)
	for _, s := range k.shards {
		for s.trimmedUpTo < len(s.recs) && s.recs[s.trimmedUpTo].arrival.Before(horizon) {
			r := s.recs[s.trimmedUpTo]
			k.trimmed[s.id+"/"+r.seq] = true
			s.trimmedUpTo++
		}
	}
}

// Trimmed reports whether the horizon passed the record.
func (k *Kinesis) Trimmed(shardID, seq string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.trimmed[shardID+"/"+seq]
}

// Crossed reports the GetRecords calls whose iterator the trim horizon had passed, and the
// records they skipped.
func (k *Kinesis) Crossed() (calls, skipped int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.crossed, k.skipped
}

// AllRecords lists every record ever put, by shard.
func (k *Kinesis) AllRecords() map[string][]krec {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string][]krec{}
	for _, s := range k.shards {
		out[s.id] = append([]krec(nil), s.recs...)
	}
	return out
}

func hashKey(key string) *big.Int {
	sum := md5sum([]byte(key))
	return new(big.Int).SetBytes(sum[:])
}

func (k *Kinesis) shard(id *string) (*shard, error) {
	for _, s := range k.shards {
		if s.id == aws.ToString(id) {
			return s, nil
		}
	}
	return nil, &types.ResourceNotFoundException{Message: aws.String("shard " + aws.ToString(id) + " not found")}
}

func (k *Kinesis) checkStream(name, arn *string) error {
	if aws.ToString(name) != k.stream && aws.ToString(arn) != k.arn {
		return &types.ResourceNotFoundException{Message: aws.String("stream not found")}
	}
	return nil
}

// DescribeStreamSummary describes the stream.
func (k *Kinesis) DescribeStreamSummary(_ context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.checkStream(in.StreamName, in.StreamARN); err != nil {
		return nil, err
	}
	open := 0
	for _, s := range k.shards {
		if s.end == nil {
			open++
		}
	}
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName: aws.String(k.stream), StreamARN: aws.String(k.arn), StreamStatus: types.StreamStatusActive,
		RetentionPeriodHours: aws.Int32(int32(k.retention / time.Hour)), OpenShardCount: aws.Int32(int32(open)),
		StreamCreationTimestamp: aws.Time(time.Unix(0, 0)),
	}}, nil
}

// ListShards lists every shard, open and closed, in one page.
func (k *Kinesis) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if in.NextToken != nil {
		return &kinesis.ListShardsOutput{}, nil
	}
	if err := k.checkStream(in.StreamName, in.StreamARN); err != nil {
		return nil, err
	}
	out := &kinesis.ListShardsOutput{}
	for _, s := range k.shards {
		sh := types.Shard{ShardId: aws.String(s.id),
			HashKeyRange:        &types.HashKeyRange{StartingHashKey: aws.String(s.lo.String()), EndingHashKey: aws.String(s.hi.String())},
			SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: aws.String(s.start.String())}}
		if s.parent != "" {
			sh.ParentShardId = aws.String(s.parent)
		}
		if s.end != nil {
			sh.SequenceNumberRange.EndingSequenceNumber = aws.String(s.end.String())
		}
		out.Shards = append(out.Shards, sh)
	}
	return out, nil
}

// firstAtOrAfter is the index of the first record with sequence >= seq (after: > seq).
func (s *shard) firstAtOrAfter(seq *big.Int, after bool) int {
	return sort.Search(len(s.recs), func(i int) bool {
		c := bigOf(s.recs[i].seq).Cmp(seq)
		return c > 0 || (c == 0 && !after)
	})
}

func bigOf(s string) *big.Int {
	b, _ := new(big.Int).SetString(s, 10)
	return b
}

// GetShardIterator positions an iterator. AT/AFTER_SEQUENCE_NUMBER whose next record was
// trimmed is InvalidArgumentException; a number that is no record of the shard is
// InvalidArgumentException too only when outside the shard's range.
func (k *Kinesis) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.checkStream(in.StreamName, in.StreamARN); err != nil {
		return nil, err
	}
	s, err := k.shard(in.ShardId)
	if err != nil {
		return nil, err
	}
	var idx int
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
		idx = s.trimmedUpTo
	case types.ShardIteratorTypeLatest:
		idx = len(s.recs)
	case types.ShardIteratorTypeAtTimestamp:
		t := aws.ToTime(in.Timestamp)
		idx = sort.Search(len(s.recs), func(i int) bool { return !s.recs[i].arrival.Before(t) })
		idx = max(idx, s.trimmedUpTo)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		seq, ok := new(big.Int).SetString(aws.ToString(in.StartingSequenceNumber), 10)
		if !ok {
			return nil, &types.InvalidArgumentException{Message: aws.String("StartingSequenceNumber is not a number")}
		}
		if seq.Cmp(s.start) < 0 || (s.end != nil && seq.Cmp(s.end) > 0) {
			return nil, &types.InvalidArgumentException{Message: aws.String("StartingSequenceNumber is outside the shard's range")}
		}
		idx = s.firstAtOrAfter(seq, in.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber)
		if idx < s.trimmedUpTo {
			return nil, &types.InvalidArgumentException{Message: aws.String(fmt.Sprintf(
				"StartingSequenceNumber %s used in GetShardIterator on shard %s is older than the trim horizon", seq, s.id))}
		}
	default:
		return nil, &types.InvalidArgumentException{Message: aws.String("ShardIteratorType " + string(in.ShardIteratorType))}
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(iterator(s.id, idx, now()))}, nil
}

func now() time.Time { return time.Now() }

func iterator(shardID string, idx int, at time.Time) string {
	return shardID + "|" + strconv.Itoa(idx) + "|" + strconv.FormatInt(at.UnixNano(), 10)
}

// GetRecords returns a page from an iterator: never a trimmed record, up to Limit (10,000),
// with NextShardIterator nil once a closed shard is read to its end.
func (k *Kinesis) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	parts := strings.Split(aws.ToString(in.ShardIterator), "|")
	if len(parts) != 3 {
		return nil, &types.InvalidArgumentException{Message: aws.String("invalid ShardIterator")}
	}
	s, err := k.shard(aws.String(parts[0]))
	if err != nil {
		return nil, err
	}
	idx, _ := strconv.Atoi(parts[1])
	issued, _ := strconv.ParseInt(parts[2], 10, 64)
	t := now()
	if t.Sub(time.Unix(0, issued)) > iteratorLife {
		return nil, &types.ExpiredIteratorException{Message: aws.String("Iterator expired")}
	}
	if idx < s.trimmedUpTo {
		k.crossed++
		k.skipped += s.trimmedUpTo - idx
		idx = s.trimmedUpTo
	}
	limit := 10000
	if in.Limit != nil && *in.Limit > 0 {
		limit = int(*in.Limit)
	}
	end := min(len(s.recs), idx+limit)
	out := &kinesis.GetRecordsOutput{Records: []types.Record{}}
	for _, r := range s.recs[idx:end] {
		out.Records = append(out.Records, types.Record{SequenceNumber: aws.String(r.seq), PartitionKey: aws.String(r.key),
			Data: append([]byte(nil), r.data...), ApproximateArrivalTimestamp: aws.Time(r.arrival)})
	}
	if s.end == nil || end < len(s.recs) {
		out.NextShardIterator = aws.String(iterator(s.id, end, t))
	}
	behind := int64(0)
	if end < len(s.recs) {
		behind = max(t.Sub(s.recs[end].arrival).Milliseconds(), 1)
	}
	out.MillisBehindLatest = aws.Int64(behind)
	return out, nil
}

func md5sum(b []byte) [16]byte { return md5.Sum(b) }

// EndingSeq is a closed shard's ending sequence number, as ListShards reports it ("" while the
// shard is open or unknown).
func (k *Kinesis) EndingSeq(shardID string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.shards {
		if s.id == shardID && s.end != nil {
			return s.end.String()
		}
	}
	return ""
}
