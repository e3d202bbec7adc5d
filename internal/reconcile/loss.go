package reconcile

// Counting what expired unverified: a span the trim horizon passed before the reconciler
// verified it is counted once, with the watermark move that passes it, and reported.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// lostSpan is a span of a shard that expired before it was verified: from (exclusive, the old
// watermark) to the first record still held (exclusive; "" while unknown). after is the stored
// verified watermark the span follows ("" when none): its identity (checkpoint.Loss).
type lostSpan struct {
	from, to  string
	after     string
	toArrival time.Time
}

// settleLost reports a lost span none of whose successors up to bound is held: every record
// of the shard up to bound expired unseen, so the watermark moves to bound and the span is
// counted with that move, once (only the reconciler whose advance wins counts it). A non-nil
// error means the count is not known to be durable: the caller must not mark the shard closed
// or complete, and the pass ends in error, so that the next pass finds the span again.
func (r *Reconciler) settleLost(ctx context.Context, shard recordid.Shard, rep *ShardReport, lost *lostSpan, bound string) error {
	if rep.Watermark != "" && seqnum.Compare(bound, rep.Watermark) <= 0 {
		// Nothing to advance (a closed shard whose ending sequence number, as kinesis-local
		// reports it, is below its records; it is marked closed next): the count is written on
		// its own, at once.
		return r.countLoss(ctx, shard, rep, *lost)
	}
	if !r.advancePastLoss(ctx, shard, bound, rep, *lost) {
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w", shard.ShardID, lost.from, errLossNotDurable)
	}
	return nil
}

// errLossNotDurable: the write counting a lost span failed or could not be confirmed.
var errLossNotDurable = errors.New("the write counting the span is not confirmed")

// countLoss counts a lost span with no watermark move (checkpoint.Store.CountLoss: a retried or
// unanswered write is confirmed by reading the item back, never counted twice) and reports it
// when this call's write is on the item. A non-nil error means the count is not durable.
func (r *Reconciler) countLoss(ctx context.Context, shard recordid.Shard, rep *ShardReport, s lostSpan) error {
	done, err := r.spanDone(ctx, shard, s, s.to) // nothing is passed: the span ends at the first record held, if known
	if err != nil {
		r.log.ErrorContext(ctx, "deciding whether an expired span was all done failed; it is counted by a later pass", "group", shard.Group, "shard_id", shard.ShardID,
			"lost_after_sequence_number", s.from, "error", err)
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w: %w", shard.ShardID, s.from, errLossNotDurable, err)
	}
	res, err := r.cps.CountLoss(context.WithoutCancel(ctx), shard, checkpoint.Loss{After: s.after, Done: done})
	if err != nil {
		r.log.ErrorContext(ctx, "counting an expired span failed; the shard is not final until a later pass counts it", "group", shard.Group, "shard_id", shard.ShardID,
			"lost_after_sequence_number", s.from, "error", err)
		return fmt.Errorf("reconcile: count expired span of %s after %s: %w: %w", shard.ShardID, s.from, errLossNotDurable, err)
	}
	if res.Advanced {
		r.lost(ctx, rep, s, done)
	} else {
		r.alreadyCounted(ctx, shard, s)
	}
	return nil
}

func (r *Reconciler) alreadyCounted(ctx context.Context, shard recordid.Shard, s lostSpan) {
	r.log.InfoContext(ctx, "an expired span is already counted (or passed) by another reconciler: not counted again",
		"group", shard.Group, "shard_id", shard.ShardID, "lost_after_sequence_number", s.after)
}

// advancePastLoss moves the watermark to seq past a lost span and counts the span in the same
// conditional write (checkpoint.Store.CountLoss: only while the watermark is still the one the
// span follows and the span is not counted yet), reporting it only when this call's write
// happened (a retried write whose first attempt landed included). When another reconciler
// counted the span first (or moved the watermark past it), the span is not counted again and
// the watermark is advanced to seq plainly. It returns false when the write failed: the caller
// then stops, so that no later advance passes the span without its count.
func (r *Reconciler) advancePastLoss(ctx context.Context, shard recordid.Shard, seq string, rep *ShardReport, s lostSpan) bool {
	end, err := spanEnd(s, seq)
	var done bool
	if err == nil {
		done, err = r.spanDone(ctx, shard, s, end)
	}
	if err != nil {
		r.log.ErrorContext(ctx, "deciding whether an expired span was all done failed; the watermark stays before it until a later pass",
			"group", shard.Group, "shard_id", shard.ShardID, "lost_after_sequence_number", s.from, "error", err)
		return false
	}
	res, err := r.cps.CountLoss(context.WithoutCancel(ctx), shard, checkpoint.Loss{After: s.after, To: seq, Done: done})
	if err != nil {
		// Not applied, or applied without an answer the store could confirm: the next run
		// finds out (it reads after the stored watermark and counts the span only if its own
		// advance passes it).
		r.log.ErrorContext(ctx, "advancing the verified watermark past an expired span failed; it is retried next run",
			"group", shard.Group, "shard_id", shard.ShardID, "sequence_number", seq, "error", err)
		return false
	}
	if res.Advanced {
		rep.Watermark = seq
		r.lost(ctx, rep, s, done)
		return true
	}
	r.alreadyCounted(ctx, shard, s)
	r.advance(ctx, shard, seq, rep) // everything from the span's end to seq is accounted for
	return true
}

// lost reports and logs a span that expired from the stream before it was verified (its count
// on the checkpoint item is written by the caller, with the watermark move that passes it).
// done: every record of it is proven done (spanDone), an ExpiredUnverified span.
func (r *Reconciler) lost(ctx context.Context, rep *ShardReport, s lostSpan, done bool) {
	if done {
		rep.ExpiredUnverified++
		attrs := []any{"group", r.cfg.Group, "stream", r.cfg.Stream, "shard_id", rep.ShardID,
			"expired_after_sequence_number", s.from, "first_sequence_number_held", s.to, "metric", "ExpiredUnverified"}
		r.log.WarnContext(ctx, "records expired from the stream before the reconciler verified them; the ledger shows every one of them done: nothing was lost, the reconciler is behind", attrs...)
		return
	}
	rep.LostSpans++
	attrs := []any{"group", r.cfg.Group, "stream", r.cfg.Stream, "shard_id", rep.ShardID,
		"lost_after_sequence_number", s.from, "first_sequence_number_held", s.to, "metric", "LostToRetention"}
	if !s.toArrival.IsZero() {
		attrs = append(attrs, "first_held_arrival", s.toArrival.UTC().Format(time.RFC3339))
	}
	r.log.ErrorContext(ctx, "records expired from the stream before they were verified: any record after the old watermark and before the first record still held is lost", attrs...)
}
