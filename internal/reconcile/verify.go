package reconcile

// Verifying one shard: pages read from the watermark, cut at the checkpoint and the
// settle window, replayed through the pipeline, the watermark moved past what is accounted for.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// stopReason says why a page was cut.
type stopReason int

const (
	notStopped  stopReason = iota
	beyondBound            // the next record is past the checkpoint
	unsettled              // the next record is younger than the settle window
)

// verifyShard walks one shard from its watermark to its bound.
func (r *Reconciler) verifyShard(ctx context.Context, sh shardInfo, st checkpoint.State, drained bool, from startFrom) (rep ShardReport, _ error) {
	rep = ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark}
	closed := sh.endingSeq != ""
	upper := st.Checkpoint
	shard := r.shard(sh.id)
	switch {
	case closed && st.Closed:
		rep.Complete, rep.End = true, true
		return rep, nil
	case closed && st.Watermark == sh.endingSeq:
		// Verified to its end by an earlier run whose MarkClosed failed: only the mark is
		// missing. Reading after the ending sequence number would find nothing (kinesis-local
		// refuses the number outright), and nothing there is a loss.
		if err := r.cps.MarkClosed(ctx, shard, sh.endingSeq); err != nil {
			return rep, fmt.Errorf("reconcile: mark %s closed: %w", sh.id, err)
		}
		rep.Complete, rep.End = true, true
		return rep, nil
	case closed && drained:
		upper = "" // the mapping has moved on to the children: the whole shard must be accounted for
	case upper == "":
		rep.Complete = true // nothing consumed yet: nothing is behind a checkpoint
		return rep, nil
	}
	// A watermark at or past the checkpoint still reads on: records after it may be a tail the
	// mapping gave up (one GetShardIterator and one GetRecords per idle shard and pass).
	rd := r.reader(sh.id, closed)
	defer func() { rep.GetRecordsCalls = rd.calls }()
	var counters checkpoint.Counters
	defer r.addCounters(ctx, shard, &counters)

	start := st.Watermark
	// Progress an earlier pass made through empty pages after this watermark (see keepEmpty).
	stored, resume := st.EmptyThroughFor()
	var resumeAt *string
	var resumeErr error
	if resume = resume && (from.at.IsZero() || stored.Add(-emptyMargin).After(from.at)); resume {
		// Asked before the position the walk would start from, which then proves nothing expired
		// after the watermark: a later trim horizon cannot have passed the resume point unseen.
		resumeAt, resumeErr = rd.iteratorAt(ctx, stored.Add(-emptyMargin))
	}
	var lost *lostSpan
	var err error
	if start == "" && from != (startFrom{}) {
		r.log.InfoContext(ctx, "verifying a shard the mapping never checkpointed, from where its responsibility starts",
			"group", r.cfg.Group, "shard_id", sh.id, "trim_horizon", from.trimHorizon, "scope_from", from.at)
		err = r.openFrom(ctx, rd, from)
	} else {
		lost, err = r.open(ctx, rd, start, sh.startingSeq)
	}
	if err != nil {
		if ctx.Err() != nil {
			rep.Deferred = true
			if resume {
				rep.OldestUnverified = stored
			}
			return rep, nil
		}
		return rep, err
	}
	if resume && resumeErr != nil && ctx.Err() == nil {
		r.log.WarnContext(ctx, "resuming after the kept empty pages failed; reading them again from the watermark", "group", r.cfg.Group, "shard_id", sh.id, "error", resumeErr)
	}
	if resume && lost == nil && resumeErr == nil {
		r.log.InfoContext(ctx, "resuming after the empty pages an earlier pass read past the watermark",
			"group", r.cfg.Group, "shard_id", sh.id, "watermark", start, "empty_through", stored.UTC().Format(time.RFC3339Nano))
		rd.iterator, rd.ended = resumeAt, resumeAt == nil
	}
	// emptyBase is the watermark every page read since it held no record after (valid while
	// emptyOK): the base of the progress kept through empty pages.
	emptyBase, emptyOK := start, true
	// evidence: with the watermark at or past the checkpoint and its position refused, the
	// first record after it the ledger shows seen and not done (tailEvidence).
	var evidence string
	if lost != nil && start != "" && upper != "" && seqnum.Compare(start, upper) >= 0 {
		// Only a look for a tail (the watermark is at or past the checkpoint): the refusal alone
		// proves no loss (an idle shard's watermark record may expire with nothing after it),
		// the ledger's evidence of a seen, unfinished record after the watermark does. Read from
		// the trim horizon; the span stays lost only if the first record held is past that one.
		if evidence, err = r.tailEvidence(ctx, shard, start); err != nil {
			if ctx.Err() != nil {
				rep.Deferred = true
				return rep, nil
			}
			return rep, err
		}
		r.log.InfoContext(ctx, "the verified watermark's position is refused; looking for a tail from the trim horizon",
			"group", r.cfg.Group, "shard_id", sh.id, "sequence_number", start, "first_unfinished_after", evidence)
		if evidence == "" {
			lost = nil
		}
	}
	now := r.now()
	b := bounds{upper: upper, open: !closed, settled: now.Add(-r.cfg.SettleAfter), tail: now.Add(-TailAfter(r.cfg.MaxRecordAge, r.cfg.SettleAfter))}
	var lastVerifiedArrival time.Time
	deferred := func() (ShardReport, error) {
		rep.Deferred = true
		rep.OldestUnverified = lastVerifiedArrival // the next record arrived at or after it
		if emptyOK && lost == nil {
			r.keepEmpty(ctx, shard, &rep, emptyBase, rd.emptyAt)
			if resume && emptyBase == start && stored.After(rep.OldestUnverified) {
				rep.OldestUnverified = stored
			}
		}
		return rep, nil
	}
	for {
		if ctx.Err() != nil {
			return deferred()
		}
		recs, caughtUp, err := rd.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return deferred()
			}
			return rep, err
		}
		recs = after(recs, start) // from the trim horizon after a refusal: the watermark covers these
		if lost != nil && lost.to == "" && len(recs) > 0 {
			lost.to, lost.toArrival = aws.ToString(recs[0].SequenceNumber), aws.ToTime(recs[0].ApproximateArrivalTimestamp)
			if evidence != "" && seqnum.Compare(evidence, lost.to) >= 0 {
				lost = nil // the unfinished record is still held: it is verified, nothing expired unseen
			}
		}
		page, stop := b.cut(recs, &rep)
		page, stop = r.seenTail(ctx, shard, b, recs, page, stop)
		if len(page) > 0 {
			verifiedTo, failedSeq, err := r.replayCut(ctx, shard, page, upper, &rep, &counters)
			if verifiedTo != "" {
				if lost != nil && seqnum.Compare(verifiedTo, lost.to) >= 0 {
					// The advance that passes the span carries its count (one conditional write).
					// If it failed, no later advance of this run may pass the span uncounted.
					if !r.advancePastLoss(ctx, shard, verifiedTo, &rep, *lost) {
						return rep, errors.Join(err, fmt.Errorf("reconcile: count expired span of %s after %s: %w", sh.id, lost.from, errLossNotDurable))
					}
					lost = nil
				} else {
					r.advance(ctx, shard, verifiedTo, &rep)
				}
				lastVerifiedArrival = arrivalOf(page, verifiedTo)
			}
			if err != nil {
				return rep, err
			}
			if failedSeq != "" {
				rep.OldestUnverified = arrivalOf(page, failedSeq)
				rep.Deferred = ctx.Err() != nil // cut short by the budget, not by a failure
				return rep, nil                 // a record still fails: the watermark waits for it
			}
			r.report(sh.id, page, &rep)
		}
		if len(recs) > 0 {
			// Progress through empty pages counts from the last record, once the watermark is on it.
			emptyBase, emptyOK = rep.Watermark, rep.Watermark == aws.ToString(recs[len(recs)-1].SequenceNumber)
		}
		switch {
		case stop == beyondBound:
			// Everything up to the checkpoint is accounted for. A span lost after the old
			// watermark with nothing held up to the checkpoint is all of (watermark, checkpoint].
			if lost != nil {
				if err := r.settleLost(ctx, shard, &rep, lost, upper); err != nil {
					return rep, err
				}
			}
			rep.Complete = true
			return rep, nil
		case stop == unsettled:
			if lost != nil {
				r.log.WarnContext(ctx, "the trim horizon passed the verified watermark; the span is reported once the record after it is verified",
					"group", r.cfg.Group, "shard_id", sh.id, "lost_after_sequence_number", lost.from, "first_sequence_number_held", lost.to)
			}
			return rep, nil
		case closed && rd.ended:
			// A closed shard read to its end (nil NextShardIterator; an empty page is not the
			// end): all its records are accounted for. Its ending sequence number bounds all its
			// records (kinesis-local reports a smaller placeholder; the conditional advance then
			// leaves the watermark where it is).
			if lost != nil {
				// The shard is marked closed (never read again) only once its loss is counted.
				if err := r.settleLost(ctx, shard, &rep, lost, sh.endingSeq); err != nil {
					return rep, err
				}
			} else {
				r.advance(ctx, shard, sh.endingSeq, &rep)
			}
			if err := r.cps.MarkClosed(ctx, shard, sh.endingSeq); err != nil {
				return rep, fmt.Errorf("reconcile: mark %s closed: %w", sh.id, err)
			}
			rep.Complete, rep.End = true, true
			return rep, nil
		case !closed && (caughtUp || rd.ended): // ended: closed since ListShards; the next run sees it closed
			if lost != nil && upper != "" {
				if err := r.settleLost(ctx, shard, &rep, lost, upper); err != nil {
					return rep, err
				}
			}
			rep.Complete = true
			return rep, nil
		}
	}
}

// emptyMargin is how far before the kept position a pass resumes through empty pages: it
// covers a difference between the reconciler's clock and Kinesis's, from which
// MillisBehindLatest and the arrival timestamps AT_TIMESTAMP compares come, and arrival
// timestamps slightly out of order ("There are no guarantees about the timestamp accuracy, or
// that the timestamp is always increasing": Kinesis API reference, Record).
const emptyMargin = time.Second

// keepEmpty records, when a walk is cut short by its budget in a run of empty pages after the
// watermark base, the position it reached (at, from MillisBehindLatest: shardReader.emptyAt), so
// that the next pass resumes there (AT_TIMESTAMP, emptyMargin before it) instead of reading the
// stretch again from the watermark: GetRecords may take many calls to cross a portion of a shard
// without records, more than one pass's share of the shard, and a stretch read again from its
// start every pass is never crossed. The position is kept on the checkpoint item only while the
// watermark is still base (checkpoint.Store.SetEmptyThrough) and reported as the shard's oldest
// possibly unverified arrival (its verified lag). A failed write loses only progress.
func (r *Reconciler) keepEmpty(ctx context.Context, shard recordid.Shard, rep *ShardReport, base string, at time.Time) {
	if at.IsZero() {
		return
	}
	if at.After(rep.OldestUnverified) {
		rep.OldestUnverified = at // no record after base arrived before at
	}
	if _, err := r.cps.SetEmptyThrough(context.WithoutCancel(ctx), shard, checkpoint.EmptyThrough{After: base, Through: at}); err != nil {
		r.log.WarnContext(ctx, "keeping the progress through empty pages failed; the next pass reads them again", "group", shard.Group, "shard_id", shard.ShardID, "error", err)
	}
}

// open positions rd on the first record after the watermark (AFTER_SEQUENCE_NUMBER), or, for a
// shard never verified, on its first record (AT_SEQUENCE_NUMBER its starting sequence number).
// A refusal with InvalidArgumentException proves that the record after that position expired
// unverified: the span is returned and the reader reopened at the trim horizon. Any other
// refusal of the position (kinesis-local: "Unable to find record", for a number that is not a
// record) proves nothing: the reader is reopened at the trim horizon with no span, and the
// caller skips records up to the watermark.
func (r *Reconciler) open(ctx context.Context, rd *shardReader, watermark, startingSeq string) (*lostSpan, error) {
	typ, pos := types.ShardIteratorTypeAfterSequenceNumber, watermark
	if pos == "" {
		typ, pos = types.ShardIteratorTypeAtSequenceNumber, startingSeq
	}
	err := rd.open(ctx, typ, pos)
	switch {
	case errors.Is(err, errTrimmed):
		return &lostSpan{from: pos, after: watermark}, rd.open(ctx, "", "")
	case errors.Is(err, errNoRecord):
		return nil, rd.open(ctx, "", "")
	}
	return nil, err
}

// after drops the leading records at or below seq ("" keeps all).
func after(recs []types.Record, seq string) []types.Record {
	for seq != "" && len(recs) > 0 && seqnum.Compare(aws.ToString(recs[0].SequenceNumber), seq) <= 0 {
		recs = recs[1:]
	}
	return recs
}

// bounds is what a shard's walk may verify: records up to upper ("" = no bound) that arrived
// before settled, and records past upper that arrived before tail (the mapping can no longer be
// working on them: see TailAfter). open says the shard is open.
type bounds struct {
	upper         string
	open          bool
	settled, tail time.Time
}

// cut returns the leading records of recs that the bounds let the walk verify, and why it
// stopped before the end of recs. On an open shard a page ending on upper ends the walk when
// the record there is too young for anything after it to be a due tail (a closed shard is read
// on to find its end).
func (b bounds) cut(recs []types.Record, rep *ShardReport) ([]types.Record, stopReason) {
	for i, rec := range recs {
		arrival := rec.ApproximateArrivalTimestamp
		if undeliverable(rec) {
			continue // the mapping can never deliver it (undeliverable.go): due now
		}
		if b.upper != "" && seqnum.Compare(aws.ToString(rec.SequenceNumber), b.upper) > 0 {
			if arrival == nil || arrival.After(b.tail) {
				return recs[:i], beyondBound // past the checkpoint and the mapping may still be on it
			}
			continue // a tail record the mapping has given up or processed
		}
		if arrival != nil && arrival.After(b.settled) {
			rep.OldestUnverified = *arrival
			return recs[:i], unsettled
		}
	}
	if n := len(recs); n > 0 && b.open && b.upper != "" && aws.ToString(recs[n-1].SequenceNumber) == b.upper {
		// Records after the checkpoint's record arrived after it: none is a due tail while it
		// is younger than the tail bound, so there is no need to read on.
		if last := recs[n-1].ApproximateArrivalTimestamp; last == nil || last.After(b.tail) {
			return recs, beyondBound
		}
	}
	return recs, notStopped
}

// replayCut replays a page cut by bounds.cut: the records up to upper, then, only if none of
// them still fails (per-key order: a failing record holds the records after it), the tail past
// upper, counted apart as TailReplayed. Results as replayPage's, for the whole page.
func (r *Reconciler) replayCut(ctx context.Context, shard recordid.Shard, page []types.Record, upper string, rep *ShardReport, c *checkpoint.Counters) (verifiedTo, failedSeq string, err error) {
	k := len(page)
	if upper != "" {
		k = sort.Search(len(page), func(i int) bool { return seqnum.Compare(aws.ToString(page[i].SequenceNumber), upper) > 0 })
	}
	if k > 0 {
		verifiedTo, failedSeq, err = r.replayPage(ctx, shard, page[:k], rep, c, false)
		if err != nil || failedSeq != "" || k == len(page) {
			return verifiedTo, failedSeq, err
		}
	}
	tailTo, failedSeq, err := r.replayPage(ctx, shard, page[k:], rep, c, true)
	if tailTo != "" {
		verifiedTo = tailTo
	}
	return verifiedTo, failedSeq, err
}

func arrivalOf(page []types.Record, seq string) time.Time {
	for _, rec := range page {
		if aws.ToString(rec.SequenceNumber) == seq {
			return aws.ToTime(rec.ApproximateArrivalTimestamp)
		}
	}
	return time.Time{}
}

func (r *Reconciler) report(shardID string, page []types.Record, rep *ShardReport) {
	if r.progress != nil {
		r.progress(Progress{ShardID: shardID, LastSeq: aws.ToString(page[len(page)-1].SequenceNumber),
			RecordsVerified: rep.RecordsVerified, GapsReplayed: rep.GapsReplayed})
	}
}

func (r *Reconciler) addCounters(ctx context.Context, shard recordid.Shard, c *checkpoint.Counters) {
	if *c == (checkpoint.Counters{}) {
		return
	}
	if err := r.cps.AddCounters(context.WithoutCancel(ctx), shard, *c); err != nil {
		r.log.WarnContext(ctx, "adding reconciler counters failed", "group", shard.Group, "shard_id", shard.ShardID, "error", err)
	}
}

// replayPage sends one page of Kinesis records through the pipeline. It returns the highest
// sequence number below which every record of the page is accounted for ("" if none) and the
// lowest sequence number still failing ("" if none).
// tail says the page lies past the checkpoint mirror: its replays are counted TailReplayed too.
func (r *Reconciler) replayPage(ctx context.Context, shard recordid.Shard, page []types.Record, rep *ShardReport, c *checkpoint.Counters, tail bool) (verifiedTo, failedSeq string, err error) {
	// A record inside a mapping run's batch, live or less than the settle window after its last
	// lease renewal, is left to the mapping's retries: the replay would hold them, each held retry
	// costing one of the mapping's MaximumRetryAttempts.
	batch := pipeline.Batch{Shard: shard, Records: r.unfiltered(UserRecords(shard.ShardID, page), rep, c), Source: Source,
		MappingSettled: r.now().Add(-r.cfg.SettleAfter)}
	if len(batch.Records) == 0 { // every record of the page is one the filter drops
		return aws.ToString(page[len(page)-1].SequenceNumber), "", nil
	}
	res, err := r.replay.Run(ctx, batch)
	if err != nil {
		return "", "", fmt.Errorf("reconcile: replay %s %s..%s: %w", shard.ShardID, aws.ToString(page[0].SequenceNumber), aws.ToString(page[len(page)-1].SequenceNumber), err)
	}
	gaps := res.Processed + res.Parked + res.Failed
	rep.GapsDetected += gaps
	rep.GapsReplayed += res.Processed
	if tail {
		rep.TailReplayed += res.Processed
	}
	rep.Parked += res.Parked
	rep.StillFailing += res.Failed
	c.GapsDetected += int64(gaps)
	c.GapsReplayed += int64(res.Processed)
	c.Parked += int64(res.Parked)
	switch {
	case gaps > 0 && tail:
		// Past the checkpoint mirror and older than TailAfter: the mapping gave these records
		// up (or skipped them) and nothing after them moved the checkpoint.
		r.log.WarnContext(ctx, "gaps past the checkpoint (a tail the mapping gave up)", "group", shard.Group, "shard_id", shard.ShardID,
			"gaps", gaps, "replayed", res.Processed, "parked", res.Parked, "still_failing", res.Failed, "past_checkpoint", true, "metric", "TailReplayed",
			"sequence_number", aws.ToString(page[0].SequenceNumber), "last_sequence_number", aws.ToString(page[len(page)-1].SequenceNumber))
	case gaps > 0:
		r.log.WarnContext(ctx, "gaps behind the checkpoint", "group", shard.Group, "shard_id", shard.ShardID,
			"gaps", gaps, "replayed", res.Processed, "parked", res.Parked, "still_failing", res.Failed,
			"sequence_number", aws.ToString(page[0].SequenceNumber), "last_sequence_number", aws.ToString(page[len(page)-1].SequenceNumber))
	}
	if res.LowestFailedSeq == "" {
		rep.RecordsVerified += len(batch.Records)
		return aws.ToString(page[len(page)-1].SequenceNumber), "", nil
	}
	for _, rec := range page {
		seq := aws.ToString(rec.SequenceNumber)
		if seqnum.Compare(seq, res.LowestFailedSeq) >= 0 {
			break
		}
		verifiedTo = seq
	}
	for _, u := range batch.Records {
		if seqnum.Compare(u.ID.Seq, res.LowestFailedSeq) < 0 {
			rep.RecordsVerified++
		}
	}
	return verifiedTo, res.LowestFailedSeq, nil
}

// advance moves the watermark and reports whether this call moved it.
func (r *Reconciler) advance(ctx context.Context, shard recordid.Shard, seq string, rep *ShardReport) bool {
	res, err := r.cps.AdvanceWatermark(ctx, shard, seq)
	if err != nil {
		// Not fatal: the next run re-verifies from the old watermark (the ledger skips what was done).
		r.log.WarnContext(ctx, "advancing the verified watermark failed", "group", shard.Group, "shard_id", shard.ShardID, "sequence_number", seq, "error", err)
		return false
	}
	if res.Advanced || rep.Watermark == "" || seqnum.Compare(seq, rep.Watermark) > 0 {
		rep.Watermark = seq // the stored watermark is at or past seq either way
	}
	return res.Advanced
}
