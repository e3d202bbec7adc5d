package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/lanes"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// RangeReport is the outcome of ReplayRange.
type RangeReport struct {
	ShardReport
	// Accounted: every record of the range is processed, parked or counted lost; a failure-queue
	// message naming the range may be deleted.
	Accounted bool
	// Refused (ReplayFailed only) says why the range is not one the mapping can have given up;
	// "" when it is. A refused range is not accounted for.
	Refused string
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
func (r *Reconciler) ReplayRange(ctx context.Context, shardID, from, to string) (RangeReport, error) {
	return r.replayRange(ctx, shardID, from, to, nil)
}

func (r *Reconciler) replayRange(ctx context.Context, shardID, from, to string, fr *FailedRange) (rep RangeReport, _ error) {
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
			if fr != nil {
				rep.Refused = "the range lies below the shard's starting sequence number: the shard never held it, so the mapping cannot have given it up"
				return rep, nil
			}
			rep.Accounted = true // the whole range lies below the shard's first sequence number
			return rep, nil
		}
		if seqnum.Compare(from, info.startingSeq) < 0 {
			from = info.startingSeq
		}
	}
	var b *givenUpBounds
	if fr != nil {
		var done bool
		if b, done, err = r.givenUpBounds(ctx, info, from, to, fr.Lanes, fr.LaneKey); err != nil || done {
			rep.Accounted = err == nil
			return rep, err
		}
	}
	shard := r.shard(shardID)
	var counters checkpoint.Counters
	defer r.addCounters(ctx, shard, &counters)
	rd := r.reader(shardID, info.endingSeq != "")
	defer func() { rep.GetRecordsCalls = rd.calls }()

	var lost *lostSpan
	typ, pos := types.ShardIteratorTypeAtSequenceNumber, from
	switch {
	case b != nil && b.prefix != "":
		typ, pos = types.ShardIteratorTypeAfterSequenceNumber, b.prefix
	case b != nil && b.watermark != "" && seqnum.Compare(b.watermark, from) >= 0:
		typ, pos = types.ShardIteratorTypeAfterSequenceNumber, b.watermark
	}
	err = rd.open(ctx, typ, pos)
	switch {
	case errors.Is(err, errTrimmed):
		if b != nil {
			b.prefix = "" // records after the checkpoint expired: nothing of the lane before the range is held
		}
		lost, err = r.rangeLoss(ctx, rd, shardID, from, to)
	case errors.Is(err, errNoRecord):
		err = rd.open(ctx, "", "")
	}
	if err != nil {
		return rep, err
	}
	lo := func(seq string) bool { return seqnum.Compare(seq, from) < 0 } // before what is read
	if b != nil && b.prefix != "" {
		lo = func(seq string) bool { return seqnum.Compare(seq, b.prefix) <= 0 }
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
		for len(recs) > 0 && lo(aws.ToString(recs[0].SequenceNumber)) {
			recs = recs[1:]
		}
		if b != nil {
			recs = after(recs, b.watermark) // accounted for
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
			} else if b != nil && b.laneKnown {
				// Only the batch's lane is replayed: the watermark must not pass the other
				// lanes' records after the span. The span is counted now, in place; whoever
				// passes it later (the scheduled pass) finds it counted.
				if err := r.countLoss(ctx, shard, &rep.ShardReport, *lost); err != nil {
					return rep, err
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
		if b != nil && lost == nil {
			// With a span lost at the range's start every lane is replayed (unless the lane is
			// known: the span is then counted in place): the advance that counts the span passes
			// every record up to it.
			if page, rep.Refused = b.keep(page, from); rep.Refused != "" {
				return rep, nil
			}
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

// FailedRange is what a failure-queue message names: a range of one shard the mapping gave up,
// from one batch of one lane.
type FailedRange struct {
	ShardID, From, To string
	// Lanes is the mapping's ParallelizationFactor (0 or 1: one lane).
	Lanes int
	// LaneKey, when not "", is the partition key of a record of the batch (an S3 destination's
	// object holds them): it names the batch's lane even when the range's first record is not
	// held or the range's start expired. Then only that lane is ever replayed, and a span
	// expired at the range's start is counted without a watermark move (the advance that
	// passes it would pass the other lanes' records the replay leaves to them).
	LaneKey string
}

// MaxGivenUpBatch bounds the records of one lane a given-up range can hold past the checkpoint
// mirror while they are younger than the tail bound: one batch, and a Kinesis mapping's BatchSize
// is at most 10,000 (CreateEventSourceMapping, BatchSize). A message names one batch (its parts
// consolidated), so a range holding more is not one the mapping gave up.
const MaxGivenUpBatch = 10000

// ReplayFailed replays a failure-queue range as ReplayRange does, but only what the mapping can
// have given up in it, and refuses (RangeReport.Refused) a range that cannot be that:
//
//   - Records at or below the verified watermark are accounted for: the read starts after it,
//     and a range wholly at or below it is accounted for at once.
//   - A range wholly below the shard's starting sequence number was never the shard's: refused.
//   - Under STARTING_POSITION LATEST, on a shard without a checkpoint of its own (the scope rule
//     of the scheduled pass, scope.go), a record that arrived before the group's scope start was
//     never the group's: a range naming one is refused.
//   - With ParallelizationFactor > 1 only the records of the batch's lane are replayed: a lane
//     is the mapping's partition-key hashing (lanes.Of) and the batch is one lane, so the lane
//     of the range's first record names it (or FailedRange.LaneKey). The other lanes' records
//     in the range were not given up; replaying them could apply a later record of a key before
//     that lane applies an earlier one. (Without a LaneKey, if the range's first record is
//     gone, or the range's start expired, every lane is replayed.)
//   - Past the checkpoint mirror: the mapping gives a lane's batches up in order, and the
//     checkpoint mirror moves with every batch the consumer finishes, so a range that starts
//     past the checkpoint continues from it: every record of its lane between the checkpoint
//     and the range must be a due tail (older than TailAfter, which the scheduled pass verifies
//     anyway, and which is replayed first, in order). A younger one is still the mapping's: the
//     range is refused. Within the range at most MaxGivenUpBatch records of the lane may lie
//     past the checkpoint and be younger than TailAfter. (A shard without a checkpoint has only
//     that cap.)
//
// A refused range replays nothing after the record that refused it; what was replayed before
// passed these rules.
func (r *Reconciler) ReplayFailed(ctx context.Context, fr FailedRange) (RangeReport, error) {
	return r.replayRange(ctx, fr.ShardID, fr.From, fr.To, &fr)
}

// givenUpBounds is what ReplayFailed lets a range replay (see there).
type givenUpBounds struct {
	watermark  string    // records at or below it are accounted for
	checkpoint string    // the shard's checkpoint mirror ("" none)
	prefix     string    // the range starts past the checkpoint: read after this (max of checkpoint, watermark)
	scope      time.Time // records that arrived before it are not the group's (zero: none)
	tail       time.Time // records that arrived before it are a due tail
	lane       int       // the batch's lane; -1: every lane
	laneKnown  bool      // the lane is FailedRange.LaneKey's: it holds whatever expired
	lanes      int
	filter     *filter.Filter
	shardID    string
	young      int // records of the range past the checkpoint younger than tail, so far
}

// givenUpBounds reads the shard's state and the range's first record. done is true when the
// whole range is at or below the verified watermark.
func (r *Reconciler) givenUpBounds(ctx context.Context, info shardInfo, from, to string, lanesN int, laneKey string) (b *givenUpBounds, done bool, _ error) {
	states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
	if err != nil {
		return nil, false, fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	byShard := make(map[string]checkpoint.State, len(states))
	for _, st := range states {
		byShard[st.Shard.ShardID] = st
	}
	st := byShard[info.id]
	b = &givenUpBounds{watermark: st.Watermark, checkpoint: st.Checkpoint, lane: -1, lanes: lanesN, filter: r.cfg.Filter, shardID: info.id,
		tail: r.now().Add(-TailAfter(r.cfg.MaxRecordAge, r.cfg.SettleAfter))}
	if b.watermark != "" && seqnum.Compare(b.watermark, to) >= 0 {
		r.log.InfoContext(ctx, "failure-queue range at or below the verified watermark: accounted for",
			"group", r.cfg.Group, "shard_id", info.id, "sequence_number", from, "end_sequence_number", to, "watermark", b.watermark)
		return b, true, nil
	}
	if r.cfg.StartingPosition == StartLatest && st.Checkpoint == "" && !parentConsumed(info, byShard) {
		for _, s := range states {
			if !s.ScopeFrom.IsZero() && (b.scope.IsZero() || s.ScopeFrom.Before(b.scope)) {
				b.scope = s.ScopeFrom
			}
		}
		if b.scope.IsZero() {
			return nil, false, fmt.Errorf("reconcile: shard %s: the group's scope start (STARTING_POSITION LATEST) is not recorded yet; a scheduled pass records it", info.id)
		}
	}
	if b.checkpoint != "" && seqnum.Compare(from, b.checkpoint) > 0 {
		b.prefix = b.checkpoint
		if b.watermark != "" && seqnum.Compare(b.watermark, b.prefix) > 0 {
			b.prefix = b.watermark
		}
		if seqnum.Compare(b.prefix, from) >= 0 {
			b.prefix = "" // the watermark is inside the range: nothing before it to check
		}
	}
	switch {
	case lanesN > 1 && laneKey != "":
		b.lane, b.laneKnown = lanes.Of(laneKey, lanesN), true
	case lanesN > 1:
		b.lane = r.laneAt(ctx, info, from, lanesN)
	}
	return b, false, nil
}

// laneAt returns the lane among n of the record at seq (lanes.Of of its partition key), or -1 when no
// record is held at seq.
func (r *Reconciler) laneAt(ctx context.Context, info shardInfo, seq string, n int) int {
	rd := r.reader(info.id, info.endingSeq != "")
	rd.limit = 1
	err := rd.open(ctx, types.ShardIteratorTypeAtSequenceNumber, seq)
	var recs []types.Record
	if err == nil {
		recs, _, err = rd.next(ctx)
	}
	if err != nil || len(recs) == 0 || aws.ToString(recs[0].SequenceNumber) != seq {
		r.log.WarnContext(ctx, "the failure-queue range's first record is not held: its lane is unknown, every lane of the range is replayed",
			"group", r.cfg.Group, "shard_id", info.id, "sequence_number", seq, "error", err)
		return -1
	}
	return lanes.Of(aws.ToString(recs[0].PartitionKey), n)
}

// keep returns the records of page the range may replay, or why the range is refused.
func (b *givenUpBounds) keep(page []types.Record, from string) ([]types.Record, string) {
	kept := page[:0:0]
	for _, rec := range page {
		seq, arrival := aws.ToString(rec.SequenceNumber), aws.ToTime(rec.ApproximateArrivalTimestamp)
		if b.lane >= 0 && lanes.Of(aws.ToString(rec.PartitionKey), b.lanes) != b.lane {
			continue // another lane's record: not given up with this batch
		}
		inRange := seqnum.Compare(seq, from) >= 0
		if !b.scope.IsZero() && arrival.Before(b.scope) {
			if inRange {
				return nil, "the range holds records that arrived before the group's scope start (STARTING_POSITION LATEST): they were never the group's"
			}
			continue
		}
		pastCheckpoint := b.checkpoint == "" || seqnum.Compare(seq, b.checkpoint) > 0
		young := arrival.After(b.tail)
		switch {
		case !inRange && young && b.filtered(rec):
			continue // the mapping never sends it: no batch of the consumer moves the checkpoint past it
		case !inRange && young:
			return nil, "the range starts past the checkpoint mirror, after records of its lane younger than the tail bound: the mapping still holds those, so it cannot have given this range up"
		case inRange && pastCheckpoint && young:
			if b.young++; b.young > MaxGivenUpBatch {
				return nil, fmt.Sprintf("the range holds more than %d records of its lane past the checkpoint mirror younger than the tail bound: more than one batch", MaxGivenUpBatch)
			}
		}
		kept = append(kept, rec)
	}
	return kept, ""
}

// filtered reports whether the record filter drops every user record of rec.
func (b *givenUpBounds) filtered(rec types.Record) bool {
	kept, _ := keepRecords(b.filter, UserRecords(b.shardID, []types.Record{rec}))
	return len(kept) == 0
}
