package devcli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/demo"
)

func TestDemoHelpDocumentsEveryFlag(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("demo --help exited %d: %s", code, errb.String())
	}
	help := out.String() // help goes to stdout, like every subcommand's
	fs, _, _ := demoFlags(&bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "--"+f.Name+" ") && !strings.Contains(help, "--"+f.Name+"\n") {
			t.Errorf("--help does not document --%s", f.Name)
		}
	})
	for _, s := range []string{"reports/demo-<timestamp>", "Ctrl-C", "(default 4500)"} {
		if !strings.Contains(help, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, cfg demo.Config, cli *demoCLI)
	}{
		{"defaults are make demo's", nil, func(t *testing.T, cfg demo.Config, _ *demoCLI) {
			if cfg.Records != 4500 || cfg.Shards != 4 || cfg.Parallelization != 4 || !cfg.Baseline || cfg.Faults != demo.DefaultFaults() {
				t.Fatalf("defaults: %+v", cfg)
			}
		}},
		{"workload and faults", []string{"--records", "600", "--shards", "2", "--parallelization", "2", "--seed", "9",
			"--transient", "0.1", "--race=false", "--ddb-drop", "0", "--json"}, func(t *testing.T, cfg demo.Config, cli *demoCLI) {
			if cfg.Records != 600 || cfg.Shards != 2 || cfg.Parallelization != 2 || cfg.Seed != 9 || cfg.Faults.Transient != 0.1 ||
				cfg.Faults.Race || cfg.Faults.DDBDrop != 0 || !cli.json {
				t.Fatalf("parsed %+v %+v", cfg, cli)
			}
		}},
		{"variants", []string{"--variants", "gapless,checkpoint-decides"}, func(t *testing.T, cfg demo.Config, cli *demoCLI) {
			if cli.variants != "gapless,checkpoint-decides" {
				t.Fatalf("variants %q", cli.variants)
			}
		}},
		{"retry settings", []string{"--retry-attempts", "-1", "--max-record-age", "2m", "--function-timeout", "10s", "--bisect=false"},
			func(t *testing.T, cfg demo.Config, _ *demoCLI) {
				if cfg.RetryAttempts != -1 || cfg.MaxRecordAge != 2*time.Minute || cfg.FunctionTimeout != 10*time.Second || cfg.Bisect {
					t.Fatalf("parsed %+v", cfg)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, cfg, cli := demoFlags(&bytes.Buffer{})
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			tt.check(t, *cfg, cli)
		})
	}
}

func TestDemoRejectsBadSettingsBeforeStartingAnything(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--transient", "2"}, "transient 2"},
		{[]string{"--parallelization", "11"}, "parallelization 11"},
		{[]string{"--runtime", "docker"}, `runtime "docker"`},
		{[]string{"--records", "x"}, `invalid value "x" for flag --records`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--variants", "gapless,bare"}, `unknown variant "bare"`},
		{[]string{"--variants", ""}, `variants: none given`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(context.Background(), append([]string{"demo"}, tt.args...), &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want failure mentioning %q", code, errb.String(), tt.want)
			}
			if strings.Contains(errb.String(), "starting the local stack") {
				t.Fatalf("started a stack for a bad setting (%s)", time.Since(start))
			}
		})
	}
}

// TestDemoJSON runs a small demo through the CLI against the test stack: one JSON object on
// stdout with the documented keys, exit status 0 when gapless lost nothing.
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipped with -short")
	}
	var out, errb bytes.Buffer
	// --timeout bounds the run; the demo ends as soon as every shard is verified. The bound
	// also covers `go list -deps` and building both bootstraps and the runtime emulator: on
	// moto under load (-race, a busy 2-core machine) the run alone took 151-164 s, so 3m
	// left seconds. A run cut by the bound reports what had not arrived as lost: 10m (the
	// demo's default) keeps it a bound, not the thing measured.
	args := []string{"demo", "--reuse-stack", "--json", "--records", "150", "--rate", "100", "--shards", "1", "--parallelization", "2",
		"--baseline=false", "--poison", "0.02", "--reports", t.TempDir(), "--timeout", "10m"}
	code := run(context.Background(), args, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	var obj map[string]any
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out.String())
	}
	if dec.More() {
		t.Fatal("more than one JSON value on stdout")
	}
	for _, k := range []string{"produced", "delivered_unique", "duplicates", "parked", "lost", "lost_esm_only", "lost_checkpoint_decides",
		"gaps_detected", "gaps_replayed", "ddb_requests_per_batch", "ddb_wcu_per_record", "seconds"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if obj["produced"] != float64(150) || obj["lost"] != float64(0) || obj["lost_esm_only"] != nil {
		t.Errorf("produced %v, lost %v, lost_esm_only %v", obj["produced"], obj["lost"], obj["lost_esm_only"])
	}
	// The default faults forge parked messages: every one refused, none applied.
	if fp, _ := obj["forged_parked"].(map[string]any); fp == nil || fp["sent"] != float64(5) || fp["refused"] != float64(5) || fp["applied"] != float64(0) {
		t.Errorf("forged_parked %v: want 5 sent, 5 refused, 0 applied", obj["forged_parked"])
	}
	if p, _ := obj["parked"].(float64); p < 1 {
		t.Errorf("parked %v: the poison records were not parked", obj["parked"])
	}
}
