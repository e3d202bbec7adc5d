package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// The event-source mapping's StartingPosition (Config.StartingPosition, STARTING_POSITION). It
// decides which records of a shard the mapping never checkpointed are the group's to verify
// (docs/reconciler.md, "A lineage the mapping never checkpointed"). CreateEventSourceMapping's
// StartingPosition (https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html):
// TRIM_HORIZON starts at the oldest untrimmed record of each shard, LATEST just after the most
// recent one. Polling starts eventually ("may take several minutes" after creation, so a mapping
// at LATEST "could miss events during a create or update": Lambda's "Polling and stream starting
// positions", https://docs.aws.amazon.com/lambda/latest/dg/msk-starting-positions.html).
const (
	StartTrimHorizon = "TRIM_HORIZON" // every record still in the stream is in scope (the default)
	StartLatest      = "LATEST"       // records that arrived from the group's scope start on
)

// startFrom says where the walk of a shard without a verified watermark begins, when not at its
// StartingSequenceNumber (the zero value).
type startFrom struct {
	// trimHorizon: at the oldest record still held, counting no loss before it (nothing proves
	// a record trimmed before it was ever the mapping's: it may predate the mapping).
	trimHorizon bool
	// at: AT_TIMESTAMP, the group's scope start with the mapping at LATEST (records that
	// arrived before it were never the mapping's).
	at time.Time
}

// neverCheckpointed reports whether sh is the root of a lineage the mapping has no checkpoint
// in: no checkpoint of its own, no parent still in the stream (an original shard, or one whose
// parents expired), not covered by consumedFromStart (parents recorded closed), and not drained
// (no descendant has a checkpoint, which would make the whole shard verified as behind it).
func neverCheckpointed(sh shardInfo, st checkpoint.State, inStream map[string]bool, drained bool) bool {
	if st.Checkpoint != "" || sh.startingSeq == "" || drained {
		return false
	}
	for _, p := range sh.parents {
		if inStream[p] {
			return false
		}
	}
	return true
}

// startOf decides how a shard without a checkpoint of its own is walked, if at all. A child of
// parents verified to their end (consumedFromStart), or a root of a lineage never checkpointed
// (neverCheckpointed), gets a virtual checkpoint at its StartingSequenceNumber, so that all its
// records are a tail (verified once older than TailAfter, when the mapping can no longer be
// working on them); the walk starts, with no watermark yet, where the mapping's responsibility
// starts: the shard's first record for a child under TRIM_HORIZON, the oldest record held for a
// root under TRIM_HORIZON, the group's scope start (AT_TIMESTAMP) for both under LATEST unless a
// parent has a checkpoint of its own (parentConsumed: then as under TRIM_HORIZON). ok is
// false for a shard that is left alone (it has a checkpoint: ok is true and nothing changes; it
// is neither of the two; or the scope start under LATEST is not recorded yet). A shard drained
// without a checkpoint of its own keeps no virtual checkpoint (verifyShard walks it whole), but
// under LATEST its walk, too, starts at the group's scope start (same exception).
func (r *Reconciler) startOf(sh shardInfo, st *checkpoint.State, done, inStream map[string]bool, byShard map[string]checkpoint.State, drained bool, scope time.Time) (from startFrom, walk bool) {
	child := consumedFromStart(sh, *st, done, inStream, byShard)
	root := !child && neverCheckpointed(sh, *st, inStream, drained)
	// Drained without a checkpoint of its own (the mapping moved past it to a child that has
	// one): walked whole (verifyShard), with no virtual checkpoint.
	bare := drained && st.Checkpoint == ""
	if !child && !root && !bare {
		return startFrom{}, true
	}
	// Under LATEST only records from the scope start are the group's, unless a parent has a
	// checkpoint of its own: the mapping was reading the parent, so the shard was created while
	// the mapping ran and was the mapping's from its start (Lambda reads a child from its start
	// once its parents are done, lineage.go), however late the scope start was recorded.
	latest := r.cfg.StartingPosition == StartLatest && !parentConsumed(sh, byShard)
	switch {
	case latest && scope.IsZero():
		return startFrom{}, false // not durable yet: retried next pass
	case latest:
		from.at = scope
	case root:
		from.trimHorizon = true
	}
	if child || root {
		st.Checkpoint = sh.startingSeq // every record is past this virtual checkpoint: a tail
	}
	return from, true
}

// parentConsumed reports whether a parent of sh has a checkpoint of its own: the mapping
// processed records of the parent, so it was running before sh was created.
func parentConsumed(sh shardInfo, byShard map[string]checkpoint.State) bool {
	for _, p := range sh.parents {
		if byShard[p].Checkpoint != "" {
			return true
		}
	}
	return false
}

// scopeStart returns the group's scope start under LATEST: the earliest ScopeFrom recorded on
// any of its shard items, or, when none is, now or the earliest checkpoint time held if
// earlier, recorded first. It records the value on every
// shard of the stream whose item lacks one (once per shard in the stream's life: a shard that
// appears later gets the group's value, not the time it was first seen). Zero when the position
// is not LATEST, or when no item holds the value and recording it failed (the shards that need
// it are left for the next pass).
func (r *Reconciler) scopeStart(ctx context.Context, shards []shardInfo, byShard map[string]checkpoint.State) time.Time {
	if r.cfg.StartingPosition != StartLatest {
		return time.Time{}
	}
	scope := earliestScopeFrom(byShard)
	durable := !scope.IsZero()
	if scope.IsZero() {
		scope = r.now()
		// A group already running when its scope start is first recorded (a reconciler
		// upgraded to the version that records it, a first pass late after the deployment):
		// the consumer wrote every checkpoint after the mapping started, so the earliest one
		// still held bounds the mapping's start from above, closer than this pass's clock.
		for _, st := range byShard {
			if st.Checkpoint != "" && !st.CheckpointAt.IsZero() && st.CheckpointAt.Before(scope) {
				scope = st.CheckpointAt
			}
		}
	}
	for _, sh := range shards {
		if !byShard[sh.id].ScopeFrom.IsZero() {
			continue
		}
		if err := r.cps.SetScopeFrom(ctx, r.shard(sh.id), scope); err != nil {
			r.log.WarnContext(ctx, "recording the group's scope start failed; retried next pass", "group", r.cfg.Group, "shard_id", sh.id, "error", err)
			continue
		}
		if !durable {
			r.log.InfoContext(ctx, "recorded the group's scope start (StartingPosition LATEST): records that arrived before it on a shard the mapping never checkpointed are out of scope",
				"group", r.cfg.Group, "stream", r.cfg.Stream, "scope_from", scope.UTC().Format(time.RFC3339Nano))
		}
		durable = true
	}
	if !durable {
		return time.Time{}
	}
	return scope
}

// earliestScopeFrom is the earliest ScopeFrom recorded on the group's items (zero: none).
func earliestScopeFrom(byShard map[string]checkpoint.State) time.Time {
	var scope time.Time
	for _, st := range byShard {
		if !st.ScopeFrom.IsZero() && (scope.IsZero() || st.ScopeFrom.Before(scope)) {
			scope = st.ScopeFrom
		}
	}
	return scope
}

// openFrom positions rd for a shard without a verified watermark according to from.
func (r *Reconciler) openFrom(ctx context.Context, rd *shardReader, from startFrom) error {
	if !from.at.IsZero() {
		return rd.openAt(ctx, from.at)
	}
	return rd.open(ctx, "", "") // TRIM_HORIZON
}

// openAt positions the reader AT_TIMESTAMP t: at the first record that arrived at or after t.
func (r *shardReader) openAt(ctx context.Context, t time.Time) error {
	it, err := r.iteratorAt(ctx, t)
	if err != nil {
		return err
	}
	r.iterator = it
	r.ended = r.iterator == nil
	return nil
}

// iteratorAt returns an iterator AT_TIMESTAMP t without moving the reader.
func (r *shardReader) iteratorAt(ctx context.Context, t time.Time) (*string, error) {
	in := &kinesis.GetShardIteratorInput{ShardId: aws.String(r.shardID), ShardIteratorType: types.ShardIteratorTypeAtTimestamp, Timestamp: aws.Time(t)}
	in.StreamName, in.StreamARN = streamRef(r.stream, r.streamARN)
	out, err := r.kin.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("reconcile: GetShardIterator %s AT_TIMESTAMP %s: %w", r.shardID, t.UTC().Format(time.RFC3339Nano), err)
	}
	return out.ShardIterator, nil
}
