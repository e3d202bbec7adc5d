package pipeline

// The in-flight marker of one Run: written beside the Lookup, renewed while records run,
// narrowed to an isolation prefix, released when no entry completes it.

import (
	"context"
	"log/slog"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// markerRun is one Run's marker: written, maybe narrowed, released when no entry completes it.
type markerRun struct {
	p       *Pipeline
	marking Ledger
	shard   recordid.Shard
	mine    Marker    // as first written
	cur     Marker    // as last written (narrowed, renewed)
	limit   time.Time // the invocation's own deadline: no lease goes past it
	log     *slog.Logger
	failed  bool // a Mark call failed (the marker may or may not exist)
	gone    bool // released, or never written
	// whole, when set, is the batch whose every id cur names (cur.IDs is then nil, rebuilt
	// for each renewal).
	whole *Batch
}

// renew extends the marker's lease every half lease while records run, until stop is called
// (before the entry write or the release, so a late renewal can never recreate a released
// marker). Nothing is written for runs shorter than half a lease.
func (m *markerRun) renew(ctx context.Context) (stop func()) {
	if m.gone || !m.cur.Deadline.Before(m.limit) {
		return func() {}
	}
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(m.p.lease / 2)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mk := m.cur
			mk.Deadline = earliest(m.limit, m.p.now().Add(m.p.lease))
			if m.whole != nil {
				mk.IDs = batchIDs(m.whole)
			}
			err := m.marking.Mark(ctx, m.shard, mk)
			if m.whole != nil {
				mk.IDs = nil
			}
			if err != nil {
				m.log.WarnContext(ctx, "in-flight marker lease not renewed: another invocation may take this run for dead",
					"sequence_number", mk.First, "last_sequence_number", mk.Last, "error", err)
				continue
			}
			m.cur = mk
			if !mk.Deadline.Before(m.limit) {
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

func (m *markerRun) write(ctx context.Context, mk Marker) {
	if err := m.marking.Mark(ctx, m.shard, mk); err != nil {
		m.failed = true
		m.log.WarnContext(ctx, "in-flight marker not written: a crash of this invocation would not be counted",
			"sequence_number", mk.First, "last_sequence_number", mk.Last, "error", err)
	}
}

func (m *markerRun) narrow(ctx context.Context, ids []recordid.ID, res *Result) {
	if len(ids) == 0 {
		m.release(ctx)
		return
	}
	mk := m.cur
	mk.IDs = ids
	m.whole = nil
	m.failed = false
	m.write(ctx, mk)
	if m.failed {
		res.MarkerWriteFailures++
	}
	m.cur = mk
}

// release deletes the marker, best effort, on a path that writes no entry with its nonce.
func (m *markerRun) release(ctx context.Context) {
	if m.gone {
		return
	}
	m.gone = true
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := m.marking.Unmark(ctx, m.shard, m.mine); err != nil {
		m.log.WarnContext(ctx, "in-flight marker not released: it will read as one dead attempt of its records",
			"sequence_number", m.mine.First, "last_sequence_number", m.mine.Last, "error", err)
	}
}
