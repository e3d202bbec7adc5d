package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

// BenchmarkRun measures the pipeline's own cost per record with in-memory stores and a no-op
// Process: one Lookup, the key lanes, one Record, one Advance. Reported: ns/record and
// allocs/record (whole batch, stores included).
//
//	go test -run '^$' -bench BenchmarkRun -benchtime 2s ./internal/pipeline/
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		for _, keys := range []int{1, 100} {
			b.Run(fmt.Sprintf("records=%d/keys=%d", n, keys), func(b *testing.B) {
				batch := batch(n, func(i int) string { return fmt.Sprint("key-", i%keys) })
				noop := func(context.Context, pipeline.Record) error { return nil }
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				b.ResetTimer()
				for b.Loop() {
					// Fresh stores each time, or the second run would skip everything as done.
					p, err := pipeline.New(&pipelinetest.Ledger{}, &pipelinetest.Checkpoint{}, &pipelinetest.Parker{}, noop, pipeline.DefaultConfig())
					if err != nil {
						b.Fatal(err)
					}
					res, err := p.Run(context.Background(), batch)
					if err != nil || res.Processed != n {
						b.Fatalf("%+v %v", res, err)
					}
				}
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				total := float64(b.N) * float64(n)
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/record")
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/total, "allocs/record")
			})
		}
	}
}
