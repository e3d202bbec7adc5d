package retention_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/retention"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis))
}

// TestTrimHorizon drives kinesis-local through the proxy: after the horizon passes the first
// records, no read path returns them and positions before the horizon are refused as AWS does.
func TestTrimHorizon(t *testing.T) {
	ctx := context.Background()
	direct := stacktest.Kinesis(t)
	stream, _ := stacktest.Stream(t, 1)
	p, err := retention.Start(os.Getenv("AWS_ENDPOINT_URL_KINESIS"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	kin := kinesis.NewFromConfig(stacktest.Config(t), func(o *kinesis.Options) { o.BaseEndpoint = aws.String(p.URL()) })

	put := func(n int) []string {
		var seqs []string
		for i := range n {
			out, err := direct.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("k"), Data: []byte{byte(i)}})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, aws.ToString(out.SequenceNumber))
		}
		return seqs
	}
	old := put(5)
	// Arrival times have millisecond resolution: leave a gap between the two generations.
	time.Sleep(20 * time.Millisecond)
	cut := time.Now()
	time.Sleep(20 * time.Millisecond)
	kept := put(3)

	shards, err := kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	shard := aws.ToString(shards.Shards[0].ShardId)
	start := aws.ToString(shards.Shards[0].SequenceNumberRange.StartingSequenceNumber)

	read := func(typ types.ShardIteratorType, seq string) ([]string, error) {
		in := &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: typ}
		if seq != "" {
			in.StartingSequenceNumber = aws.String(seq)
		}
		it, err := kin.GetShardIterator(ctx, in)
		if err != nil {
			return nil, err
		}
		out, err := kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []string
		for _, r := range out.Records {
			seqs = append(seqs, aws.ToString(r.SequenceNumber))
		}
		return seqs, nil
	}
	// An iterator taken before the trim reads only what is still held after it.
	early, err := kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := read(types.ShardIteratorTypeTrimHorizon, ""); err != nil || len(got) != 8 {
		t.Fatalf("before the trim: %v %v, want all 8 records", got, err)
	}

	p.ExpireBefore(cut)

	trimmedErr := func(name string, err error) {
		t.Helper()
		var inval *types.InvalidArgumentException
		if !errors.As(err, &inval) {
			t.Errorf("%s: %v, want InvalidArgumentException", name, err)
		}
	}
	cases := []struct {
		name    string
		typ     types.ShardIteratorType
		seq     string
		want    []string
		refused bool
	}{
		{"TRIM_HORIZON starts at the oldest record held", types.ShardIteratorTypeTrimHorizon, "", kept, false},
		{"AT a trimmed record", types.ShardIteratorTypeAtSequenceNumber, old[0], nil, true},
		{"AFTER a trimmed record followed by a trimmed one", types.ShardIteratorTypeAfterSequenceNumber, old[3], nil, true},
		{"AFTER the last trimmed record", types.ShardIteratorTypeAfterSequenceNumber, old[4], kept, false},
		{"AT the first record held", types.ShardIteratorTypeAtSequenceNumber, kept[0], kept, false},
		{"AT the shard's starting sequence number", types.ShardIteratorTypeAtSequenceNumber, start, nil, true},
	}
	for _, tc := range cases {
		got, err := read(tc.typ, tc.seq)
		if tc.refused {
			trimmedErr(tc.name, err)
			continue
		}
		if err != nil || !equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	out, err := kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: early.ShardIterator})
	if err != nil || len(out.Records) != 3 || aws.ToString(out.Records[0].SequenceNumber) != kept[0] {
		t.Errorf("iterator taken before the trim: %d records %v", len(out.Records), err)
	}
	trimmed, err := p.Trimmed(ctx, stream)
	if err != nil || len(trimmed) != len(old) {
		t.Fatalf("Trimmed: %v %v, want the 5 old records", trimmed, err)
	}
	for i, r := range trimmed {
		if r.SequenceNumber != old[i] || r.ShardID != shard {
			t.Errorf("trimmed[%d] = %+v, want %s", i, r, old[i])
		}
	}
	if s := p.Stats(); s.Refused != 3 || s.RecordsHidden == 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestRetentionFollowsTheClock: SetRetention makes the horizon move with the clock.
func TestRetentionFollowsTheClock(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p, err := retention.Start("http://127.0.0.1:1", retention.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Horizon().IsZero() {
		t.Fatal("horizon set before any retention")
	}
	p.SetRetention(time.Minute)
	if h := p.Horizon(); !h.Equal(now.Add(-time.Minute)) {
		t.Errorf("horizon %v", h)
	}
	now = now.Add(time.Hour)
	if h := p.Horizon(); !h.Equal(now.Add(-time.Minute)) {
		t.Errorf("horizon %v did not follow the clock", h)
	}
	p.SetRetention(0) // stops moving; never moves back
	now = now.Add(time.Hour)
	if h := p.Horizon(); !h.Equal(now.Add(-time.Hour - time.Minute)) {
		t.Errorf("horizon %v after retention off", h)
	}
	p.ExpireBefore(time.Time{})
	if h := p.Horizon(); !h.Equal(now.Add(-time.Hour - time.Minute)) {
		t.Errorf("horizon moved back to %v", h)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
