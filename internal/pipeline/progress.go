package pipeline

import (
	"context"
	"slices"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// DefaultProgressEvery is how much time a batch-sink run spends sending before it saves what it
// has sent so far (WithProgressEvery). An invocation that dies (a killer record, an out-of-memory
// kill, a crash) leaves the mapping to retry its batch, and without a saving everything it sent
// is sent again: the mapping's retry finds no entry for it. With a saving, a death sends again at
// most this much sink time plus the round it died in. A run whose rounds all fit in this time
// (the common case: a batch of a few hundred records to SQS) writes nothing more; a slow run pays
// one ledger write (usually 1 write unit), on the critical path, per this much time.
const DefaultProgressEvery = time.Second

// WithProgressEvery sets how much sink time a batch-sink run (WithBatchSink) risks before it
// saves its progress (default DefaultProgressEvery; 0: only runs isolating a death save it).
func WithProgressEvery(d time.Duration) Option { return func(p *Pipeline) { p.progressEvery = d } }

// saveProgress writes, as an entry of their own without the run's nonce (it completes no marker,
// so the run still reads as dead if it dies), the records the run has processed since its last
// saving. It saves after every round on a run of records that dead invocations named
// (plan.deaths set: the run retries a batch that killed an invocation): a killer is then isolated
// by halving its batch, and every invocation of a half that holds it dies, so without these
// entries everything it processed before the killer's round is lost with it and processed again
// by the next half (duplicates). Any other run saves once progressEvery has passed since its
// start or its last saving, and only when records are left for a later round (the final entry
// follows at once otherwise): a first death, which nothing could foresee, then sends again at
// most that much work. idx are the records of the round just sent; more reports records left.
// A failed write only loses the saving (the final entry records the same records).
func (r *batchRun) saveProgress(ctx context.Context, idx []int, more bool) {
	r.unsaved = append(r.unsaved, idx...)
	isolating := r.plan.deaths != nil
	due := more && r.p.progressEvery > 0 && r.p.now().Sub(r.saved) >= r.p.progressEvery
	if !isolating && !due {
		return
	}
	var done []recordid.ID
	for _, i := range r.unsaved {
		if r.outcomes[i].status == statusProcessed {
			done = append(done, r.b.Records[i].ID)
		}
	}
	r.unsaved = r.unsaved[:0]
	r.saved = r.p.now()
	if len(done) == 0 {
		return
	}
	slices.SortFunc(done, recordid.Compare)
	e := Entry{First: r.b.Records[0].ID.Seq, Last: r.b.Records[len(r.b.Records)-1].ID.Seq, Done: done, Source: r.b.Source}
	// Before the next round, not beside it: a write still in flight when the killer's round
	// takes the runtime down is lost with it.
	if err := r.p.ledger.Record(ctx, r.b.Shard, e); err != nil {
		r.log.WarnContext(ctx, "saving the progress of a run failed; a death now would process these records again",
			"records", len(done), "isolating", isolating, "error", err)
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
	if p.endedConfirm <= 0 {
		return view
	}
	now := p.now()
	pending := false
	for _, m := range view.Markers() {
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

// DefaultHeldWait bounds how long a mapping run waits, inside its invocation, for the live
// marker of another run that started before it and holds some of its records (a second mapping
// on the same stream running the same batch: a mapping being replaced, the clustered consumers
// of the field report). Answering at once fails the held records, and the mapping retries
// within milliseconds: each such retry is one of its MaximumRetryAttempts, so a few seconds of
// the other run's work used to cost the batch its whole retry budget. Waiting, the run usually
// finds the records done by the other run and skips them.
const DefaultHeldWait = 5 * time.Second

// heldPoll is how often a waiting run looks the range up again.
const heldPoll = 250 * time.Millisecond

// WithHeldWait sets the longest wait for a holding marker (default DefaultHeldWait; 0: none).
func WithHeldWait(d time.Duration) Option { return func(p *Pipeline) { p.heldWait = d } }

// awaitHolders looks the range up again, every heldPoll, while view holds a live marker of
// another run that started before mine and names a record of b not done (it would hold it:
// plan), for at most: heldWait, half a lease (the run's own marker is renewed only once records
// run, and must not read as dead meanwhile), a third of the time left, and the time left less
// two deadline margins (the records' own time). Only mapping runs wait; replays and runs
// without a deadline do not.
// It returns the last view read (view itself when nothing holds or a lookup fails).
func (p *Pipeline) awaitHolders(ctx context.Context, b *Batch, view View, mine Marker, first, last string) View {
	if b.Source != SourceConsumer || p.heldWait <= 0 {
		return view
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return view
	}
	left := time.Until(dl)
	wait := min(p.heldWait, p.lease/2, left/3, left-2*p.cfg.DeadlineMargin)
	if wait <= 0 || !p.holds(b, view, mine) {
		return view
	}
	end := time.Now().Add(wait)
	t := time.NewTimer(heldPoll)
	defer t.Stop()
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return view
		case <-t.C:
		}
		v2, err := p.ledger.Lookup(ctx, b.Shard, first, last)
		if err != nil {
			return view
		}
		view = v2
		if !p.holds(b, view, mine) {
			return view
		}
		t.Reset(min(heldPoll, time.Until(end)))
	}
	return view
}

// holds reports whether view has a marker that plan would hold records of b for: live, of
// another run that started before mine, not taken for dead by the lane rule, naming a record
// not done.
func (p *Pipeline) holds(b *Batch, view View, mine Marker) bool {
	now := p.now()
	for _, m := range view.Markers() {
		if m.Nonce == mine.Nonce || m.Completed || !now.Before(m.Deadline.Add(DeadGrace)) || !earlier(m.Marker, mine) || laneEnded(m, mine, b) {
			continue
		}
		for _, id := range m.IDs {
			if _, ok := b.index(id); ok && !view.Done(id) {
				return true
			}
		}
	}
	return false
}
