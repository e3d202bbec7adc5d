package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// One fan-out pass over a small two-shard stream through the real reconciler function and the
// local SQS event source: the coordinator queues both shards, each is walked by an invocation of
// its own, both end verified, and the cost counters saw the walk's reads and watermark writes.
func TestFanOut(t *testing.T) {
	t.Parallel()
	c, tb := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := FanOut(ctx, c, tb, Nonce(), FanOutSpec{Shards: 2, PerShard: 50, RecordBytes: 1000})
	if err != nil {
		t.Fatalf("%v (%+v)", err, res)
	}
	t.Logf("%+v", res)
	if res.ShardsQueued != 2 || res.ShardsDone != 2 || res.Walks < 2 || res.FailedWalks != 0 {
		t.Errorf("queued %d done %d walks %d failed %d, want 2, 2, ≥2, 0", res.ShardsQueued, res.ShardsDone, res.Walks, res.FailedWalks)
	}
	if res.GetRecords < 2 || res.DDBCalls == 0 || res.WriteUnits == 0 || res.GBSeconds <= 0 {
		t.Errorf("cost counters empty: %+v", res)
	}
}

// BenchmarkFanOut times one fan-out pass (coordinator, then one walk per shard at once): at the
// deployed 1 MiB/s per walk over 1, 2, 4 and 8 shards of 120 records of 100 KB (12 MB a shard,
// about 12 s a walk), where the local Kinesis emulator's own rate, about 1.2 MB/s in all, caps
// every row past one shard; and at 48 KiB/s per walk over 1, 2, 4, 8 and 16 shards of 30
// records of 100 KB (about 62 s a walk), 0.8 MB/s at 16 shards, which the emulator serves to
// every shard at once, so those rows show how the fan-out itself scales. A row of 2 shards ×
// 12,000 records of 1 KB gives the cost per record of small records. docs/benchmarks.md
// records the results and the command (make bench-fanout).
func BenchmarkFanOut(b *testing.B) {
	const slow = 48 << 10
	cases := []FanOutSpec{
		{Shards: 1, PerShard: 120, RecordBytes: 100_000}, {Shards: 2, PerShard: 120, RecordBytes: 100_000},
		{Shards: 4, PerShard: 120, RecordBytes: 100_000}, {Shards: 8, PerShard: 120, RecordBytes: 100_000},
		{Shards: 2, PerShard: 12_000, RecordBytes: 1_000},
	}
	for _, n := range []int{1, 2, 4, 8, 16} {
		cases = append(cases, FanOutSpec{Shards: n, PerShard: 30, RecordBytes: 100_000, WalkBytesPerSecond: slow})
	}
	for _, tc := range cases {
		rate := "1MiBps"
		if tc.WalkBytesPerSecond > 0 {
			rate = fmt.Sprintf("%dKiBps", tc.WalkBytesPerSecond>>10)
		}
		b.Run(fmt.Sprintf("walk=%s/shards=%d/records=%dx%dB", rate, tc.Shards, tc.PerShard, tc.RecordBytes), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				c, tb := setup(b)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
				b.StartTimer()
				res, err := FanOut(ctx, c, tb, Nonce(), tc)
				b.StopTimer()
				cancel()
				if err != nil {
					b.Fatalf("%v (%+v)", err, res)
				}
				records := float64(tc.Shards * tc.PerShard)
				b.ReportMetric(res.Seconds, "pass-s")
				b.ReportMetric(res.MBPerSecond, "MB/s")
				b.ReportMetric(float64(res.ShardsDone), "shards-done")
				b.ReportMetric(float64(res.Walks), "walks")
				b.ReportMetric(float64(res.FailedWalks), "failed-walks")
				b.ReportMetric(res.GBSeconds*1e6/records, "GB-s/Mrec")
				b.ReportMetric(res.ReadUnits*1e6/records, "RCU/Mrec")
				b.ReportMetric(res.WriteUnits*1e6/records, "WCU/Mrec")
				b.ReportMetric(float64(res.DDBCalls)/float64(res.Walks), "ddb-calls/walk")
				b.ReportMetric(float64(res.GetRecords), "get-records")
			}
		})
	}
}
