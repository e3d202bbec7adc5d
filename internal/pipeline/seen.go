package pipeline

import (
	"context"
	"fmt"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Seen reads the ledger for the records of shard in [first, last] (one Lookup) and returns a
// function reporting which of them an invocation has already had in hand: done, with a failed
// attempt recorded, or inside the batch range of an in-flight marker (live, dead or completed:
// a marker stays until its TTL, and its range is the batch the invocation was given, including
// the records it did not start). A record never seen is one the mapping may not have invoked
// yet.
func (p *Pipeline) Seen(ctx context.Context, shard recordid.Shard, first, last string) (func(recordid.ID) bool, error) {
	view, err := p.ledger.Lookup(ctx, shard, first, last)
	if err != nil {
		return nil, fmt.Errorf("%w: lookup %s [%s, %s]: %w", ErrLedger, shard, first, last, err)
	}
	var ranges [][2]string
	for _, m := range view.Markers() {
		if m.First != "" && m.Last != "" {
			ranges = append(ranges, [2]string{m.First, m.Last})
		}
	}
	return func(id recordid.ID) bool {
		if view.Done(id) || view.Attempts(id) > 0 {
			return true
		}
		for _, r := range ranges {
			if seqnum.Compare(id.Seq, r[0]) >= 0 && seqnum.Compare(id.Seq, r[1]) <= 0 {
				return true
			}
		}
		return false
	}, nil
}
