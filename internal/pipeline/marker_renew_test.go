package pipeline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestRenewedMarkerNamesTheBatch: Run drops its copy of the batch's ids once the marker is
// written (memory: 40 bytes a record held for the whole run) and rebuilds it for each renewal.
// A renewed marker must still name every record of the batch, or a run that dies after a
// renewal would charge its records no death and a killer would never be isolated.
func TestRenewedMarkerNamesTheBatch(t *testing.T) {
	const lease = 300 * time.Millisecond
	for _, mode := range []string{"process", "batch sink"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv()
			b := batch(3, oneKey)
			start := time.Now()
			var named []recordid.ID
			process := func(ctx context.Context, r pipeline.Record) error {
				if r.ID.Seq != seq(1) {
					return nil
				}
				for { // until a renewal pushed the marker past its first lease
					ms := e.ledger.Markers(shard)
					if len(ms) == 1 && ms[0].Deadline.After(start.Add(lease+lease/4)) {
						named = ms[0].IDs
						return nil
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
			opts := []pipeline.Option{pipeline.WithMarkerLease(lease)}
			if mode == "batch sink" {
				opts = append(opts, pipeline.WithBatchSink(batchOf(process), 10))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := e.pipeline(t, process, cfg(), opts...).Run(ctx, b)
			if err != nil || res.Processed != 3 {
				t.Fatalf("%+v %v", res, err)
			}
			var want []recordid.ID
			for _, r := range b.Records {
				want = append(want, r.ID)
			}
			if !slices.Equal(named, want) {
				t.Errorf("renewed marker names %v, want every record of the batch %v", named, want)
			}
		})
	}
}
