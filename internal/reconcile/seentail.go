package reconcile

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// seenLedger is implemented by replayers that can tell which records an invocation has already
// had in hand (*pipeline.Pipeline, Seen).
type seenLedger interface {
	Seen(ctx context.Context, shard recordid.Shard, first, last string) (func(recordid.ID) bool, error)
}

// seenTail extends a page that bounds.cut stopped at the checkpoint mirror with the settled
// records after it that an invocation has already had in hand (done, with a failed attempt, or
// inside an in-flight marker's batch: see pipeline.Pipeline.Seen), up to the first one never
// seen. The tail rule (TailAfter) waits for MaximumRecordAge because a record past the
// checkpoint may still be waiting for its first invocation; a record already seen was invoked,
// and when the mapping gives its batch up and the on-failure message is lost, nothing moves the
// checkpoint of a quiet shard past it again. Replayed now (counted TailReplayed), such a
// record is accounted for by the first scheduled pass after it settles instead of hours later.
// A replay meets the consumer's live marker if the mapping is still retrying the batch: it is
// then held and tried again next pass, never doubled. With every record of recs taken the walk
// reads on (notStopped): more of the tail may follow.
func (r *Reconciler) seenTail(ctx context.Context, shard recordid.Shard, b bounds, recs, page []types.Record, stop stopReason) ([]types.Record, stopReason) {
	sl, ok := r.replay.(seenLedger)
	if !ok || stop != beyondBound || b.upper == "" || len(page) >= len(recs) {
		return page, stop
	}
	rest := recs[len(page):]
	n := 0
	for n < len(rest) {
		if a := rest[n].ApproximateArrivalTimestamp; a == nil || a.After(b.settled) {
			break
		}
		n++
	}
	if n == 0 {
		return page, stop
	}
	seen, err := sl.Seen(ctx, shard, aws.ToString(rest[0].SequenceNumber), aws.ToString(rest[n-1].SequenceNumber))
	if err != nil {
		r.log.WarnContext(ctx, "reading the ledger for a tail already seen failed; the tail waits for the next pass",
			"group", shard.Group, "shard_id", shard.ShardID, "error", err)
		return page, stop
	}
	k := 0
	for k < n && seen(recordid.ID{ShardID: shard.ShardID, Seq: aws.ToString(rest[k].SequenceNumber)}) {
		k++
	}
	if k == 0 {
		return page, stop
	}
	if k == len(rest) {
		return recs, notStopped
	}
	return recs[:len(page)+k], beyondBound
}
