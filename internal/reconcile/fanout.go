package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// Fan-out. One invocation walking every shard verifies the whole stream at one shard's read
// rate (ReadBytesPerSecond), whatever the number of shards. With a verify queue the scheduled
// pass is a coordinator instead (Plan): it lists the shards, reports every shard's verified lag
// from the stored state, and queues one work message per shard ready to be walked; each message
// is one shard's walk in its own invocation (RunShard), so the stream is verified at the shards'
// read rate summed. The queue is SQS FIFO with the shard as the message group: SQS hands a
// group's next message out only after the one in flight is deleted or its visibility ends, so
// one walker per shard runs at a time ("Amazon SQS FIFO queue message group ID",
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html),
// and the SQS event source's MaximumConcurrency bounds how many walk at once
// (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html). Everything a walk
// needs between invocations is stored on the shard's item: the verified watermark, the position
// kept through empty pages, the closed mark (a parent verified to its end), the scope start, and
// where the last walk left verification (VerifiedAsOf, which the coordinator reports the lag
// from).

// ErrShardNotInStream is wrapped by RunShard for a shard the stream does not list (trimmed
// with its records, or never the stream's).
var ErrShardNotInStream = errors.New("reconcile: shard not in the stream")

// PlannedShard is one shard of a coordinator's pass.
type PlannedShard struct {
	ShardID string
	Parents []string
	// Ready: not verified to its end, and every parent still in the stream is (recorded
	// closed): its walk can run now. A shard that is not ready is queued by its parent's walk
	// when that one reaches the parent's end, or by a later pass.
	Ready bool
	// Closed: verified to its end; nothing is left to walk.
	Closed bool
	// LagFrom is the time its verified lag is measured from (zero: none known, lag 0).
	LagFrom time.Time
}

// Plan is a coordinator's view of the stream.
type Plan struct {
	Shards []PlannedShard // parents before children
}

// Report is the plan as a pass report: every shard Deferred (this invocation walked none) with
// its stored lag, a closed one Complete and End, so that the lag of every shard is emitted and
// the group's VerifiedLag is the worst shard's.
func (p Plan) Report(now time.Time) Report {
	var rep Report
	for _, s := range p.Shards {
		sr := ShardReport{ShardID: s.ShardID, Parents: s.Parents}
		if s.Closed {
			sr.Complete, sr.End = true, true
		} else {
			sr.Deferred, sr.UnverifiedSince = true, s.LagFrom
		}
		rep.add(sr, now)
	}
	return rep
}

// Plan is the coordinator's pass: it lists the shards and their stored state, records the
// group's scope start under LATEST (scopeStart: the walks only read it), and says which shards
// are ready to be walked. It reads no records.
func (r *Reconciler) Plan(ctx context.Context) (Plan, error) {
	ctx, cancel := r.budget(ctx)
	defer cancel()
	sv, err := r.survey(ctx)
	if err != nil {
		return Plan{}, err
	}
	r.scopeStart(ctx, sv.shards, sv.byShard)
	done := sv.closedShards()
	var p Plan
	for _, sh := range lineageOrder(sv.shards) {
		st := sv.byShard[sh.id]
		ps := PlannedShard{ShardID: sh.id, Parents: sh.parents, Closed: st.Closed}
		if !st.Closed {
			ps.Ready = sv.parentsDone(sh, done)
			ps.LagFrom = storedLagFrom(st)
		}
		p.Shards = append(p.Shards, ps)
	}
	return p, nil
}

// storedLagFrom is the time a shard's verified lag is measured from by the state stored on its
// item: where the last walk left verification (VerifiedAsOf); for a shard no walk recorded that
// on, the time the verified watermark last moved; for one never verified, the time the consumer
// last moved its checkpoint (every record behind it arrived before: a lower bound of the lag).
// Zero for a shard with none of them: nothing is behind a checkpoint.
func storedLagFrom(st checkpoint.State) time.Time {
	switch {
	case !st.VerifiedAsOf.IsZero():
		return st.VerifiedAsOf
	case !st.WatermarkAt.IsZero():
		return st.WatermarkAt
	default:
		return st.CheckpointAt
	}
}

// closedShards is, per shard with an item, whether it is recorded closed: verified to its end
// by some earlier walk (MarkClosed comes only after the walk reached the shard's end).
func (sv *survey) closedShards() map[string]bool {
	done := map[string]bool{}
	for id, st := range sv.byShard {
		if st.Closed {
			done[id] = true
		}
	}
	return done
}

// ShardRun is what RunShard did.
type ShardRun struct {
	Report ShardReport
	// Waiting: a parent still in the stream is not verified to its end; nothing was walked. The
	// parent's walk queues this shard when it reaches the parent's end.
	Waiting bool
	// More: the walk used its time before reaching the shard's bound; a fresh invocation goes
	// on from the stored watermark.
	More bool
	// Children: when the walk reached the end of a closed shard, the shards of the stream it is
	// a parent of (their turn has come).
	Children []string
}

// RunShard walks one shard, as one invocation of the fan-out: parents must be verified to their
// end (recorded closed: another invocation walked them), and the walk has the whole invocation
// (its deadline minus DeadlineMargin, or MaxRunTime) as its budget. Under LATEST the group's
// scope start is read, never recorded here: the coordinator records it; a shard that needs it
// before it is recorded is left for a later pass (startOf). After the walk the shard's item
// records where verification stands (VerifiedAsOf) for the coordinator's lag. The error is a
// store or stream error (the walk is retried); the run is valid either way.
func (r *Reconciler) RunShard(ctx context.Context, shardID string) (ShardRun, error) {
	ctx, cancel := r.budget(ctx)
	defer cancel()
	sv, sh, err := r.surveyShard(ctx, shardID)
	if err != nil {
		return ShardRun{}, err
	}
	st := r.stateOf(sv, sh.id)
	done := sv.closedShards()
	if !sv.parentsDone(sh, done) {
		return ShardRun{Waiting: true, Report: ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark,
			Deferred: true, UnverifiedSince: storedLagFrom(st)}}, nil
	}
	sv.scope = sv.storedScope(r.cfg.StartingPosition)
	sr, stuck, err := r.walk(ctx, sv, sh, st, done, 1)
	run := ShardRun{Report: sr, More: sr.Deferred && !stuck && err == nil}
	if err == nil && !stuck {
		at := sr.OldestUnverified
		if at.IsZero() && !sr.Deferred {
			at = r.now() // nothing known unverified: records that arrive from now on may be
		}
		if !at.IsZero() {
			if werr := r.cps.SetVerifiedAsOf(ctx, st.Shard, at); werr != nil {
				r.log.WarnContext(ctx, "recording where the shard's verification stands failed: its lag reads from the previous record until the next walk",
					"group", r.cfg.Group, "shard_id", sh.id, "error", werr)
			}
		}
	}
	if sr.End {
		for _, s := range sv.shards {
			for _, p := range s.parents {
				if p == sh.id {
					run.Children = append(run.Children, s.id)
				}
			}
		}
	}
	return run, err
}

// surveyShard is the survey one shard's walk needs: the stream's shards, and the items of the
// shard, its parents and its descendants (whether it is drained depends on theirs), each read
// with GetItem: a walk reads a few items, not the group's every one (a Query of all N items
// per walk would make a pass over N shards read N² items).
func (r *Reconciler) surveyShard(ctx context.Context, shardID string) (*survey, shardInfo, error) {
	shards, err := listShards(ctx, r.kin, r.cfg.Stream, r.cfg.StreamARN)
	if err != nil {
		return nil, shardInfo{}, err
	}
	sv := &survey{shards: shards, byShard: map[string]checkpoint.State{}, inStream: make(map[string]bool, len(shards))}
	children := map[string][]string{}
	var sh shardInfo
	for _, s := range shards {
		sv.inStream[s.id] = true
		if s.id == shardID {
			sh = s
		}
		for _, p := range s.parents {
			children[p] = append(children[p], s.id)
		}
	}
	if !sv.inStream[shardID] {
		return nil, shardInfo{}, fmt.Errorf("%w: %s of %s", ErrShardNotInStream, shardID, r.cfg.Stream)
	}
	need := append([]string{shardID}, sh.parents...)
	seen := map[string]bool{shardID: true}
	for queue := children[shardID]; len(queue) > 0; queue = queue[1:] { // descendants, breadth first
		if c := queue[0]; !seen[c] {
			seen[c] = true
			need = append(need, c)
			queue = append(queue, children[c]...)
		}
	}
	for _, id := range need {
		if _, ok := sv.byShard[id]; ok {
			continue
		}
		st, err := r.cps.Get(ctx, r.shard(id))
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			continue
		case err != nil:
			return nil, shardInfo{}, fmt.Errorf("reconcile: read the item of %s: %w", id, err)
		}
		sv.byShard[id] = st
	}
	sv.drained = drainedShards(shards, sv.byShard)
	return sv, sh, nil
}

// storedScope is the group's scope start under LATEST as recorded on the items; zero when not
// LATEST or not recorded yet.
func (sv *survey) storedScope(startingPosition string) time.Time {
	if startingPosition != StartLatest {
		return time.Time{}
	}
	return earliestScopeFrom(sv.byShard)
}
