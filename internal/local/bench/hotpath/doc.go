// Package hotpath holds the testing.B benchmarks of the consumer's hot paths that no other
// package already has: event decoding, the whole consumer handler in memory, and the two
// baseline handlers. It has no code of its own. `make bench-go` runs these together with the
// existing ones (internal/seqnum, internal/kpl, internal/dedupe, internal/pipeline) with
// -count=6 for benchstat; docs/benchmarks.md lists them.
package hotpath
