// Package checksum is the Process every benchmarked handler runs, in process and in the
// bench bootstraps alike: FNV-1a over the record's data, folded into a counter so the compiler
// cannot drop it. It touches every byte of the payload and does no I/O, so the benchmark
// measures the framework around Process, not a downstream service.
package checksum

import (
	"context"
	"hash/fnv"
	"sync/atomic"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

var sum atomic.Uint64

// Process hashes r.Data. It never fails.
func Process(_ context.Context, r pipeline.Record) error {
	h := fnv.New64a()
	_, _ = h.Write(r.Data) // hash.Hash never fails
	sum.Add(h.Sum64())
	return nil
}

// Sum is the running total of all hashes (so the work is observable).
func Sum() uint64 { return sum.Load() }

var _ pipeline.ProcessFunc = Process
