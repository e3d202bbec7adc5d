package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// finish ends a Run: the ledger entry and the checkpoint advance are written in parallel, so
// the critical path of a batch is two sequential round trips (the lookup beside the marker,
// then these two), not three.
//
// Writing them at once is safe because the checkpoint never decides processing
// (docs/design.md, "1. The checkpoint never decides whether a record is processed"): no reader
// takes a record for done because the checkpoint passed it. The pipeline reads only the ledger;
// the reconciler treats a record behind the checkpoint with no ledger entry as a gap and replays
// it. So a checkpoint that lands while the entry is lost (a failed write, a crash between the
// two) can only make records come again: the batch fails (ErrLedger) and Lambda retries it, or,
// if the mapping gives up, the reconciler finds the gap.
func (p *Pipeline) finish(ctx context.Context, log *slog.Logger, b *Batch, outcomes []outcome, entry Entry, mk *markerRun, nonce string, res *Result) error {
	var cp Result // the checkpoint's fields, written by the goroutine below only
	var wg sync.WaitGroup
	if b.AdvanceCheckpoint {
		wg.Go(func() { p.advance(ctx, log, b, outcomes, &cp) })
	}
	var err error
	if len(entry.Done)+len(entry.Failed) == 0 {
		mk.release(ctx) // nothing to record: retire the marker so it never reads as a death
	} else {
		entry.Nonce = nonce // completes the marker
		err = p.ledger.Record(ctx, b.Shard, entry)
	}
	wg.Wait()
	res.CheckpointSeq, res.CheckpointAdvanced, res.CheckpointRaceLost = cp.CheckpointSeq, cp.CheckpointAdvanced, cp.CheckpointRaceLost
	res.CheckpointWriteFailures += cp.CheckpointWriteFailures
	if err != nil {
		first, last := b.Records[0].ID.Seq, b.Records[len(b.Records)-1].ID.Seq
		log.ErrorContext(ctx, "ledger write failed: the whole batch will be retried",
			"sequence_number", first, "last_sequence_number", last, "checkpoint_sequence_number", cp.CheckpointSeq, "error", err)
		mk.release(ctx)
		return fmt.Errorf("%w: record %s [%s, %s]: %w", ErrLedger, b.Shard, first, last, err)
	}
	res.LedgerWritten = len(entry.Done)+len(entry.Failed) > 0
	return nil
}
