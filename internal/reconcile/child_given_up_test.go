package reconcile

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// TestChildTheMappingGaveUpIsReplayed: a shard is split; the local mapping reads the parent,
// then the children, and gives up every batch of one child (each invocation crashes, past
// MaximumRetryAttempts) with every on-failure delivery failing. That child never gets a
// checkpoint row, so on the old code no pass ever read it (a shard without a checkpoint was
// "nothing consumed yet") and its records expired with the stream. Its parent is closed and
// verified to its end, so the mapping has read the child from its start: the pass verifies it
// as consumed from its StartingSequenceNumber and replays its records once due (older than
// TailAfter), exactly once. "parent never checkpointed": the parent's records are given up too;
// the other child's checkpoint shows the mapping moved past the parent, which is verified whole,
// and then the given-up child as well.
func TestChildTheMappingGaveUpIsReplayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		parentFails bool
	}{
		{"parent consumed", false},
		{"parent never checkpointed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, 1)
			s.waitActive()
			parent := s.shardIDs()[0]
			a := s.putN(10, "A", keyMod(3), nil)
			gaveUp, kept := s.splitInHalves(parent, 24, "C")
			child := gaveUp[0].shard

			// The fault: every batch of the child gaveUp crashes (and, with parentFails, every
			// batch of the parent), and no on-failure message is delivered.
			given := slices.Clone(gaveUp)
			if tc.parentFails {
				given = append(slices.Clone(a), gaveUp...)
			}
			rec := newRecorder()
			s.runGivingUp(t, rec, given)
			consumed := idsOf(kept)
			if !tc.parentFails {
				consumed = append(idsOf(a), consumed...)
			}
			checkOnce(t, "mapping", rec.counts(), consumed)
			if _, err := s.cps.Get(context.Background(), s.shard(child)); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("child %s: checkpoint row %v, want none (every batch given up)", child, err)
			}
			if _, err := s.cps.Get(context.Background(), s.shard(parent)); tc.parentFails != errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("parent %s: checkpoint row %v", parent, err)
			}

			// The pass, an hour later (past MaximumRecordAge 10m + settle 30m).
			r := s.reconciler(s.pipeline(rec.process, 3), Config{MaxRecordAge: 10 * time.Minute})
			var replayed int
			for range 2 {
				rep, err := r.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				replayed += rep.GapsReplayed
			}
			all := append(append(idsOf(a), idsOf(kept)...), idsOf(gaveUp)...)
			checkOnce(t, "mapping and reconciler together", rec.counts(), all)
			if replayed != len(given) {
				t.Errorf("GapsReplayed %d, want %d (the records given up)", replayed, len(given))
			}
			if st := s.state(child); st.Watermark != gaveUp[len(gaveUp)-1].seq {
				t.Errorf("child %s watermark %q, want its last record %s", child, st.Watermark, gaveUp[len(gaveUp)-1].seq)
			}
			if st := s.state(parent); !st.Closed {
				t.Errorf("parent %s not marked closed", parent)
			}
		})
	}
}
