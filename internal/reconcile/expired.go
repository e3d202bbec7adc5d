package reconcile

import (
	"context"
	"fmt"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Census is a record, taken by a reader of the shard while the records were held, of which
// user records a shard holds in an interval of sequence numbers.
type Census interface {
	// Records returns the ids of every user record (each sub-record of a KPL aggregate) that
	// shard holds with a sequence number strictly between after and before ("" after: from the
	// shard's start), in order. ok is false when no census covers the whole interval.
	Records(ctx context.Context, shard recordid.Shard, after, before string) (ids []recordid.ID, ok bool, err error)
}

// WithCensus gives the reconciler a census of the shards' contents, with which a span that
// expired before it was verified is counted ExpiredUnverified instead of LostToRetention when
// the ledger shows every record of it done (spanDone). Without one every such span is
// LostToRetention.
func WithCensus(c Census) Option { return func(r *Reconciler) { r.census = c } }

// ledgerOwner is implemented by replayers that expose their ledger (*pipeline.Pipeline).
type ledgerOwner interface {
	Ledger() pipeline.Ledger
}

// spanDone decides whether an expired span is ExpiredUnverified: every record the shard held
// strictly between s.after and before was processed or parked, although the reconciler never
// read it. false means the span is LostToRetention; an error means the question could not be
// read, and the caller counts nothing (the next pass finds the span again).
//
// The proof needs two facts: which records the shard held in the span, and that each of them
// is done. The ledger gives the second for any record named to it (Done: processed or parked
// by anyone), never the first, and neither does the checkpoint mirror:
//
//   - A ledger entry's First..Last is one invocation's batch (cut into windows and parts), and
//     its Done list names only the records that run had in hand. It does not say which records
//     of the shard lie in its range: with ParallelizationFactor > 1 a batch is one lane's
//     records, the record filter drops others before delivery, and a bisected batch's halves
//     are separate entries. So "every entry overlapping the span is wholly done" says nothing
//     of records in the span that no entry names.
//   - Nothing records that two entries are adjacent in the shard. The records the mapping
//     skipped between two batches (a batch given up by age before any invocation, records
//     trimmed before the mapping read them, a restart at LATEST) leave no trace in the
//     ledger: entries and Done lists look exactly as they would if no record lay between.
//     A coverage argument over entry ranges cannot tell the two apart.
//   - The checkpoint mirror passing the span's end proves nothing either: the consumer moves
//     it per batch to the highest record below which every record of that batch is done, so
//     it passes records that were in no batch as readily; that skip is what the reconciler
//     exists to find. "At least one done record in the span" proves less still.
//
// Every record of the span was done exactly when every record the shard held in it is named
// done by the ledger; only a reader of the shard can say which records it held, and the
// reconciler never read the span (it expired first). So the rule takes that list from a
// Census, taken by a reader while the records were held, and asks the ledger about each id
// (one Lookup over the census's range). Every id must be a record of the shard strictly
// inside the span and done. A record the filter drops is not done in the ledger, so a span
// holding one is not proven (conservatively LostToRetention). An empty census of the span is a
// proof too: nothing was held there, nothing was lost.
//
// Without a Census (none is deployed yet: the mapping is the only other reader of the shard,
// and a consumer's batches cannot say what lay between them) no span is proven.
func (r *Reconciler) spanDone(ctx context.Context, shard recordid.Shard, s lostSpan, before string) (bool, error) {
	if r.census == nil || before == "" {
		return false, nil
	}
	lo, ok := r.replay.(ledgerOwner)
	if !ok {
		return false, nil
	}
	ids, ok, err := r.census.Records(ctx, shard, s.after, before)
	if err != nil {
		return false, fmt.Errorf("reconcile: census of %s after %q before %s: %w", shard.ShardID, s.after, before, err)
	}
	if !ok {
		return false, nil
	}
	if len(ids) == 0 {
		return true, nil
	}
	for _, id := range ids {
		if id.ShardID != shard.ShardID || seqnum.Compare(id.Seq, before) >= 0 || (s.after != "" && seqnum.Compare(id.Seq, s.after) <= 0) {
			return false, nil // not a census of this span
		}
	}
	view, err := lo.Ledger().Lookup(ctx, shard, ids[0].Seq, ids[len(ids)-1].Seq)
	if err != nil {
		return false, fmt.Errorf("reconcile: ledger for the expired span of %s after %q: %w", shard.ShardID, s.after, err)
	}
	for _, id := range ids {
		if !view.Done(id) {
			return false, nil
		}
	}
	return true, nil
}

// spanEnd is the exclusive end of the span a watermark move to seq passes: the first record
// held after it when the walk verified that record (s.to at or below seq), else everything up
// to seq expired.
func spanEnd(s lostSpan, seq string) (string, error) {
	if s.to != "" && seqnum.Compare(s.to, seq) <= 0 {
		return s.to, nil
	}
	return seqnum.Next(seq)
}
