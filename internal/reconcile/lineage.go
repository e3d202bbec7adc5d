package reconcile

import "github.com/gapless-dev/gapless/internal/checkpoint"

// consumedFromStart reports whether a shard without a checkpoint must still have been read by
// the mapping from its first record: it is a child (it has parents), and every parent is
// verified to its end and marked closed, in this pass (done) or, for a parent no longer in the
// stream, by an earlier one (its item says Closed).
//
// Lambda reads a child shard only after its parents are read to their end, and then from the
// child's start, so that the records of a key stay in order across a reshard (Kinesis Developer
// Guide, resharding: a consumer processes a parent before its children; the local mapping,
// internal/local/esm, does the same, docs/esm.md). A parent is verified to its end only when the mapping
// consumed it (its own checkpoint) or moved past it (a descendant's checkpoint, drainedShards),
// so such a parent's children were the mapping's from their start. A child without a checkpoint
// then is one whose every batch so far the mapping gave up (with the on-failure delivery
// failing, or the message lost with the failure queue): the pass verifies it as if its checkpoint
// were its StartingSequenceNumber, so every record in it is a tail (verified once older than
// TailAfter, when the mapping can no longer be working on it). Without this such a child was
// never read and its records expired with the stream, uncounted.
//
// An original shard (no parents) without a checkpoint, the root of a lineage none of whose
// shards ever got a checkpoint, is scope.go's (neverCheckpointed): which of its records are in
// scope depends on the mapping's StartingPosition, which the checkpoint table does not hold.
func consumedFromStart(sh shardInfo, st checkpoint.State, done, inStream map[string]bool, byShard map[string]checkpoint.State) bool {
	if st.Checkpoint != "" || len(sh.parents) == 0 || sh.startingSeq == "" {
		return false
	}
	for _, p := range sh.parents {
		if inStream[p] && !done[p] {
			return false
		}
		if !inStream[p] && !byShard[p].Closed {
			return false
		}
	}
	return true
}
