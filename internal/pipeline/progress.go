package pipeline

import (
	"context"
	"slices"

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
	if err := r.p.ledger.Record(ctx, r.b.Shard, e); err != nil {
		r.log.WarnContext(ctx, "saving the progress of an isolating run failed; a death now would process these records again",
			"records", len(done), "error", err)
	}
}
