package reconcile

import (
	"fmt"

	"context"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// SetScopeFrom records at unless the shard already holds a scope start (as the store's
// if_not_exists). TEST-ONLY.
func (c *memCheckpoints) SetScopeFrom(_ context.Context, shard recordid.Shard, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.get(shard); st.ScopeFrom.IsZero() {
		st.ScopeFrom = at
	}
	return nil
}

// SetVerifiedAsOf records at (a plain set, as the store's). TEST-ONLY.
func (c *memCheckpoints) SetVerifiedAsOf(_ context.Context, shard recordid.Shard, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.get(shard).VerifiedAsOf = at
	return nil
}

// Get returns the shard's state, or an error wrapping checkpoint.ErrNotFound. TEST-ONLY.
func (c *memCheckpoints) Get(_ context.Context, shard recordid.Shard) (checkpoint.State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets = append(c.gets, shard.ShardID)
	st, ok := c.states[shard.ShardID]
	if !ok || st.Shard.Group != shard.Group || st.Shard.Stream != shard.Stream {
		return checkpoint.State{}, fmt.Errorf("get %s: %w", shard, checkpoint.ErrNotFound)
	}
	return *st, nil
}
