package hotpath_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/bench"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

var sizes = []int{100, 10_000}

func payload(b *testing.B, n int) []byte {
	b.Helper()
	w := bench.Workload{Stream: "hot", ShardID: "shardId-000000000000"}
	raw, err := w.Payload(0, 1, 0, n)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// perRecord reports ns/record next to ns/op.
func perRecord(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
}

// BenchmarkDecodeEvent is what the Lambda runtime does before a typed handler runs:
// json.Unmarshal of the invocation payload into events.KinesisEvent (base64 data included).
// It is the floor every handler pays.
func BenchmarkDecodeEvent(b *testing.B) {
	for _, n := range sizes {
		raw := payload(b, n)
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				var ev events.KinesisEvent
				if err := json.Unmarshal(raw, &ev); err != nil || len(ev.Records) != n {
					b.Fatal(err)
				}
			}
			perRecord(b, n)
		})
	}
}

// BenchmarkBare: decoding plus the stateless recipe with bench.Checksum as Process.
func BenchmarkBare(b *testing.B) {
	for _, n := range sizes {
		raw := payload(b, n)
		h := baseline.Bare(bench.Checksum, baseline.WithConcurrency(bench.Concurrency))
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				var ev events.KinesisEvent
				if err := json.Unmarshal(raw, &ev); err != nil {
					b.Fatal(err)
				}
				if resp, err := h(context.Background(), ev); err != nil || len(resp.BatchItemFailures) > 0 {
					b.Fatalf("%+v %v", resp, err)
				}
			}
			perRecord(b, n)
		})
	}
}

// nullDynamo answers like an empty table that accepts every write, without a network: it
// leaves the real ledger's and checkpoint's client-side work (item building, set encoding,
// sizing) in the measurement and takes the SDK and the network out.
type nullDynamo struct{}

func (nullDynamo) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return &dynamodb.PutItemOutput{}, nil
}
func (nullDynamo) BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return &dynamodb.BatchWriteItemOutput{}, nil
}
func (nullDynamo) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return &dynamodb.QueryOutput{}, nil
}
func (nullDynamo) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, nil
}
func (nullDynamo) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, nil
}
func (nullDynamo) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, nil
}

// BenchmarkConsumerNullDynamo: the consumer handler (its own decoding, the pipeline) with the
// real ledger (internal/dedupe) and checkpoint mirror over nullDynamo, and bench.Checksum as
// Process: everything gapless does on the client except the SDK and the network. Compare with
// BenchmarkBare for the framework's CPU cost over decoding.
func BenchmarkConsumerNullDynamo(b *testing.B) {
	for _, n := range sizes {
		raw := payload(b, n)
		p, err := pipeline.New(pipeline.DedupeLedger{L: dedupe.New(nullDynamo{}, "ledger")},
			pipeline.CheckpointStore{S: checkpoint.New(nullDynamo{}, "checkpoint")},
			&pipelinetest.Parker{}, bench.Checksum, pipeline.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		h := consumer.NewHandler(p, "g", nil)
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := h.HandleJSON(context.Background(), raw); err != nil || len(resp.BatchItemFailures) > 0 {
					b.Fatalf("%+v %v", resp, err)
				}
			}
			perRecord(b, n)
		})
	}
}

// BenchmarkIdempotencyKey: the baseline's per-record key (md5 of the JSON of the event id).
func BenchmarkIdempotencyKey(b *testing.B) {
	id := "shardId-000000000000:49590338271490256608559692538361571095921575989136588898"
	b.ReportAllocs()
	for b.Loop() {
		_ = baseline.Key("bench", id)
	}
}
