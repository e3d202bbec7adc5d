package pipeline

import (
	"context"
	"slices"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// saveProgress writes, on a run of records that dead invocations named (plan.deaths set: the
// run retries a batch that killed an invocation), the records of one round of waves that are
// now processed, as an entry of their own without the run's nonce (it completes no marker, so
// the run still reads as dead if it dies). A killer is then isolated by halving its batch, and
// every invocation of a half that holds it dies; without these entries everything it
// processed before the killer's wave is lost with it and processed again by the next half:
// duplicates. One ledger write per round, on these runs only; a failed write only loses the
// saving (the final entry records the same records).
func (r *batchRun) saveProgress(ctx context.Context, idx []int) {
	if r.plan.deaths == nil || len(idx) == 0 {
		return
	}
	var done []recordid.ID
	for _, i := range idx {
		if r.outcomes[i].status == statusProcessed {
			done = append(done, r.b.Records[i].ID)
		}
	}
	if len(done) == 0 {
		return
	}
	slices.SortFunc(done, recordid.Compare)
	e := Entry{First: r.b.Records[0].ID.Seq, Last: r.b.Records[len(r.b.Records)-1].ID.Seq, Done: done, Source: r.b.Source}
	// Before the next round, not beside it: a write still in flight when the killer's wave
	// takes the runtime down is lost with it.
	if err := r.p.ledger.Record(ctx, r.b.Shard, e); err != nil {
		r.log.WarnContext(ctx, "saving the progress of an isolating run failed; a death now would process these records again",
			"records", len(done), "error", err)
	}
}

// DefaultEndedConfirm is how long a run waits, once, before it takes a marker for dead by the
// lane rule (laneEnded) while the marker's lease still runs: a second mapping on the same
// stream (a mapping being replaced) running the same batch at the same moment completes its
// marker within that time in the common case, and its records are then skipped instead of
// processed twice; the marker of an invocation that died is still uncompleted after it.
const DefaultEndedConfirm = time.Second

// WithEndedConfirm sets the wait before the lane rule takes a lease-live marker for dead
// (default DefaultEndedConfirm; 0: no wait).
func WithEndedConfirm(d time.Duration) Option { return func(p *Pipeline) { p.endedConfirm = d } }

// confirmEnded looks the range up again after waiting, when view holds a marker the lane rule
// takes for dead before its lease runs out. The wait ends early with ctx and leaves the
// deadline margin untouched; the second lookup is one more round trip, on this path only. It
// returns view itself when there is nothing to confirm or the second lookup fails.
func (p *Pipeline) confirmEnded(ctx context.Context, b *Batch, view View, mine Marker, first, last string) View {
	mv, ok := view.(MarkerView)
	if !ok || p.endedConfirm <= 0 {
		return view
	}
	now := p.now()
	pending := false
	for _, m := range mv.Markers() {
		if m.Nonce != mine.Nonce && !m.Completed && now.Before(m.Deadline.Add(DeadGrace)) && laneEnded(m, mine, b) {
			pending = true
			break
		}
	}
	if !pending {
		return view
	}
	wait := p.endedConfirm
	if dl, ok := ctx.Deadline(); ok {
		// A tenth of the time left at most: the wait must not leave the batch's records
		// without the time to run (records not started fail, and each failed batch costs the
		// mapping a retry).
		left := time.Until(dl)
		wait = min(wait, left/10, left-2*p.cfg.DeadlineMargin)
	}
	if wait <= 0 {
		return view
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return view
	case <-t.C:
	}
	v2, err := p.ledger.Lookup(ctx, b.Shard, first, last)
	if err != nil {
		return view
	}
	return v2
}
