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
// applies: the mapping has given up on the range. The watermark is not moved (the scheduled pass
// does that, in order).
//
// A range below the shard's starting sequence number held nothing: it is accounted for, and
// nothing is lost. When Kinesis refuses from because the records after it expired
// (InvalidArgumentException), the span up to the first record still held is reported lost
// (logged at ERROR, counted in LostSpans and, at once, in the shard's lostToRetention counter)
// unless the verified watermark is already at or past to: then the range was verified before
// it expired. Any other refusal of from (kinesis-local refuses every number that is not a
// record) proves nothing: the range is read from the trim horizon. The scheduled pass may report
// the same span again when its own watermark reaches it; a lost span is an alarm, and both log
// lines name it.
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
		lost = &lostSpan{from: from}
		err = rd.open(ctx, "", "")
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
		// After a reopen at the trim horizon, records before the range are not ours.
		for len(recs) > 0 && seqnum.Compare(aws.ToString(recs[0].SequenceNumber), from) < 0 {
			recs = recs[1:]
		}
		if lost != nil && lost.to == "" && len(recs) > 0 {
			lost.to, lost.toArrival = aws.ToString(recs[0].SequenceNumber), aws.ToTime(recs[0].ApproximateArrivalTimestamp)
			if err := r.reportRangeLoss(ctx, &rep, lost, to); err != nil {
				return rep, err
			}
			lost = nil
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
			_, failedSeq, err := r.replayPage(ctx, shard, page, &rep.ShardReport, &counters, false)
			if err != nil {
				return rep, err
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

// reportRangeLoss counts a span of a replayed range that expired, unless the scheduled pass had
// verified the range (watermark at or past to) before it expired. ReplayRange moves no
// watermark, so the count is written at once, before the range is reported accounted for.
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
	if err := r.cps.AddCounters(ctx, r.shard(rep.ShardID), checkpoint.Counters{LostToRetention: 1}); err != nil {
		return fmt.Errorf("reconcile: count expired span of %s: %w", rep.ShardID, err)
	}
	r.lost(ctx, &rep.ShardReport, *lost)
	return nil
}
