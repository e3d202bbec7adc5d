package demo

import (
	"strings"
	"testing"
	"time"
)

// TestDemoForgedParked: forged parked messages sent to gapless's parked queue (a real parked
// record's id with other data and its correct digest, made-up ids, a payload object in a foreign
// bucket holding forged data) and redriven through the reconciler function's redrive command
// are all refused, counted and left in the queue; no forged payload reaches the target queue,
// and the report says so. Under both runtimes: the bootstraps under the emulator, and the same
// handlers in process.
func TestDemoForgedParked(t *testing.T) {
	t.Parallel() // its demo runs when runDemo has a slot
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	for _, runtime := range []string{RuntimeAuto, RuntimeInProcess} {
		t.Run(runtime, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Variants = []string{VariantGapless}
			cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 150, 1, 1, 150
			cfg.Faults = Faults{Poison: 0.02, ForgeParked: 5} // a few poison records park: real ids to forge
			cfg.Runtime = runtime
			cfg.Timeout = 3 * time.Minute
			res := runDemo(t, cfg)
			f := res.ForgedParked
			if f == nil {
				t.Fatal("result has no forged_parked")
			}
			if res.Parked == 0 || f.RealIDs == 0 {
				t.Fatalf("parked %d, forged with a real id %d: the workload parked nothing to forge", res.Parked, f.RealIDs)
			}
			if f.Skipped != "" || f.Error != "" {
				t.Fatalf("forged_parked skipped %q, error %q", f.Skipped, f.Error)
			}
			if f.Sent != 5 || f.Applied != 0 || f.Refused != f.Sent || f.StillQueued != f.Sent || f.CountedByFunction < f.Sent {
				t.Errorf("forged_parked %+v: want 5 sent, every one refused, counted and still queued, none applied", *f)
			}
			if !res.OK() || res.Lost != 0 {
				t.Errorf("OK %v, lost %d", res.OK(), res.Lost)
			}
			for name, text := range map[string]string{"report.md": Markdown(res), "table": Table(res)} {
				if !strings.Contains(text, "none applied, every one refused") {
					t.Errorf("%s does not say the forged parked messages were refused:\n%s", name, text)
				}
			}
		})
	}
}
