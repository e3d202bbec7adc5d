package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// DedupeLedger adapts the DynamoDB ledger (internal/dedupe) to Ledger and Claimer.
type DedupeLedger struct{ L *dedupe.Ledger }

var (
	_ Ledger   = DedupeLedger{}
	_ Claimer  = DedupeLedger{}
	_ View     = (*dedupe.Range)(nil)
	_ View     = dedupeView{}
	_ ParkView = dedupeView{}
)

// dedupeView is a *dedupe.Range (its Markers, Parked, Each, ... stay reachable) with its parks
// as park receipts.
type dedupeView struct{ *dedupe.Range }

// ParkReceipts implements ParkView.
func (v dedupeView) ParkReceipts(id recordid.ID) []park.Receipt {
	var out []park.Receipt
	for _, p := range v.Range.Parks(id) {
		out = append(out, p.Receipt)
	}
	return out
}

// Ledger returns the ledger p reads and writes (redrive confirms parked messages against it).
func (p *Pipeline) Ledger() Ledger { return p.ledger }

// Lookup implements Ledger.
func (d DedupeLedger) Lookup(ctx context.Context, shard recordid.Shard, first, last string) (View, error) {
	r, err := d.L.Lookup(ctx, shard, first, last)
	if err != nil {
		return nil, err // never a typed nil inside a non-nil View
	}
	return dedupeView{r}, nil
}

// Record implements Ledger.
func (d DedupeLedger) Record(ctx context.Context, shard recordid.Shard, e Entry) error {
	return d.L.Record(ctx, shard, e)
}

// Mark implements Ledger.
func (d DedupeLedger) Mark(ctx context.Context, shard recordid.Shard, m Marker) error {
	return d.L.Mark(ctx, shard, m)
}

// Unmark implements Ledger.
func (d DedupeLedger) Unmark(ctx context.Context, shard recordid.Shard, m Marker) error {
	return d.L.Unmark(ctx, shard, m.Last, m.Nonce)
}

// Claim implements Claimer. A key the ledger can never claim (dedupe.ErrInvalidKey) is the
// record's fault (ErrRecordFault); every other error is not.
func (d DedupeLedger) Claim(ctx context.Context, group, key string, id recordid.ID) (bool, error) {
	r, err := d.L.Claim(ctx, group, key, id)
	if errors.Is(err, dedupe.ErrInvalidKey) {
		return false, fmt.Errorf("%w: %w", ErrRecordFault, err)
	}
	if err != nil {
		return false, err
	}
	return r.Duplicate, nil
}

// CheckpointStore adapts the checkpoint mirror (internal/checkpoint) to Checkpointer.
type CheckpointStore struct{ S *checkpoint.Store }

var _ Checkpointer = CheckpointStore{}

// Advance implements Checkpointer.
func (c CheckpointStore) Advance(ctx context.Context, shard recordid.Shard, seq string) (Advance, error) {
	r, err := c.S.Advance(ctx, shard, seq)
	if err != nil {
		return Advance{}, err
	}
	return Advance{Advanced: r.Advanced, Previous: r.Previous}, nil
}
