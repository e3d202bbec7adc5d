package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// unfinishedLedger is implemented by replayers that can name the first record of a range an
// invocation had in hand and that is not done (*pipeline.Pipeline, FirstUnfinished).
type unfinishedLedger interface {
	FirstUnfinished(ctx context.Context, shard recordid.Shard, first, last string) (string, error)
}

// maxSeq is the largest sequence number Kinesis allows: the open end of a ledger look-up.
var maxSeq = strings.Repeat("9", seqnum.MaxDigits)

// tailEvidence decides a refused watermark at or past the checkpoint. Kinesis refuses the
// position of a watermark whose own record expired, so on an idle shard the refusal alone
// proves nothing, and the look happens every pass. A record after the watermark that an
// invocation had in hand (a failed attempt, or an in-flight marker naming it) and that is not
// done proves the shard held a tail there: if the first record still held is after it (or none
// is), that tail expired unverified. tailEvidence returns the first such record ("" when the
// ledger shows none, or the replayer cannot tell): the span is lost only when it is before the
// first record held. A failed read is returned: the walk must not pass a span it cannot decide.
func (r *Reconciler) tailEvidence(ctx context.Context, shard recordid.Shard, watermark string) (string, error) {
	ul, ok := r.replay.(unfinishedLedger)
	if !ok {
		return "", nil
	}
	first, err := seqnum.Next(watermark)
	if err != nil {
		return "", fmt.Errorf("reconcile: tail after %s of %s: %w", watermark, shard.ShardID, err)
	}
	seq, err := ul.FirstUnfinished(ctx, shard, first, maxSeq)
	if err != nil {
		return "", fmt.Errorf("reconcile: read the ledger for a tail after %s of %s: %w", watermark, shard.ShardID, err)
	}
	return seq, nil
}
