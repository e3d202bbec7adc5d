package demo

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gapless-dev/gapless/internal/local/retention"
)

// startRetention sets up the --expire fault, on a timeline from the start of production
// (startExpireClock), with R the retention (Config.Retention) and A the mapping's
// MaximumRecordAge (capped at R/2 under --expire, Config.withDefaults):
//
//   - a retention proxy (internal/local/retention) in front of kinesis-local, for every reader of
//     the stream (the mappings and the reconciler), trims every record older than R until
//     R + 10 s, then its horizon stops: the records of the first 10 s are trimmed, each at its
//     arrival + R;
//   - one shard's invocations are throttled (esm.WithInvokeThrottle: Lambda cannot invoke, and
//     retries until the records are too old) until A + 3 s. A throttled batch is never invoked,
//     so it spends no retry and is never bisected: only its age ends it. Its records of the first
//     3 s exceed A while it is throttled, and the mapping gives them up to its on-failure
//     destination (RecordAgeExceeded) at arrival + A, before the stream trims them at
//     arrival + R. The mapping looks at a throttled batch once per poll interval (1 s) and works
//     through its backlog once the throttle ends, so it also gives up records a little younger
//     (any record it first looks at more than A after its arrival): the 10 s of trimming leave
//     that backlog 6 s, so that a record given up is one the stream trims. (With A at or past R,
//     as with the template's 6 h age and any short retention, the trim comes first: the mapping
//     discards the records silently and no destination sees them.)
//   - the reconciler is down (neither its schedule nor its failure queue invokes it) until
//     R + 10 s, after the last of those trims: it finds the given-up ranges only once the stream
//     no longer has them. The SQS destination's message (metadata only) can then only be
//     counted lost to retention; the S3 destination's object holds the records, and the
//     reconciler replays them from it.
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
	v.mu.Lock()
	v.trim, v.heldShard = p, held
	v.mu.Unlock()
	return nil
}

// startExpireClock starts the --expire timeline (see startRetention) as production starts, so
// that however long the functions took to start, the records of the first seconds are the ones
// given up and trimmed.
func (v *variant) startExpireClock(ctx context.Context) {
	cfg := v.e.cfg
	trimFor := cfg.Retention + trimWindow
	throttleFor := cfg.MaxRecordAge + throttleWindow
	now := time.Now()
	v.mu.Lock()
	p, held := v.trim, v.heldShard
	v.heldUntil, v.trimUntil = now.Add(throttleFor), now.Add(trimFor)
	v.mu.Unlock()
	p.SetRetention(cfg.Retention)
	release := time.AfterFunc(trimFor, func() { p.SetRetention(0) })
	go func() {
		<-ctx.Done()
		release.Stop()
	}()
	v.log.Info("expire: one shard's invocations throttled until its oldest records exceed the mapping's age; the reconciler down until the stream trimmed them",
		"shard_id", held, "retention", cfg.Retention.String(), "maximum_record_age", cfg.MaxRecordAge.String(),
		"throttled_for", throttleFor.String(), "trimming_for", trimFor.String(), "reconciler_down_for", trimFor.String())
}

// Under --expire the mapping gives up the held shard's records of the first throttleWindow
// of the run (and a little more), and the stream trims the records of the first trimWindow.
const (
	throttleWindow = 3 * time.Second
	trimWindow     = 10 * time.Second
)

// held reports whether shardID's invocations are held (the esm's invoke throttle).
func (v *variant) held(shardID string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return shardID == v.heldShard && time.Now().Before(v.heldUntil)
}

// trimming reports whether the stream's horizon still moves (--expire): until then the
// reconciler is down, and no variant ends (a record the mapping gave up is not trimmed yet).
func (v *variant) trimming() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return time.Now().Before(v.trimUntil)
}

// kinesisURL is the Kinesis endpoint of the functions: the retention proxy under --expire.
func (v *variant) kinesisURL() string {
	if v.trim != nil {
		return v.trim.URL()
	}
	return v.e.ep.Kinesis
}
