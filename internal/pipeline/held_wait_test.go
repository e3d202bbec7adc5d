package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// A record held by the live marker of an earlier invocation that the lane rule cannot take for
// dead (a racing mapping's batch with other bounds) is waited for inside the invocation, while
// time remains, instead of being reported failed at once: the local mapping retries a partial
// failure within 100 ms, so a held record spent the mapping's MaximumRetryAttempts while the
// other invocation was still running it, and the mapping gave the batch up. Once the other
// invocation's entry completes its marker, the record is done and skipped; nothing fails.
func TestHeldRecordsWaitForTheEarlierInvocation(t *testing.T) {
	e := newEnv()
	ctx := context.Background()
	now := time.Now()
	other := pipeline.Marker{Nonce: "racing", First: seq(2), Last: seq(10), IDs: []recordid.ID{id(2), id(3)},
		Started: now.Add(-time.Second), Deadline: now.Add(time.Minute), Source: pipeline.SourceConsumer}
	if err := e.ledger.Mark(ctx, shard, other); err != nil {
		t.Fatal(err)
	}

	p := e.batchPipeline(t, &sink{}, cfg(), 10)
	go func() {
		time.Sleep(300 * time.Millisecond) // the racing invocation finishes its batch
		if err := e.ledger.Record(ctx, shard, pipeline.Entry{First: seq(2), Last: seq(10), Done: []recordid.ID{id(2), id(3)},
			Source: pipeline.SourceConsumer, Nonce: other.Nonce}); err != nil {
			t.Error(err)
		}
	}()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := p.Run(rctx, batch(4, oneKey))
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.InFlightSkipped != 0 || res.Processed != 2 || res.DuplicatesSkipped != 2 {
		t.Errorf("result = %+v, want 1 and 4 processed, 2 and 3 skipped as done by the racing invocation", res)
	}
}
