package demo

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gapless-dev/gapless/internal/local/retention"
)

// startRetention sets up the --expire fault: a retention proxy (internal/local/retention) in front of
// kinesis-local for every reader of the stream (the mapping and the reconciler), with the
// configured retention, and one shard whose invocations are held (esm.WithInvokeThrottle:
// Lambda cannot invoke, and retries until the records expire) for the retention plus 5
// seconds. Records of that shard produced in those first 5 seconds expire before any
// invocation: the mapping alone drops them silently; gapless counts them. When the hold ends
// the horizon stops moving, so nothing produced later can expire while the run drains.
func (v *variant) startRetention(ctx context.Context) error {
	shards, err := v.listShards(ctx)
	if err != nil {
		return fmt.Errorf("demo: list shards of %s: %w", v.stream, err)
	}
	ids := make([]string, 0, len(shards))
	for _, s := range shards {
		ids = append(ids, s.id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return fmt.Errorf("demo: stream %s has no shard", v.stream)
	}
	// Not the shard the split takes (the lowest id) nor the one the racing mapping reads (the
	// highest), when there are enough shards to leave both alone.
	held := ids[0]
	if len(ids) >= 3 {
		held = ids[1]
	}
	p, err := retention.Start(v.e.ep.Kinesis)
	if err != nil {
		return err
	}
	p.SetRetention(v.e.cfg.Retention)
	hold := v.e.cfg.Retention + 5*time.Second
	v.mu.Lock()
	v.trim, v.heldShard, v.heldUntil = p, held, time.Now().Add(hold)
	v.mu.Unlock()
	release := time.AfterFunc(hold, func() { p.SetRetention(0) })
	go func() {
		<-ctx.Done()
		release.Stop()
	}()
	v.log.Info("expire: one shard's consumer held past the stream's retention", "shard_id", held,
		"retention", v.e.cfg.Retention.String(), "hold", hold.String())
	return nil
}

// held reports whether shardID's invocations are held (the esm's invoke throttle).
func (v *variant) held(shardID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return shardID == v.heldShard && time.Now().Before(v.heldUntil)
}

// kinesisURL is the Kinesis endpoint of the functions: the retention proxy under --expire.
func (v *variant) kinesisURL() string {
	if v.trim != nil {
		return v.trim.URL()
	}
	return v.e.ep.Kinesis
}
