package reconcile

import (
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
)

// unfiltered returns the records of page that the record filter keeps, counting the others in
// rep and c as Filtered. A dropped record never reached the consumer (the mapping's
// FilterCriteria holds the same pattern), so it is accounted for: not a gap, never replayed.
// The filter sees each Kinesis record's data as stored, as Lambda does: an aggregated (KPL)
// record is kept or dropped whole (docs/reconciler.md, "Record filter").
func (r *Reconciler) unfiltered(page []types.Record, rep *ShardReport, c *checkpoint.Counters) []types.Record {
	kept, dropped := keepRecords(r.cfg.Filter, page)
	rep.Filtered += dropped
	c.Filtered += int64(dropped)
	return kept
}

// keepRecords splits recs by f: the records it keeps (recs itself when f is inactive) and how
// many it drops.
func keepRecords(f *filter.Filter, recs []types.Record) (kept []types.Record, dropped int) {
	if !f.Active() {
		return recs, 0
	}
	kept = make([]types.Record, 0, len(recs))
	for _, rec := range recs {
		if f.Keep(rec.Data) {
			kept = append(kept, rec)
		}
	}
	return kept, len(recs) - len(kept)
}
