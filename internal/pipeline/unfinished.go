package pipeline

import (
	"context"
	"fmt"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// failedView is a View that lists the ids with a failed attempt (*dedupe.Range, EachFailed).
type failedView interface{ EachFailed(fn func(recordid.ID)) }

// FirstUnfinished reads the ledger for the records of shard in [first, last] (one Lookup) and
// returns the sequence number of the first one an invocation had in hand and that is not done:
// with a failed attempt recorded, or named by an in-flight marker (live, dead or completed). ""
// when there is none. Such a record existed in the shard (an invocation was given it); a record
// no invocation was ever given leaves nothing in the ledger and is not found.
func (p *Pipeline) FirstUnfinished(ctx context.Context, shard recordid.Shard, first, last string) (string, error) {
	view, err := p.ledger.Lookup(ctx, shard, first, last)
	if err != nil {
		return "", fmt.Errorf("%w: lookup %s [%s, %s]: %w", ErrLedger, shard, first, last, err)
	}
	best := ""
	consider := func(id recordid.ID) {
		if view.Done(id) || seqnum.Compare(id.Seq, first) < 0 || seqnum.Compare(id.Seq, last) > 0 {
			return
		}
		if best == "" || seqnum.Compare(id.Seq, best) < 0 {
			best = id.Seq
		}
	}
	if fv, ok := view.(failedView); ok {
		fv.EachFailed(consider)
	}
	for _, m := range view.Markers() {
		for _, id := range m.IDs {
			consider(id)
		}
	}
	return best, nil
}
