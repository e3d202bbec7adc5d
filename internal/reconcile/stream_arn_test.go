package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// arnOnly is a Kinesis client that fails the test on any call naming the stream by name: with
// Config.StreamARN set, every call must carry the ARN (a stream in another account is reachable
// only that way).
type arnOnly struct {
	*kinesis.Client
	t     *testing.T
	arn   string
	mu    sync.Mutex
	calls map[string]int
}

func (k *arnOnly) check(op string, name, arn *string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls[op]++
	if name != nil || aws.ToString(arn) != k.arn {
		k.t.Errorf("%s named the stream %q / ARN %q, want only the ARN %s", op, aws.ToString(name), aws.ToString(arn), k.arn)
	}
}

func (k *arnOnly) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if in.NextToken == nil {
		k.check("ListShards", in.StreamName, in.StreamARN)
	}
	return k.Client.ListShards(ctx, in, o...)
}

func (k *arnOnly) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	k.check("GetShardIterator", in.StreamName, in.StreamARN)
	return k.Client.GetShardIterator(ctx, in, o...)
}

func (k *arnOnly) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	k.check("GetRecords", nil, in.StreamARN)
	return k.Client.GetRecords(ctx, in, o...)
}

// TestPassByStreamARN: a reconciler configured with the stream's ARN (STREAM_ARN) reads the
// stream through the ARN only, against the local Kinesis, and replays the gaps as by name.
func TestPassByStreamARN(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	_, missing := gapped(t, s, 30, func(i int) bool { return i < 10 || i >= 20 })
	desc, err := s.kin.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.stream)})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(desc.StreamDescriptionSummary.StreamARN)
	kin := &arnOnly{Client: s.kin, t: t, arn: arn, calls: map[string]int{}}
	rec := newRecorder()
	r, err := New(kin, s.cps, s.pipeline(rec.process, 3),
		Config{Group: s.group, Stream: s.stream, StreamARN: arn, SettleAfter: 30 * time.Minute, ReadInterval: time.Millisecond},
		WithClock(later), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkOnce(t, "reconciler by ARN", rec.counts(), idsOf(missing))
	if rep.GapsReplayed != len(missing) {
		t.Errorf("GapsReplayed %d, want %d", rep.GapsReplayed, len(missing))
	}
	for _, op := range []string{"ListShards", "GetShardIterator", "GetRecords"} {
		if kin.calls[op] == 0 {
			t.Errorf("no %s call seen: the check proves nothing", op)
		}
	}
}
