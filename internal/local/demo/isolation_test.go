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
	t.Parallel() // its demo runs when runDemo has a slot
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	cfg := DefaultConfig()
	cfg.Variants = []string{VariantGapless}
	cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 300, 1, 2, 300
	cfg.Faults = Faults{Crash: 0.004, Hang: 0.004}
	cfg.RetryAttempts = config.DefaultMappingRetryAttempts
	// The demo's 6 s timeout leaves an invocation 4 s of work after its 2 s margin: on a loaded
	// machine with moto an isolating run then runs out of time, and records it could not start
	// fail the batch, which costs the mapping a retry as a killer would. 10 s (the template's
	// is 60 s) keeps the test about the killers.
	cfg.FunctionTimeout = 10 * time.Second
	cfg.Timeout = 10 * time.Minute

	// A workload with one crash and one hang killer, in different lanes: each killer alone
	// costs its lane's batch MaxRecordAttempts of the mapping's retries (the deaths, or the
	// abandoned attempts, of the record alone), within MaximumRetryAttempts. Two killers in one
	// batch need twice that, which the default retries hold only without any other failure of
	// the batch (docs/demo.md, "Killers and time to safety").
	var crash, hang int
	for seed := uint64(1); seed < 2000; seed++ {
		cfg.Seed = seed
		ch := cfg.chaosConfig("")
		crash, hang = 0, 0
		lanes := map[int]int{}
		for _, p := range loadgen.Records(loadgen.Spec{Records: cfg.Records, Keys: cfg.Keys, Seed: cfg.Seed}) {
			switch ch.Killer(p.ID) {
			case chaos.CrashKiller:
				crash++
				lanes[laneOf(p.Key, cfg.Parallelization)]++
			case chaos.HangKiller:
				hang++
				lanes[laneOf(p.Key, cfg.Parallelization)]++
			}
		}
		if crash == 1 && hang == 1 && len(lanes) == 2 {
			break
		}
	}
	if crash != 1 || hang != 1 {
		t.Fatalf("no seed gives one crash and one hang killer in different lanes")
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
