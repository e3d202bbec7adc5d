package reconcile

import (
	"time"

	"github.com/gapless-dev/gapless/internal/metrics"
)

// MetricVerifiedLag is the age of the oldest record known not to be verified: per run with the
// dimension Group, and per shard with Group and ShardId (the dashboard's "verified lag per
// shard").
const MetricVerifiedLag = "VerifiedLagSeconds"

// ShardEmitter is an Emitter that can add a dimension to a line (*metrics.Emitter). When the
// Handler's Emitter is one, a scheduled pass also writes VerifiedLagSeconds per shard.
type ShardEmitter interface {
	EmitWith(extra []metrics.Dimension, ms ...metrics.Metric) error
}

var _ ShardEmitter = (*metrics.Emitter)(nil)

// shardLag is one shard's verified lag.
type shardLag struct {
	shardID string
	lag     time.Duration
}

// shardLags lists the verified lag of every shard of the run, so that a shard's lag is never
// silent: now minus the arrival of its oldest record known not to be verified, 0 when none is
// known. A deferred shard whose walk ran out of budget reports it from where the walk stopped
// (the arrival after the last record it verified, or the position it reached through empty
// pages); one the pass did not walk (its budget spent, its parents not verified, stuck) from
// ShardReport.UnverifiedSince.
func shardLags(rep Report, now time.Time) []shardLag {
	var out []shardLag
	for _, s := range rep.Shards {
		var lag time.Duration
		if from := s.lagFrom(); !from.IsZero() {
			lag = max(now.Sub(from), 0)
		}
		out = append(out, shardLag{s.ShardID, lag})
	}
	return out
}

// emitShardLags writes VerifiedLagSeconds with dimensions Group and ShardId per shard.
func (h *Handler) emitShardLags(rep Report) {
	se, ok := h.emit.(ShardEmitter)
	if !ok {
		return
	}
	for _, s := range shardLags(rep, h.r.now()) {
		if err := se.EmitWith([]metrics.Dimension{{Name: metrics.DimensionShard, Value: s.shardID}},
			metrics.Metric{Name: MetricVerifiedLag, Value: s.lag.Seconds(), Unit: metrics.Seconds}); err != nil {
			h.log.Warn("emitting metrics failed", "error", err)
			return
		}
	}
}
