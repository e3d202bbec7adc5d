package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// batchOf turns a ProcessFunc into a BatchFunc (one outcome per record, in order).
func batchOf(f pipeline.ProcessFunc) pipeline.BatchFunc {
	return func(ctx context.Context, recs []pipeline.Record) []error {
		errs := make([]error, len(recs))
		for j, r := range recs {
			errs[j] = f(ctx, r)
		}
		return errs
	}
}

// TestHoldKeyBatchWaves: ON_PARK=hold-key with a batch sink. K's first record is parked (its
// attempt failed in the sink, or it did not decode) and holds K: the later records of K in the
// batch and in the next batch are parked behind it without reaching the sink, J goes on. Failed
// before the fix (the waves ignored holds): K's later records were handed to the sink in the
// next waves.
func TestHoldKeyBatchWaves(t *testing.T) {
	for _, tc := range []struct {
		name   string
		poison bool // the head fails in the sink; otherwise it does not decode
	}{{"sink failure", true}, {"decode error", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, h := newEnv(), &memHolder{}
			var a *applied
			if tc.poison {
				a = newApplied(id(1))
			} else {
				a = newApplied()
			}
			c := cfg()
			c.MaxRecordAttempts = 1
			p := e.pipeline(t, nil, c, pipeline.WithHoldKey(h), pipeline.WithBatchSink(batchOf(a.process), 10))
			run := func(recs ...pipeline.Record) pipeline.Result {
				t.Helper()
				res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: recs})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			K, J := "K", "J"
			head := rec(shard.ShardID, 1, K)
			if !tc.poison {
				head.DecodeErr = errors.New("malformed")
			}
			r1 := run(head, rec(shard.ShardID, 2, J), rec(shard.ShardID, 3, K), rec(shard.ShardID, 4, J), rec(shard.ShardID, 5, K))
			if r1.Parked != 3 || r1.HeldParked != 2 || r1.Processed != 2 || r1.Failed != 0 {
				t.Errorf("batch 1: %+v", r1)
			}
			if r2 := run(rec(shard.ShardID, 6, K), rec(shard.ShardID, 7, J)); r2.HeldParked != 1 || r2.Processed != 1 {
				t.Errorf("batch 2: %+v", r2)
			}
			if v := overtaken(a, e.parker.Records()); v != "" {
				t.Fatal(v)
			}
			if got := a.of(K); len(got) != 0 {
				t.Fatalf("applied of K while held: %v", got)
			}
			if got := len(a.of(J)); got != 3 {
				t.Fatalf("J applied %d records, want 3: other keys go on", got)
			}
		})
	}
}
