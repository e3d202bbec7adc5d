package pipeline

// After the records ran: the ledger entry and counts from the outcomes, and the checkpoint.

import (
	"context"
	"log/slog"
)

// tally fills res from the outcomes and returns the ledger entry.
func (p *Pipeline) tally(b *Batch, outcomes []outcome, res *Result) Entry {
	e := Entry{First: b.Records[0].ID.Seq, Last: b.Records[len(b.Records)-1].ID.Seq, Source: b.Source}
	for i, o := range outcomes {
		id := b.Records[i].ID
		switch o.status {
		case statusSkipped:
			res.DuplicatesSkipped++
		case statusKeyDup:
			res.DuplicatesSkipped++
			res.KeyDuplicates++
			e.Done = append(e.Done, id)
		case statusProcessed:
			res.Processed++
			e.Done = append(e.Done, id)
		case statusParked:
			res.Parked++
			e.Done = append(e.Done, id)
			e.Parked = append(e.Parked, id)
			if o.parked != nil && o.parked.receipt.ParkID != "" {
				// The park itself, in the entry that counts the record done (the ledger is the
				// authority for what was parked: redrive acts only on messages it confirms).
				e.Parks = append(e.Parks, ParkRecord{ID: id, Receipt: o.parked.receipt})
			}
			switch o.why {
			case whyHeldKey:
				res.HeldParked++ // not run: no attempt
			case whyDied:
				res.DeadParked++ // its last attempt was a death, counted by the marker
			case whyAbandoned:
				res.Abandoned++
				e.Failed = append(e.Failed, id) // its last attempt failed too
			default:
				e.Failed = append(e.Failed, id) // its last attempt failed too
			}
			if o.byRef {
				res.ParkedByRef++
				e.ParkedByRef = append(e.ParkedByRef, id)
			}
		default: // statusFailed (statusPending cannot survive the lanes)
			res.Failed++
			if res.LowestFailedSeq == "" {
				res.LowestFailedSeq = id.Seq
			}
			if o.attempted {
				res.FailedAttempts++
				e.Failed = append(e.Failed, id)
			}
			switch o.why {
			case whyDeadline:
				res.DeadlineSkipped++
			case whyHeld:
				res.InFlightSkipped++
			case whyIsolated:
				res.Isolated++
			case whyAbandoned:
				res.Abandoned++
			}
			if o.parkErr {
				res.ParkFailures++
			}
			res.Failures = append(res.Failures, Failure{ID: id, Err: o.err, Attempted: o.attempted, Attempts: o.attempts})
		}
	}
	return e
}

// advance moves the checkpoint to the highest sequence number below which every record of the
// batch is done. Its outcome is logged and counted, never acted on.
func (p *Pipeline) advance(ctx context.Context, log *slog.Logger, b *Batch, outcomes []outcome, res *Result) {
	target := ""
	for i := 0; i < len(b.Records); {
		seq, done := b.Records[i].ID.Seq, true
		for ; i < len(b.Records) && b.Records[i].ID.Seq == seq; i++ { // sub-records share a sequence
			if outcomes[i].status == statusFailed {
				done = false
			}
		}
		if !done {
			break
		}
		target = seq
	}
	if target == "" {
		return
	}
	res.CheckpointSeq = target
	adv, err := p.checkpoint.Advance(ctx, b.Shard, target)
	switch {
	case err != nil:
		res.CheckpointWriteFailures++
		log.WarnContext(ctx, "checkpoint write failed (counted; records are unaffected)", "sequence_number", target, "error", err)
	case !adv.Advanced:
		res.CheckpointRaceLost = true
		log.InfoContext(ctx, "checkpoint race lost: another writer is at or past this batch (records are unaffected)",
			"sequence_number", target, "stored_sequence_number", adv.Previous)
	default:
		res.CheckpointAdvanced = true
	}
}
