package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// One fan-out pass over a small two-shard stream through the real reconciler function and the
// local SQS event source: the coordinator queues both shards, each is walked by an invocation of
// its own, both end verified, and the cost counters saw the walk's reads and watermark writes.
func TestFanOut(t *testing.T) {
	c, tb := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := FanOut(ctx, c, tb, Nonce(), 2, 50, 1000)
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

// BenchmarkFanOut times one fan-out pass (coordinator, then one walk per shard at once) over
// streams of 1, 2, 4, 8 and 16 shards of 120 records of 100 KB each (12 MB a shard: each walk
// is paced at 1 MiB/s, so about 12 s), and of 2 shards of 12,000 records of 1 KB (the cost per
// record of small records). docs/benchmarks.md records the results and the command
// (make bench-fanout).
func BenchmarkFanOut(b *testing.B) {
	cases := []struct{ shards, per, bytes int }{
		{1, 120, 100_000}, {2, 120, 100_000}, {4, 120, 100_000}, {8, 120, 100_000}, {16, 120, 100_000},
		{2, 12_000, 1_000},
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("shards=%d/records=%dx%dB", tc.shards, tc.per, tc.bytes), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				c, tb := setupB(b)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
				b.StartTimer()
				res, err := FanOut(ctx, c, tb, Nonce(), tc.shards, tc.per, tc.bytes)
				b.StopTimer()
				cancel()
				if err != nil {
					b.Fatalf("%v (%+v)", err, res)
				}
				records := float64(tc.shards * tc.per)
				b.ReportMetric(res.Seconds, "pass-s")
				b.ReportMetric(res.MBPerSecond, "MB/s")
				b.ReportMetric(float64(res.ShardsDone), "shards-done")
				b.ReportMetric(float64(res.Walks), "walks")
				b.ReportMetric(res.GBSeconds*1e6/records, "GB-s/Mrec")
				b.ReportMetric(res.ReadUnits*1e6/records, "RCU/Mrec")
				b.ReportMetric(res.WriteUnits*1e6/records, "WCU/Mrec")
				b.ReportMetric(float64(res.DDBCalls)/float64(res.Walks), "ddb-calls/walk")
				b.ReportMetric(float64(res.GetRecords), "get-records")
			}
		})
	}
}

func setupB(b *testing.B) (Clients, Tables) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Clients{Config: stacktest.Config(b)}
	tb, err := Setup(ctx, c, Nonce())
	if err != nil {
		b.Fatal(err)
	}
	return c, tb
}
