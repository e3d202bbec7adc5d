package reconcile

import (
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// unfiltered returns the user records the record filter keeps, counting the others in rep and c
// as Filtered. A dropped record never reached the consumer (the mapping's FilterCriteria holds
// the same pattern), so it is accounted for: not a gap, never replayed.
//
// The filter judges each user record, after KPL de-aggregation: Lambda filters the user records
// of an aggregate only with enhanced fan-out, and drops a whole aggregate (not JSON) with a
// standard iterator ("Using event filtering with a Kinesis event source", "Filtering Kinesis
// aggregated records", https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis-filtering.html).
// Judging the user records is the choice that cannot lose one: a user record the pattern keeps
// is verified against the ledger either way (after a standard iterator dropped its aggregate it
// is replayed, late, as a gap). A record that could not be decoded (DecodeErr) is kept: it fails
// and is parked like any other.
func (r *Reconciler) unfiltered(users []pipeline.Record, rep *ShardReport, c *checkpoint.Counters) []pipeline.Record {
	kept, dropped := keepRecords(r.cfg.Filter, users)
	rep.Filtered += dropped
	c.Filtered += int64(dropped)
	return kept
}

// keepRecords splits users by f: the records it keeps (users itself when f is inactive) and how
// many it drops.
func keepRecords(f *filter.Filter, users []pipeline.Record) (kept []pipeline.Record, dropped int) {
	if !f.Active() {
		return users, 0
	}
	kept = make([]pipeline.Record, 0, len(users))
	for _, u := range users {
		if u.DecodeErr != nil || f.Keep(u.Data) {
			kept = append(kept, u)
		}
	}
	return kept, len(users) - len(kept)
}
