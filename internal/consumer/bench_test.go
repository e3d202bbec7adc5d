package consumer

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

// BenchmarkHandleJSON measures the whole handler per record with in-memory stores and a no-op
// Process: JSON and base64 decoding, validation, KPL detection, the pipeline, the response and
// the EMF line.
//
//	go test -run '^$' -bench BenchmarkHandleJSON -benchtime 2s ./internal/consumer/
func BenchmarkHandleJSON(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			recs := make([]rec, n)
			for i := range recs {
				recs[i] = rec{seq: fixtures.Seq(i), pk: fixtures.PartitionKeys[i%3], data: fixtures.OrderPayload(i)}
			}
			raw := mkEvent(b, recs...)
			noop := func(context.Context, pipeline.Record) error { return nil }
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for b.Loop() {
				p, err := pipeline.New(&pipelinetest.Ledger{}, &pipelinetest.Checkpoint{}, &pipelinetest.Parker{}, noop, pipeline.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				resp, err := NewHandler(p, "bench", nil).HandleJSON(context.Background(), raw)
				if err != nil || len(resp.BatchItemFailures) != 0 {
					b.Fatalf("%+v %v", resp, err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			total := float64(b.N) * float64(n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/record")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/total, "allocs/record")
			b.SetBytes(int64(len(raw)))
		})
	}
}
