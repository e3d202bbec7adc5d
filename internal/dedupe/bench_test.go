package dedupe

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Benchmarks. The figures and commands are in docs/ledger.md:
//
//	go test -run '^$' -bench 'Ledger' -benchtime 30x ./internal/dedupe      (local stack)
//	go test -run '^$' -bench 'Set|InMemory' -benchmem ./internal/dedupe     (in memory)

// spacing is how far apart consecutive records of a shard are.
type spacing struct {
	name string
	step func(r *rand.Rand) *big.Int
}

var spacings = []spacing{
	// The seed report's consecutive sequence numbers differ by 1, 2 or 3 times 2^80 (~1.2e24).
	{"seed", func(r *rand.Rand) *big.Int {
		return new(big.Int).Mul(big.NewInt(1+r.Int64N(3)), kinesisStep)
	}},
	// Pessimistic: deltas around 1.2e21 with random low bits, so no zero bytes to strip.
	{"random1.2e21", func(r *rand.Rand) *big.Int {
		d := new(big.Int).SetUint64(600_000_000_000 + r.Uint64N(1_200_000_000_000))
		d.Mul(d, big.NewInt(1_000_000_000))
		return d.Add(d, new(big.Int).SetUint64(r.Uint64N(1_000_000_000)))
	}},
}

// seqGen produces consecutive batches of record ids.
type seqGen struct {
	r    *rand.Rand
	step func(r *rand.Rand) *big.Int
	cur  *big.Int
}

func newSeqGen(s spacing) *seqGen {
	cur, _ := new(big.Int).SetString(seedSeq, 10)
	return &seqGen{r: rand.New(rand.NewPCG(1, 2)), step: s.step, cur: cur}
}

func (g *seqGen) batch(n int) []recordid.ID {
	out := make([]recordid.ID, n)
	for i := range out {
		g.cur.Add(g.cur, g.step(g.r))
		out[i] = rid(g.cur.String(), 0)
	}
	return out
}

var batchSizes = []int{1, 100, 1000, 10_000}

// BenchmarkLedgerHappyPath is one consumer invocation's ledger work against the local stack:
// Lookup of the batch range, Done for every record, Record of the whole batch.
func BenchmarkLedgerHappyPath(b *testing.B) {
	ctx := context.Background()
	for _, sp := range spacings {
		for _, n := range batchSizes {
			b.Run(fmt.Sprintf("%s/batch=%d", sp.name, n), func(b *testing.B) {
				l, _, m, _ := newStackLedger(b)
				gen := newSeqGen(sp)
				m.Reset()
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					batch := gen.batch(n)
					first, last := batch[0].Seq, batch[n-1].Seq
					b.StartTimer()
					r, err := l.Lookup(ctx, testShard, first, last)
					if err != nil {
						b.Fatal(err)
					}
					for _, id := range batch {
						if r.Done(id) {
							b.Fatalf("%s done before it was processed", id)
						}
					}
					if err := l.Record(ctx, testShard, Entry{First: first, Last: last, Source: SourceConsumer, Done: batch}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				reportLedgerMetrics(b, m.Snapshot().Total, n)
			})
		}
	}
}

// BenchmarkLedgerRetriedBatch is the Lookup of a batch that is already in the ledger (Lambda
// retrying it): the Query reads the whole entry and every record is found done.
func BenchmarkLedgerRetriedBatch(b *testing.B) {
	ctx := context.Background()
	for _, sp := range spacings {
		for _, n := range batchSizes {
			b.Run(fmt.Sprintf("%s/batch=%d", sp.name, n), func(b *testing.B) {
				l, _, m, _ := newStackLedger(b)
				batch := newSeqGen(sp).batch(n)
				first, last := batch[0].Seq, batch[n-1].Seq
				if err := l.Record(ctx, testShard, Entry{First: first, Last: last, Source: SourceConsumer, Done: batch}); err != nil {
					b.Fatal(err)
				}
				m.Reset()
				b.ResetTimer()
				for range b.N {
					r, err := l.Lookup(ctx, testShard, first, last)
					if err != nil {
						b.Fatal(err)
					}
					for _, id := range batch {
						if !r.Done(id) {
							b.Fatalf("%s not done", id)
						}
					}
				}
				b.StopTimer()
				reportLedgerMetrics(b, m.Snapshot().Total, n)
			})
		}
	}
}

func reportLedgerMetrics(b *testing.B, s ddbmeter.OpStats, n int) {
	batches := float64(b.N)
	b.ReportMetric(float64(s.Attempts)/batches, "roundtrips/batch")
	b.ReportMetric(s.WriteUnits/(batches*float64(n)), "WCU/record")
	b.ReportMetric(s.ReadUnits/batches, "RCU/batch")
	b.ReportMetric(float64(s.BytesWritten)/(batches*float64(n)), "bytes/record")
}

// BenchmarkAppendSet encodes a batch (in memory).
func BenchmarkAppendSet(b *testing.B) {
	for _, sp := range spacings {
		for _, n := range batchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", sp.name, n), func(b *testing.B) {
				batch := newSeqGen(sp).batch(n)
				buf := make([]byte, 0, 16*n+64)
				var size int
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					out, err := AppendSet(buf[:0], batch)
					if err != nil {
						b.Fatal(err)
					}
					size = len(out)
				}
				b.ReportMetric(float64(size)/float64(n), "bytes/record")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			})
		}
	}
}

// BenchmarkDecodeSet decodes a batch (in memory).
func BenchmarkDecodeSet(b *testing.B) {
	for _, sp := range spacings {
		for _, n := range batchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", sp.name, n), func(b *testing.B) {
				enc, err := AppendSet(nil, newSeqGen(sp).batch(n))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := DecodeSet(enc, testShardID); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			})
		}
	}
}

// BenchmarkLookupInMemory is Lookup plus a Done check per record against a fake client that
// returns the batch's entry: the CPU side of a retried batch.
func BenchmarkLookupInMemory(b *testing.B) {
	for _, sp := range spacings {
		for _, n := range batchSizes {
			b.Run(fmt.Sprintf("%s/n=%d", sp.name, n), func(b *testing.B) {
				batch := newSeqGen(sp).batch(n)
				first, last := batch[0].Seq, batch[n-1].Seq
				var item map[string]types.AttributeValue
				capture := fakeDynamo{put: func(in *dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
					item = in.Item
					return &dynamodb.PutItemOutput{}, nil
				}}
				if err := New(capture, "t").Record(context.Background(), testShard, Entry{First: first, Last: last, Source: SourceConsumer, Done: batch}); err != nil {
					b.Fatal(err)
				}
				out := &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{item}}
				l := New(fakeDynamo{query: func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) { return out, nil }}, "t")
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					r, err := l.Lookup(context.Background(), testShard, first, last)
					if err != nil {
						b.Fatal(err)
					}
					for _, id := range batch {
						if !r.Done(id) {
							b.Fatalf("%s not done", id)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
			})
		}
	}
}
