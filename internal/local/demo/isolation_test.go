package demo

import (
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
)

// TestConsumerIsolatesKillers: crash and hang killers under the local mapping's own retry
// timing (a retry 100 ms after a failure) and the template's mapping settings
// (MaximumRetryAttempts 10, bisection on, batch 100, a 10 s function timeout) are isolated and
// parked by the consumer itself: the mapping gives up nothing, so no killer and no innocent
// record of its batch waits for the reconciler. Every other fault is off, so anything given up
// was given up because of the killers.
func TestConsumerIsolatesKillers(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	cfg := DefaultConfig()
	cfg.Variants = []string{VariantGapless}
	cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 300, 1, 2, 300
	cfg.Faults = Faults{Crash: 0.01, Hang: 0.01}
	cfg.RetryAttempts = config.DefaultMappingRetryAttempts
	cfg.Seed = 7
	// The demo's 6 s timeout leaves an invocation 4 s of work after its 2 s margin: on a loaded
	// machine with moto an isolating run then runs out of time, and records it could not start
	// fail the batch, which costs the mapping a retry as a killer would. 10 s (the template's
	// is 60 s) keeps the test about the killers.
	cfg.FunctionTimeout = 10 * time.Second
	cfg.Timeout = 10 * time.Minute

	// The workload must hold both kinds, or the test proves nothing about one of them.
	ch := cfg.chaosConfig("")
	var crash, hang int
	for _, p := range loadgen.Records(loadgen.Spec{Records: cfg.Records, Keys: cfg.Keys, Seed: cfg.Seed}) {
		switch ch.Killer(p.ID) {
		case chaos.CrashKiller:
			crash++
		case chaos.HangKiller:
			hang++
		}
	}
	if crash == 0 || hang == 0 {
		t.Fatalf("workload has %d crash and %d hang killers: pick a seed with both", crash, hang)
	}

	res := runDemo(t, cfg)
	g := res.Gapless
	if g.Killers.Crash != crash || g.Killers.Hang != hang {
		t.Fatalf("killers %+v, want %d crash and %d hang", g.Killers, crash, hang)
	}
	if g.Mapping.RecordsGivenUp != 0 || g.Mapping.RetriesExhausted != 0 {
		t.Errorf("the mapping gave up %d records (%d retries exhausted): the consumer did not isolate the killers in time",
			g.Mapping.RecordsGivenUp, g.Mapping.RetriesExhausted)
	}
	if g.Killers.ParkedByConsumer != crash+hang || g.Killers.ParkedByReconciler != 0 {
		t.Errorf("killers parked by the consumer %d, by the reconciler %d; want all %d by the consumer",
			g.Killers.ParkedByConsumer, g.Killers.ParkedByReconciler, crash+hang)
	}
	for _, k := range g.Killers.Records {
		if k.Fate != fateParked {
			t.Errorf("%s killer %s: fate %q, want parked by the consumer", k.Kind, k.ID, k.Fate)
		}
	}
	if g.Lost != 0 || g.Parked != crash+hang {
		t.Errorf("lost %d, parked %d; want 0 lost and only the %d killers parked", g.Lost, g.Parked, crash+hang)
	}
}
