package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Checkpoint is an in-memory checkpoint mirror with the conditional semantics of
// checkpoint.Store: the consumer's side (pipeline.Checkpointer: Advance) and the reconciler's
// (List, Get, AdvanceWatermark, CountLoss, AddCounters, MarkClosed, SetLineage, SetScopeFrom,
// SetEmptyThrough, SetVerifiedAsOf). The contract (TestStores) holds it to the store's
// behaviour. It keeps no timestamps of its own (CheckpointAt, WatermarkAt stay as Edit sets
// them). The zero value is ready.
type Checkpoint struct {
	mu     sync.Mutex
	states map[string]*checkpoint.State // by shard (Shard.String)
	spans  map[string]bool              // lost spans counted, by shard and the watermark they follow

	Calls int // Advance calls
	Lists int // List calls
	// Gets are the shard ids of Get calls, in order.
	Gets []string
	// Closed are the shard ids of MarkClosed calls, in order.
	Closed []string
	// Fail, when set, is called before each Advance; its error is returned instead.
	Fail func(shard recordid.Shard, seq string) error
	// FailWatermark, when set, is called before each AdvanceWatermark; its error is returned
	// instead.
	FailWatermark func(shard recordid.Shard, seq string) error
	// FailLoss, when set, is returned by every CountLoss.
	FailLoss error
}

var _ pipeline.Checkpointer = (*Checkpoint)(nil)

// state returns shard's state, created empty when missing. c.mu must be held.
func (c *Checkpoint) state(shard recordid.Shard) *checkpoint.State {
	if c.states == nil {
		c.states = map[string]*checkpoint.State{}
	}
	st, ok := c.states[shard.String()]
	if !ok {
		st = &checkpoint.State{Shard: shard}
		c.states[shard.String()] = st
	}
	return st
}

// Edit runs fn on shard's state (created empty when missing) under the fake's lock: a test
// seeding what the store would hold.
func (c *Checkpoint) Edit(shard recordid.Shard, fn func(*checkpoint.State)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c.state(shard))
}

// Set seeds shard's checkpoint and watermark.
func (c *Checkpoint) Set(shard recordid.Shard, cp, wm string) {
	c.Edit(shard, func(st *checkpoint.State) { st.Checkpoint, st.Watermark = cp, wm })
}

// Seq returns shard's checkpoint ("" if none).
func (c *Checkpoint) Seq(shard recordid.Shard) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.states[shard.String()]; ok {
		return st.Checkpoint
	}
	return ""
}

// State returns the state of the shard with this id (of any group and stream; the zero State
// when none).
func (c *Checkpoint) State(shardID string) checkpoint.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.states {
		if st.Shard.ShardID == shardID {
			return *st
		}
	}
	return checkpoint.State{}
}

// advance moves *pos to seq if it is higher (checkpoint.Store's monotonic write).
func advance(pos *string, seq string) (checkpoint.Result, error) {
	if err := seqnum.Validate(seq); err != nil {
		return checkpoint.Result{}, err
	}
	if *pos != "" && seqnum.Compare(*pos, seq) >= 0 {
		return checkpoint.Result{Previous: *pos}, nil
	}
	*pos = seq
	return checkpoint.Result{Advanced: true}, nil
}

// Advance implements pipeline.Checkpointer.
func (c *Checkpoint) Advance(_ context.Context, shard recordid.Shard, seq string) (pipeline.Advance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Calls++
	if c.Fail != nil {
		if err := c.Fail(shard, seq); err != nil {
			return pipeline.Advance{}, err
		}
	}
	st := c.state(shard)
	r, err := advance(&st.Checkpoint, seq)
	if r.Advanced {
		st.CheckpointWrites++ // the store bumps checkpointWrites with every advance
	}
	return pipeline.Advance{Advanced: r.Advanced, Previous: r.Previous}, err
}

// AdvanceWatermark moves the verified watermark like Advance the checkpoint.
func (c *Checkpoint) AdvanceWatermark(_ context.Context, shard recordid.Shard, seq string) (checkpoint.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.FailWatermark != nil {
		if err := c.FailWatermark(shard, seq); err != nil {
			return checkpoint.Result{}, err
		}
	}
	return advance(&c.state(shard).Watermark, seq)
}

// List returns the states of the stream's shards known to group, ordered by shard id.
func (c *Checkpoint) List(_ context.Context, group, stream string) ([]checkpoint.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Lists++
	out := []checkpoint.State{}
	for _, st := range c.states {
		if st.Shard.Group == group && st.Shard.Stream == stream {
			out = append(out, *st)
		}
	}
	slices.SortFunc(out, func(a, b checkpoint.State) int { return strings.Compare(a.Shard.ShardID, b.Shard.ShardID) })
	return out, nil
}

// Get returns shard's state, or an error wrapping checkpoint.ErrNotFound.
func (c *Checkpoint) Get(_ context.Context, shard recordid.Shard) (checkpoint.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Gets = append(c.Gets, shard.ShardID)
	st, ok := c.states[shard.String()]
	if !ok {
		return checkpoint.State{}, fmt.Errorf("get %s: %w", shard, checkpoint.ErrNotFound)
	}
	return *st, nil
}

// CountLoss has checkpoint.Store.CountLoss's conditions: the watermark still exactly l.After
// and the span not counted yet; then the counter and, when l.To is set, the watermark move.
func (c *Checkpoint) CountLoss(_ context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.FailLoss != nil {
		return checkpoint.Result{}, c.FailLoss
	}
	st := c.state(shard)
	if c.spans == nil {
		c.spans = map[string]bool{}
	}
	span := shard.String() + "|" + l.After
	if st.Watermark != l.After || c.spans[span] {
		return checkpoint.Result{Previous: st.Watermark}, nil
	}
	c.spans[span] = true
	if l.To != "" {
		st.Watermark = l.To
	}
	if l.Done {
		st.ExpiredUnverified++
	} else {
		st.LostToRetention++
	}
	return checkpoint.Result{Advanced: true}, nil
}

// AddCounters adds n to shard's counters; a negative field is refused, as the store refuses it.
func (c *Checkpoint) AddCounters(_ context.Context, shard recordid.Shard, n checkpoint.Counters) error {
	add := []int64{n.CheckpointWrites, n.RacesLost, n.GapsDetected, n.GapsReplayed, n.Parked, n.LostToRetention, n.ExpiredUnverified, n.Filtered}
	for _, v := range add {
		if v < 0 {
			return errors.New("add counters: a negative field; counters only grow")
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(shard)
	for i, p := range []*int64{&st.CheckpointWrites, &st.RacesLost, &st.GapsDetected, &st.GapsReplayed, &st.Parked, &st.LostToRetention, &st.ExpiredUnverified, &st.Filtered} {
		*p += add[i]
	}
	return nil
}

// MarkClosed records the shard closed at endingSeq; another ending sequence than the one
// recorded is checkpoint.ErrConflict.
func (c *Checkpoint) MarkClosed(_ context.Context, shard recordid.Shard, endingSeq string) error {
	if err := seqnum.Validate(endingSeq); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(shard)
	if st.EndingSeq != "" && st.EndingSeq != endingSeq {
		return checkpoint.ErrConflict
	}
	st.Closed, st.EndingSeq = true, endingSeq
	c.Closed = append(c.Closed, shard.ShardID)
	return nil
}

// SetEmptyThrough keeps e while the watermark is still e.After and e is further than what is
// kept for that watermark.
func (c *Checkpoint) SetEmptyThrough(_ context.Context, shard recordid.Shard, e checkpoint.EmptyThrough) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(shard)
	if st.Watermark != e.After || (st.Empty.After == e.After && !e.Through.After(st.Empty.Through)) {
		return false, nil
	}
	st.Empty = e
	return true, nil
}

// SetLineage records the shard's parents (unconditional).
func (c *Checkpoint) SetLineage(_ context.Context, shard recordid.Shard, parents []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state(shard).Parents = slices.Clone(parents)
	return nil
}

// SetScopeFrom records at unless the shard already holds a scope start (the store's
// if_not_exists).
func (c *Checkpoint) SetScopeFrom(_ context.Context, shard recordid.Shard, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.state(shard); st.ScopeFrom.IsZero() {
		st.ScopeFrom = at
	}
	return nil
}

// SetVerifiedAsOf records at (a plain set, as the store's).
func (c *Checkpoint) SetVerifiedAsOf(_ context.Context, shard recordid.Shard, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state(shard).VerifiedAsOf = at
	return nil
}
