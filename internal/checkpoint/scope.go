package checkpoint

import (
	"context"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// attrScopeFrom is the time from which records of the group's stream are the event-source
// mapping's responsibility when it starts at LATEST (docs/reconciler.md, "A lineage the mapping
// never checkpointed"). The reconciler writes it once; it never moves.
const attrScopeFrom = "scopeFrom"

// SetScopeFrom records at on the shard's item as the time the group's responsibility for the
// stream starts, unless the item already holds one (if_not_exists: the first write wins and the
// value never moves, so repeating it is harmless). It creates the item when there is none.
func (s *Store) SetScopeFrom(ctx context.Context, shard recordid.Shard, at time.Time) error {
	return s.setTime(ctx, "set scope", shard, "SET #t = if_not_exists(#t, :at)", attrScopeFrom, at)
}
