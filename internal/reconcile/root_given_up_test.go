package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// TestRootTheMappingGaveUpIsReplayed: a stream of one shard (the root of its lineage, no
// parents) whose every batch the local mapping (TRIM_HORIZON) gives up: each invocation crashes
// past MaximumRetryAttempts 1 and every on-failure delivery fails. No batch succeeds, so the
// shard never gets a checkpoint row, and no shard of its lineage does. On the old code a pass
// left such a shard alone ("nothing consumed yet") and its records expired with the stream,
// not even counted lost. With StartingPosition TRIM_HORIZON every record of the stream is the
// mapping's: the pass verifies the shard from its first record held, as a tail (due once older
// than TailAfter), and replays each record exactly once.
func TestRootTheMappingGaveUpIsReplayed(t *testing.T) {
	t.Parallel()

	s := newStack(t, 1)
	s.waitActive()
	recs := s.putN(12, "R", keyMod(3), nil)
	rec := newRecorder()
	s.runGivingUp(t, rec, recs)
	checkOnce(t, "mapping", rec.counts(), nil)
	shardID := recs[0].shard
	if _, err := s.cps.Get(context.Background(), s.shard(shardID)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("shard %s: checkpoint row %v, want none (every batch given up)", shardID, err)
	}

	// Two passes, an hour later (past MaximumRecordAge 10m + settle 30m).
	r := s.reconciler(s.pipeline(rec.process, 3), Config{MaxRecordAge: 10 * time.Minute})
	var replayed, tail int
	for range 2 {
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		replayed += rep.GapsReplayed
		tail += rep.TailReplayed
	}
	checkOnce(t, "mapping and reconciler together", rec.counts(), idsOf(recs))
	if replayed != len(recs) || tail != len(recs) {
		t.Errorf("GapsReplayed %d, TailReplayed %d, want %d each (the records given up)", replayed, tail, len(recs))
	}
	if st := s.state(shardID); st.Watermark != recs[len(recs)-1].seq {
		t.Errorf("watermark %q, want the last record %s", st.Watermark, recs[len(recs)-1].seq)
	}
}
