package dedupe

import "github.com/gapless-dev/gapless/internal/recordid"

// EachFailed calls fn once for every id of the range with a failed attempt recorded, in
// (sequence, sub-index) order.
func (r *Range) EachFailed(fn func(id recordid.ID)) {
	for i, k := range r.failed {
		if i > 0 && cmpKey(r.failed[i-1], k) == 0 {
			continue
		}
		fn(recordid.ID{ShardID: r.shardID, Seq: k.seq, Sub: k.sub})
	}
}
