package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// RangeReport is the outcome of ReplayRange.
type RangeReport struct {
	ShardReport
	// Accounted: every record of the range is processed, parked or counted lost; a failure-queue
	// message naming the range may be deleted.
	Accounted bool
}

// ErrInvalidRange is wrapped by ReplayRange for a range it cannot read.
var ErrInvalidRange = errors.New("reconcile: invalid replay range")

// ReplayRange re-reads exactly the records from..to (inclusive) of one shard, starting with
// GetShardIterator AT_SEQUENCE_NUMBER from, and replays those the ledger lacks: the
// failure-queue path (a range the mapping gave up on) and `gapless replay`. No settle window
// applies: the mapping has given up on the range. Without a loss the watermark is not moved
// (the scheduled pass does that, in order).
//
// A range below the shard's starting sequence number held nothing: it is accounted for, and
// nothing is lost. When Kinesis refuses from because the records after it expired
// (InvalidArgumentException), the refusal proves a loss only for records after the verified
// watermark: with the watermark at or past to nothing is lost; with the watermark inside the
// range the position after the watermark is asked instead; and a refusal while a record at or
// before the refused position is still held proves nothing (trimming goes in sequence order). A proven span (from the watermark to
// the first record still held) is counted exactly as the scheduled pass counts it, with the
// conditional watermark advance that passes it (checkpoint.Store.CountLoss):
// to the last record of the first replayed page, or to `to` when every record of the range
// expired and a later one is held. Whoever passes the span first (this replay, a redelivered
// message, the scheduled pass) counts it; nobody counts it twice. Only when nothing at all is
// held after the range's start is the span counted at once without a watermark move (to is no
// proof that no record below it will still be written); the scheduled pass then finds the span
// after the same watermark already counted. Any other refusal of from (kinesis-local refuses every number that is not a record)
// proves nothing: the range is read from the trim horizon.
func (r *Reconciler) ReplayRange(ctx context.Context, shardID, from, to string) (rep RangeReport, _ error) {
	rep = RangeReport{ShardReport: ShardReport{ShardID: shardID}}
	if err := (recordid.Shard{Group: r.cfg.Group, Stream: r.cfg.Stream, ShardID: shardID}).Validate(); err != nil {
		return rep, fmt.Errorf("%w: %v", ErrInvalidRange, err)
	}
	if err := seqnum.Validate(from); err != nil {
		return rep, fmt.Errorf("%w: from: %v", ErrInvalidRange, err)
	}
	if err := seqnum.Validate(to); err != nil {
		return rep, fmt.Errorf("%w: to: %v", ErrInvalidRange, err)
	}
	if seqnum.Compare(from, to) > 0 {
		return rep, fmt.Errorf("%w: %s..%s is empty (from > to)", ErrInvalidRange, from, to)
	}
	ctx, cancel := r.budget(ctx)
	defer cancel()
	shards, err := listShards(ctx, r.kin, r.cfg.Stream, r.cfg.StreamARN)
	if err != nil {
		return rep, err
	}
	// A shard no longer listed has left the stream with all its records; read it as if open
	// (its reads fail, and the range stays with the caller).
	var info shardInfo
	for _, sh := range shards {
		if sh.id == shardID {
			info = sh
		}
	}
	if info.startingSeq != "" {
		if seqnum.Compare(to, info.startingSeq) < 0 {
			rep.Accounted = true // the whole range lies below the shard's first sequence number
			return rep, nil
		}
		if seqnum.Compare(from, info.startingSeq) < 0 {
			from = info.startingSeq
		}
	}
	shard := r.shard(shardID)
	var counters checkpoint.Counters
	defer r.addCounters(ctx, shard, &counters)
	rd := r.reader(shardID, info.endingSeq != "")
	defer func() { rep.GetRecordsCalls = rd.calls }()

	var lost *lostSpan
	err = rd.open(ctx, types.ShardIteratorTypeAtSequenceNumber, from)
	switch {
	case errors.Is(err, errTrimmed):
		lost, err = r.rangeLoss(ctx, rd, shardID, from, to)
	case errors.Is(err, errNoRecord):
		err = rd.open(ctx, "", "")
	}
	if err != nil {
		return rep, err
	}
	for {
		recs, caughtUp, err := rd.next(ctx)
		if err != nil {
			return rep, err
		}
		if lost != nil && lost.to == "" && len(recs) > 0 && seqnum.Compare(aws.ToString(recs[0].SequenceNumber), lost.from) <= 0 {
			// A record at or before the refused position is still held: the refusal was not
			// expiry (trimming goes in sequence order). Nothing is lost, and the watermark must
			// not pass the held records between it and the range.
			r.log.WarnContext(ctx, "replay range start refused although the records before it are held: no loss",
				"group", r.cfg.Group, "shard_id", shardID, "sequence_number", lost.from, "first_sequence_number_held", aws.ToString(recs[0].SequenceNumber))
			lost = nil
		}
		// After a reopen at the trim horizon, records before the range are not ours.
		for len(recs) > 0 && seqnum.Compare(aws.ToString(recs[0].SequenceNumber), from) < 0 {
			recs = recs[1:]
		}
		if lost != nil && lost.to == "" && len(recs) > 0 {
			lost.to, lost.toArrival = aws.ToString(recs[0].SequenceNumber), aws.ToTime(recs[0].ApproximateArrivalTimestamp)
			if seqnum.Compare(lost.to, to) > 0 {
				// Every record of the range expired and a later one is held: all records up to
				// to exist and none after the watermark is held, so the watermark may pass to
				// with the span's count.
				if !r.advancePastLoss(ctx, shard, to, &rep.ShardReport, *lost) {
					return rep, fmt.Errorf("reconcile: count expired span of %s: watermark not advanced", shardID)
				}
				lost = nil
			}
		}
		var page []types.Record
		past := false
		for _, rec := range recs {
			if seqnum.Compare(aws.ToString(rec.SequenceNumber), to) > 0 {
				past = true
				break
			}
			page = append(page, rec)
		}
		if len(page) > 0 {
			verifiedTo, failedSeq, err := r.replayPage(ctx, shard, page, &rep.ShardReport, &counters, false)
			if err != nil {
				return rep, err
			}
			if lost != nil && verifiedTo != "" && seqnum.Compare(verifiedTo, lost.to) >= 0 {
				// The first record held after the span and the page up to verifiedTo are
				// accounted for: pass the span with its count, as the scheduled pass does.
				if !r.advancePastLoss(ctx, shard, verifiedTo, &rep.ShardReport, *lost) {
					return rep, fmt.Errorf("reconcile: count expired span of %s: watermark not advanced", shardID)
				}
				lost = nil
			}
			if failedSeq != "" {
				rep.OldestUnverified = arrivalOf(page, failedSeq)
				return rep, nil
			}
			r.report(shardID, page, &rep.ShardReport)
		}
		if past || rd.ended || caughtUp {
			// Past the range, at the end of a closed shard (nil NextShardIterator), or at the tip
			// of an open one (Kinesis holds nothing between the tip and to): every record of the
			// range is accounted for. An empty page of a closed shard is not its end.
			if lost != nil { // nothing at all held after the expired start
				if err := r.reportRangeLoss(ctx, &rep, lost, to); err != nil {
					return rep, err
				}
			}
			rep.Accounted = true
			return rep, nil
		}
	}
}

// rangeLoss decides, after Kinesis refused from as expired, whether an unverified record
// expired, and positions rd to read on. It returns the span when one did: records after the
// watermark expired. Records at or below the watermark were verified, so their expiry is no
// loss: with the watermark at or past to the range holds no loss; with the watermark inside the
// range the position after it is asked (a refusal there is the proof).
func (r *Reconciler) rangeLoss(ctx context.Context, rd *shardReader, shardID, from, to string) (*lostSpan, error) {
	wm, err := r.watermark(ctx, shardID)
	if err != nil {
		return nil, err
	}
	switch {
	case wm != "" && seqnum.Compare(wm, to) >= 0:
		r.log.InfoContext(ctx, "replay range expired from the stream after it was verified: nothing lost",
			"group", r.cfg.Group, "shard_id", shardID, "sequence_number", from, "watermark", wm)
		return nil, rd.open(ctx, "", "")
	case wm != "" && seqnum.Compare(wm, from) >= 0:
		err := rd.open(ctx, types.ShardIteratorTypeAfterSequenceNumber, wm)
		switch {
		case errors.Is(err, errTrimmed):
			return &lostSpan{from: wm, after: wm}, rd.open(ctx, "", "")
		case errors.Is(err, errNoRecord):
			return nil, rd.open(ctx, "", "")
		}
		return nil, err // positioned after the watermark: nothing after it expired
	}
	return &lostSpan{from: from, after: wm}, rd.open(ctx, "", "")
}

// watermark reads the shard's verified watermark ("" when none).
func (r *Reconciler) watermark(ctx context.Context, shardID string) (string, error) {
	states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
	if err != nil {
		return "", fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	for _, st := range states {
		if st.Shard.ShardID == shardID {
			return st.Watermark, nil
		}
	}
	return "", nil
}

// reportRangeLoss counts, at once, a span after which the shard holds nothing at all (no
// record to pass it with a watermark advance), unless the watermark has meanwhile passed to.
func (r *Reconciler) reportRangeLoss(ctx context.Context, rep *RangeReport, lost *lostSpan, to string) error {
	states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	for _, st := range states {
		if st.Shard.ShardID == rep.ShardID && st.Watermark != "" && seqnum.Compare(st.Watermark, to) >= 0 {
			r.log.InfoContext(ctx, "replay range expired from the stream after it was verified: nothing lost",
				"group", r.cfg.Group, "shard_id", rep.ShardID, "sequence_number", lost.from, "watermark", st.Watermark)
			return nil
		}
	}
	return r.countLoss(ctx, r.shard(rep.ShardID), &rep.ShardReport, *lost)
}
