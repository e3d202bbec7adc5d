package reconcile

// The scheduled pass: the stream's shards in lineage order (parents before children),
// each walked within its share of the run's time.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/recordid"
)

type shardInfo struct {
	id          string
	parents     []string
	startingSeq string // SequenceNumberRange.StartingSequenceNumber: below every record of the shard
	endingSeq   string // set when the shard is closed
}

// Run makes one scheduled pass over every shard of the stream still in retention. Work is
// bounded by ctx's deadline (minus DeadlineMargin) or MaxRunTime; what is left waits for the
// next run. The error is non-nil only when the pass could not start or a shard failed (a store
// or stream error); the report is valid either way.
//
// One stuck shard does not stop the others: each shard gets a time budget, an equal share of
// what is left of the pass among the shards not yet walked (at least MinShardTime). A shard
// whose walk has not returned shortly after its budget (a replayed record whose Process hangs,
// ignoring its context) is abandoned, reported Stuck, and the pass moves on; the walk goes on in
// the background and stops at its next check of the context (its effects are conditional, like
// those of a concurrent reconciler). The order is parents before children, starting at the
// shard where the previous pass stopped (the one after a stuck shard, or the first it did not
// reach), so a shard that holds up a pass is walked last next time; a reconciler that starts
// cold (a runtime killed by a record) starts at a shard picked from the clock, so that one
// record killing every pass does not keep the shards behind it from being verified.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	ctx, cancel := r.budget(ctx)
	defer cancel()
	var rep Report
	sv, err := r.survey(ctx)
	if err != nil {
		return rep, err
	}
	sv.scope = r.scopeStart(ctx, sv.shards, sv.byShard)
	// Parents before children: a child is verified only once each parent still in the stream
	// is closed and verified to its end, as the mapping drains parents first.
	done := map[string]bool{}
	var errs []error
	order := r.passOrder(sv.shards)
	stopped := false // the pass has recorded where the next one starts
	for i, sh := range order {
		st := r.stateOf(sv, sh.id)
		ready := ctx.Err() == nil
		if !ready && !stopped {
			stopped = true
			r.setCursor(sh.id) // the first shard this pass did not reach
		}
		if !ready || !sv.parentsDone(sh, done) {
			rep.add(ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Deferred: true,
				UnverifiedSince: r.unverifiedSince(sh.id, st)}, r.now())
			continue
		}
		sr, stuck, err := r.walk(ctx, sv, sh, st, done, len(order)-i)
		if stuck && !stopped && i+1 < len(order) {
			r.setCursor(order[i+1].id)
		}
		rep.add(sr, r.now())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done[sh.id] = sr.End
	}
	return rep, errors.Join(errs...)
}

// survey is what a pass knows of the stream before it walks a shard: the shards in retention
// and the stored state of each.
type survey struct {
	shards   []shardInfo
	byShard  map[string]checkpoint.State
	inStream map[string]bool
	drained  map[string]bool
	scope    time.Time // the group's scope start under LATEST (scope.go); zero otherwise
}

// survey lists the stream's shards and the group's shard items.
func (r *Reconciler) survey(ctx context.Context) (*survey, error) {
	shards, err := listShards(ctx, r.kin, r.cfg.Stream, r.cfg.StreamARN)
	if err != nil {
		return nil, err
	}
	states, err := r.cps.List(ctx, r.cfg.Group, r.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	sv := &survey{shards: shards, byShard: make(map[string]checkpoint.State, len(states)), inStream: make(map[string]bool, len(shards))}
	for _, s := range states {
		sv.byShard[s.Shard.ShardID] = s
	}
	for _, s := range shards {
		sv.inStream[s.id] = true
	}
	sv.drained = drainedShards(shards, sv.byShard)
	return sv, nil
}

// stateOf is the stored state of a shard of the stream (the zero State, keyed, for one without
// an item).
func (r *Reconciler) stateOf(sv *survey, id string) checkpoint.State {
	st := sv.byShard[id]
	st.Shard = r.shard(id)
	return st
}

// parentsDone reports whether every parent of sh still in the stream is verified to its end.
func (sv *survey) parentsDone(sh shardInfo, done map[string]bool) bool {
	for _, p := range sh.parents {
		if sv.inStream[p] && !done[p] {
			return false
		}
	}
	return true
}

// walk verifies one shard whose parents are done, within its share of the pass (left shards
// remain, this one included: withinShardBudget). A walk that does not return within its budget
// is abandoned and reported Deferred and Stuck. The error is the walk's (a store or stream
// error); the report is valid either way.
func (r *Reconciler) walk(ctx context.Context, sv *survey, sh shardInfo, st checkpoint.State, done map[string]bool, left int) (ShardReport, bool, error) {
	// A child the mapping gave up on from its start (lineage.go), or the root of a lineage it
	// never checkpointed (scope.go): verified from where the mapping's responsibility starts.
	from, walk := r.startOf(sh, &st, done, sv.inStream, sv.byShard, sv.drained[sh.id], sv.scope)
	if !walk {
		return ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Complete: true}, false, nil
	}
	if len(sh.parents) > 0 && len(st.Parents) == 0 && st.Checkpoint != "" {
		if err := r.cps.SetLineage(ctx, st.Shard, sh.parents); err != nil {
			r.log.WarnContext(ctx, "recording lineage failed", "group", r.cfg.Group, "shard_id", sh.id, "error", err)
		}
	}
	sr, stuck, err := r.withinShardBudget(ctx, left, func(ctx context.Context) (ShardReport, error) {
		return r.verifyShard(ctx, sh, st, sv.drained[sh.id], from)
	})
	if stuck {
		sr = ShardReport{ShardID: sh.id, Parents: sh.parents, Watermark: st.Watermark, Deferred: true, Stuck: true}
		r.log.ErrorContext(ctx, "verifying a shard did not return within its time budget: a replayed record is stuck "+
			"(its Process ignores the deadline?); the pass goes on with the other shards and the next pass starts after it",
			"group", r.cfg.Group, "shard_id", sh.id, "watermark", st.Watermark)
	}
	switch {
	case sr.Deferred && sr.OldestUnverified.IsZero():
		sr.UnverifiedSince = r.unverifiedSince(sh.id, st)
	case err == nil:
		r.keepVerifiedAsOf(sh.id, sr.OldestUnverified)
	}
	if err != nil {
		r.log.ErrorContext(ctx, "verifying shard failed; it is retried next run", "group", r.cfg.Group, "shard_id", sh.id, "error", err)
	}
	return sr, stuck, err
}

// withinShardBudget runs walk with a deadline that is this shard's share of the pass: what is
// left of ctx's deadline divided among the left shards (this one included), at least
// MinShardTime, never past ctx's deadline. It waits for walk until a short grace after that
// deadline; a walk still running then is abandoned (stuck is true; it keeps running on its own
// and its report is not used).
func (r *Reconciler) withinShardBudget(ctx context.Context, left int, walk func(context.Context) (ShardReport, error)) (_ ShardReport, stuck bool, _ error) {
	passEnd, ok := ctx.Deadline()
	if !ok { // Run always sets one (budget); a bare call gets MaxRunTime
		passEnd = time.Now().Add(r.cfg.MaxRunTime)
	}
	remaining := time.Until(passEnd)
	share := remaining / time.Duration(max(left, 1))
	share = min(max(share, r.cfg.MinShardTime), remaining)
	sctx, cancel := context.WithDeadline(ctx, time.Now().Add(share))
	type result struct {
		rep ShardReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		rep, err := walk(sctx)
		done <- result{rep, err}
	}()
	select {
	case res := <-done:
		return res.rep, false, res.err
	case <-sctx.Done():
	}
	// The walk checks its context between pages and records: give it half the margin to return
	// what it did (its last writes: the watermark, the position kept through an empty stretch),
	// so a slow write is not taken for a stuck Process. The pass's own deadline keeps
	// DeadlineMargin from the invocation's, so this stays inside the invocation.
	grace := time.NewTimer(r.cfg.DeadlineMargin / 2)
	defer grace.Stop()
	select {
	case res := <-done:
		return res.rep, false, res.err
	case <-grace.C:
		return ShardReport{}, true, nil
	}
}

// passOrder is the order of this pass: parents before children, starting at the cursor (see
// Run).
func (r *Reconciler) passOrder(shards []shardInfo) []shardInfo {
	sorted := append([]shardInfo(nil), shards...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].id < sorted[j].id })
	if len(sorted) == 0 {
		return nil
	}
	r.mu.Lock()
	cursor := r.cursor
	r.mu.Unlock()
	start := 0
	if cursor != "" {
		// The cursor's shard, or the next one by id if it left the stream.
		start = sort.Search(len(sorted), func(i int) bool { return sorted[i].id >= cursor }) % len(sorted)
	} else {
		// Cold start: a start shard picked from the clock (per minute), the same for every
		// reconciler starting in that minute.
		h := fnv.New64a()
		fmt.Fprint(h, r.now().Unix()/60)
		start = int(h.Sum64() % uint64(len(sorted)))
	}
	return topoOrder(append(sorted[start:], sorted[:start]...))
}

// unverifiedSince is the time from which a shard this pass learnt nothing about is not known to
// be verified: what this Reconciler's last walk of it found (the arrival of the oldest record
// it knew not verified, or, when it found none, the time of that walk: records that arrived
// since may be unverified); for a reconciler that never walked it (a cold start), the time the
// verified watermark last moved, or, for a shard never verified, the time the consumer last
// moved its checkpoint (every record behind it is unverified and arrived before it: a lower
// bound of the lag). Zero for a shard with neither: nothing is behind a checkpoint.
func (r *Reconciler) unverifiedSince(shardID string, st checkpoint.State) time.Time {
	r.mu.Lock()
	at, ok := r.verifiedAsOf[shardID]
	r.mu.Unlock()
	switch {
	case ok:
		return at
	case !st.WatermarkAt.IsZero():
		return st.WatermarkAt
	default:
		return st.CheckpointAt
	}
}

// keepVerifiedAsOf remembers what a walk found (unverifiedSince): oldest, or now when zero.
func (r *Reconciler) keepVerifiedAsOf(shardID string, oldest time.Time) {
	if oldest.IsZero() {
		oldest = r.now()
	}
	r.mu.Lock()
	if r.verifiedAsOf == nil {
		r.verifiedAsOf = map[string]time.Time{}
	}
	r.verifiedAsOf[shardID] = oldest
	r.mu.Unlock()
}

func (r *Reconciler) setCursor(shardID string) {
	r.mu.Lock()
	r.cursor = shardID
	r.mu.Unlock()
}

func (r *Reconciler) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-r.cfg.DeadlineMargin))
	}
	return context.WithTimeout(ctx, r.cfg.MaxRunTime)
}

func (r *Reconciler) shard(id string) recordid.Shard {
	return recordid.Shard{Group: r.cfg.Group, Stream: r.cfg.Stream, ShardID: id}
}

func (r *Reconciler) reader(shardID string, closed bool) *shardReader {
	return &shardReader{kin: r.kin, stream: r.cfg.Stream, streamARN: r.cfg.StreamARN, shardID: shardID, interval: r.cfg.ReadInterval,
		bytesPerSec: r.cfg.ReadBytesPerSecond, limit: r.cfg.PageLimit, closed: closed}
}

// listShards returns every shard of the stream still in retention, open and closed.
func listShards(ctx context.Context, kin kinesisAPI, stream, streamARN string) ([]shardInfo, error) {
	var out []shardInfo
	in := &kinesis.ListShardsInput{}
	in.StreamName, in.StreamARN = streamRef(stream, streamARN)
	for {
		page, err := kin.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("reconcile: ListShards %s: %w", stream, err)
		}
		for _, s := range page.Shards {
			info := shardInfo{id: aws.ToString(s.ShardId)}
			for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
				if aws.ToString(p) != "" {
					info.parents = append(info.parents, aws.ToString(p))
				}
			}
			if s.SequenceNumberRange != nil {
				info.startingSeq = aws.ToString(s.SequenceNumberRange.StartingSequenceNumber)
				info.endingSeq = aws.ToString(s.SequenceNumberRange.EndingSequenceNumber)
			}
			out = append(out, info)
		}
		if page.NextToken == nil {
			return out, nil
		}
		// NextToken carries the stream: ListShards rejects StreamName alongside it.
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// streamRef names the stream for a Kinesis call: by ARN when one is configured, else by name
// (the APIs take one or the other).
func streamRef(name, arn string) (streamName, streamARN *string) {
	if arn != "" {
		return nil, aws.String(arn)
	}
	return aws.String(name), nil
}

// drainedShards reports, per closed shard, whether the mapping has moved past it: some
// descendant has a checkpoint. Lambda reads a child only after its parents are read to their
// end, so from then on the closed shard's whole content is behind the consumer.
func drainedShards(shards []shardInfo, states map[string]checkpoint.State) map[string]bool {
	children := map[string][]string{}
	for _, s := range shards {
		for _, p := range s.parents {
			children[p] = append(children[p], s.id)
		}
	}
	memo := map[string]bool{}
	var visit func(id string, depth int) bool
	visit = func(id string, depth int) bool {
		if v, ok := memo[id]; ok || depth > len(shards) {
			return v
		}
		d := false
		for _, c := range children[id] {
			if states[c].Checkpoint != "" || visit(c, depth+1) {
				d = true
				break
			}
		}
		memo[id] = d
		return d
	}
	out := make(map[string]bool, len(shards))
	for _, s := range shards {
		out[s.id] = visit(s.id, 0)
	}
	return out
}

// lineageOrder sorts shards so that every parent comes before its children.
func lineageOrder(shards []shardInfo) []shardInfo {
	sorted := append([]shardInfo(nil), shards...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].id < sorted[j].id })
	return topoOrder(sorted)
}

// topoOrder orders shards so that every parent comes before its children, otherwise keeping
// the given order.
func topoOrder(sorted []shardInfo) []shardInfo {
	byID := make(map[string]shardInfo, len(sorted))
	for _, s := range sorted {
		byID[s.id] = s
	}
	var out []shardInfo
	seen := map[string]bool{}
	var visit func(s shardInfo)
	visit = func(s shardInfo) {
		if seen[s.id] {
			return
		}
		seen[s.id] = true
		for _, p := range s.parents {
			if ps, ok := byID[p]; ok {
				visit(ps)
			}
		}
		out = append(out, s)
	}
	for _, s := range sorted {
		visit(s)
	}
	return out
}
