package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// testWriter sends the progress display to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\r\n"))
	return len(p), nil
}

// runDemo runs the demo with cfg on the test's stack, reports into a temporary directory (or
// under $GAPLESS_TEST_KEEP_REPORTS, which outlives the test, to read a failed run's report),
// and logs the side-by-side table.
// demoSlots bounds the whole demos running at once in this test binary: each is a real-time
// run (MaximumRecordAge, retention, settle windows) of several processes, and more of them at a
// time on two cores make a loaded machine, not the behaviour under test, decide what they see.
var demoSlots = make(chan struct{}, 2)

func runDemo(t *testing.T, cfg Config) *Result {
	t.Helper()
	demoSlots <- struct{}{}
	defer func() { <-demoSlots }()
	cfg.ReportsDir = t.TempDir()
	if keep := os.Getenv("GAPLESS_TEST_KEEP_REPORTS"); keep != "" {
		// Absolute: the runtime emulator starts the bootstraps the run builds under it from
		// another directory.
		abs, err := filepath.Abs(filepath.Join(keep, t.Name()))
		if err != nil {
			t.Fatalf("GAPLESS_TEST_KEEP_REPORTS=%q: %v", keep, err)
		}
		cfg.ReportsDir = abs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*cfg.Timeout+time.Minute) // each variant has its own budget
	defer cancel()
	res, err := Run(ctx, cfg, Options{AWS: stacktest.Config(t), Endpoints: stackEndpoints(), Progress: testWriter{t}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("\n%s", Table(res))
	return res
}

// logLines logs the lines of file holding substr: the evidence of a failure, in the test output.
func logLines(t *testing.T, file, substr string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Logf("reading %s: %v", file, err)
		return
	}
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, substr) {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// TestDemoEndToEnd runs a small demo with every fault on, every variant, against the local
// stack: gapless must lose nothing, park every poison record and crash killer with its exact
// payload and verify every shard; the mapping alone must lose at least every poison record.
func TestDemoEndToEnd(t *testing.T) {
	t.Parallel() // its demo runs when runDemo has a slot
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	cfg := DefaultConfig()
	cfg.Records, cfg.Shards, cfg.Parallelization = 600, 2, 2
	cfg.Rate = 400
	cfg.Faults.Poison = 0.01 // a handful of poison records out of 600
	// Crash killers (the runtime exits on every attempt) are parked like poison. Hang killers
	// cost a function timeout per attempt: TestHungProcessAbandoned (internal/pipeline) and the
	// default demo cover them. A crash attempt fails at once, so the template's 10 mapping
	// retries keep the comparison variants short.
	cfg.Faults.Crash, cfg.Faults.Hang = 0.004, 0
	if ep := stackEndpoints(); ep.DynamoDB == ep.SQS {
		// moto_server serves both; its SQS scans the whole queue on every receive, so a queue
		// that backs up slows everything down: a smaller, slower workload.
		cfg.Records, cfg.Rate, cfg.Faults.Poison = 250, 50, 0.02
	}
	// A killer replayed by the reconciler costs a dead invocation per attempt (each waits out
	// its in-flight marker's lease), so gapless needs minutes to park one; the run ends as soon
	// as every shard is verified. The bound covers all three variants: on moto the mapping
	// alone has taken 6.5 of them on a loaded machine, leaving gapless seconds.
	cfg.Timeout = 7 * time.Minute
	if ep := stackEndpoints(); ep.DynamoDB == ep.SQS {
		cfg.Timeout = 12 * time.Minute
	}
	res := runDemo(t, cfg)
	g, b := res.Gapless, res.Baseline
	checkWords(t, res)

	var poison []string
	for _, p := range loadgen.Records(loadgen.Spec{Records: cfg.Records, Keys: cfg.Keys, PoisonRate: cfg.Faults.Poison, Seed: cfg.Seed}) {
		if p.Poison {
			poison = append(poison, p.ID)
		}
	}
	if len(poison) == 0 {
		t.Fatal("the workload has no poison record: the test would prove nothing about parking")
	}

	// gapless: nothing lost, everything verified, poison parked with its payload.
	if res.Lost != 0 || g.Lost != 0 {
		t.Errorf("gapless lost %d records: %v", g.Lost, g.LostIDs)
	}
	if !res.Verified || g.TimedOut {
		t.Errorf("the reconciler did not verify every shard (timed out: %v)", g.TimedOut)
	}
	if g.Produced != cfg.Records || g.DeliveredUnique+g.Parked+g.Lost != g.Produced {
		t.Errorf("produced %d, delivered %d + parked %d + lost %d", g.Produced, g.DeliveredUnique, g.Parked, g.Lost)
	}
	if g.ParkedBadPayload != 0 {
		t.Errorf("%d parked messages do not carry their record's payload", g.ParkedBadPayload)
		logLines(t, filepath.Join(res.ReportDir, VariantGapless, "functions.log"), "does not carry its record's payload")
	}
	for _, id := range poison {
		if !slices.Contains(g.ParkedIDs, id) {
			t.Errorf("poison record %s is not in the parked queue with its payload (parked: %v)", id, g.ParkedIDs)
		}
	}
	// Killer records (crash, hang on every attempt): each parked with its payload, none lost.
	if g.Killers.Produced() == 0 {
		t.Log("the workload has no killer record on this backend's sizing")
	}
	for _, k := range g.Killers.Records {
		if k.Fate != "parked" || !slices.Contains(g.ParkedIDs, k.ID) {
			t.Errorf("%s killer %s: fate %q, want parked with its payload", k.Kind, k.ID, k.Fate)
		}
	}
	if !res.OK() {
		t.Error("Result.OK() is false")
	}
	if g.Mapping.SplitShard == "" || g.Mapping.Mappings != 2 {
		t.Errorf("faults not all applied: split %q, mappings %d", g.Mapping.SplitShard, g.Mapping.Mappings)
	}
	if g.Faults.DynamoDB.Requests == 0 || g.Faults.SQS.Requests == 0 || res.DDBRequestsPerBatch <= 0 || res.DDBWCUPerRecord <= 0 {
		t.Errorf("the functions did not go through the proxies: %+v %+v, %v requests/batch, %v WCU/record",
			g.Faults.DynamoDB, g.Faults.SQS, res.DDBRequestsPerBatch, res.DDBWCUPerRecord)
	}
	// The functions ran the default bridge batched under the faults (chaos wraps its batch form
	// too): the target queue got SendMessageBatch requests.
	if g.Faults.SQS.Operations["SendMessageBatch"] == 0 {
		t.Errorf("no SendMessageBatch request from the gapless functions: %v", g.Faults.SQS.Operations)
	}
	t.Logf("gapless SQS requests by operation: %v", g.Faults.SQS.Operations)

	// The mapping alone on the same workload: every poison record is lost.
	if b == nil || res.LostESMOnly == nil {
		t.Fatal("no mapping-alone result")
	}
	if *res.LostESMOnly < len(poison) {
		t.Errorf("mapping alone lost %d, want at least the %d poison records", *res.LostESMOnly, len(poison))
	}
	for _, id := range poison {
		if !slices.Contains(b.LostIDs, id) && len(b.LostIDs) < 50 {
			t.Errorf("poison record %s was not lost by the mapping alone", id)
		}
	}

	// The report's consumer on the same workload: counted like the others, with its decisions.
	c := res.CheckpointDecides
	if c == nil || res.LostCheckpointDecides == nil || c.Handler == nil {
		t.Fatal("no checkpoint-decides result")
	}
	if c.DeliveredUnique+c.Lost != c.Produced || c.Parked != 0 || *res.LostCheckpointDecides != c.Lost {
		t.Errorf("checkpoint decides: produced %d, delivered %d, parked %d, lost %d", c.Produced, c.DeliveredUnique, c.Parked, c.Lost)
	}
	t.Logf("checkpoint decides lost %d (filtered %d, replaces lost %d, failed records abandoned %d)",
		c.Lost, c.Handler.Filtered, c.Handler.RacesLost, c.Handler.Abandoned)
	for _, v := range res.ran() {
		sum := 0
		for _, n := range v.DuplicatesByCause {
			sum += n
		}
		if sum != v.Duplicates {
			t.Errorf("%s: duplicates by cause sum to %d, duplicates %d: %v", v.Name, sum, v.Duplicates, v.DuplicatesByCause)
		}
	}

	// The report: what a reader needs, not the bulk.
	for _, f := range []string{"report.md", "result.json", "outcome.svg", "gapless/chart.svg", "mapping-alone/chart.svg",
		"checkpoint-decides/chart.svg", "gapless/timeline.json"} {
		if _, err := os.Stat(filepath.Join(res.ReportDir, f)); err != nil {
			t.Errorf("report file %s: %v", f, err)
		}
	}
	for _, f := range []string{"sdk.log", "bin", "gapless/chaos-state"} {
		if _, err := os.Stat(filepath.Join(res.ReportDir, f)); err == nil {
			t.Errorf("report keeps %s without --full-report", f)
		}
	}
	top := resultJSON(t, res.ReportDir)
	for _, k := range []string{"produced", "delivered_unique", "duplicates", "parked", "lost", "lost_esm_only", "lost_checkpoint_decides",
		"checkpoint_decides", "gaps_detected", "gaps_replayed", "ddb_requests_per_batch", "ddb_wcu_per_record", "seconds"} {
		if _, ok := top[k]; !ok {
			t.Errorf("result.json lacks %q", k)
		}
	}
}

// TestRunStopsOnCancel: cancelling the context (Ctrl-C) ends a run promptly with an error, and
// leaves no process of the run behind.
func TestRunStopsOnCancel(t *testing.T) {
	// Not parallel: it counts this process's children, which other demos would add to.
	if testing.Short() {
		t.Skip("skipped with -short")
	}
	before := len(descendants(os.Getpid()))
	cfg := DefaultConfig()
	cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 2000, 1, 1, 100 // 20s of production
	cfg.Baseline = false
	cfg.Runtime = RuntimeInProcess
	cfg.ReportsDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(4*time.Second, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, cfg, Options{AWS: stacktest.Config(t), Endpoints: stackEndpoints()})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not return within 90s of cancellation")
	}
	if after := len(descendants(os.Getpid())); after > before {
		t.Fatalf("%d processes left behind (before %d)", after-before, before)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"rate above 1", func(c *Config) { c.Faults.Transient = 1.5 }, "transient 1.5"},
		{"no records", func(c *Config) { c.Records = 0 }, "records 0"},
		{"parallelization", func(c *Config) { c.Parallelization = 11 }, "parallelization 11"},
		{"fractional timeout", func(c *Config) { c.FunctionTimeout = 1500 * time.Millisecond }, "whole seconds"},
		{"infinite retries block the baseline", func(c *Config) { c.RetryAttempts, c.MaxRecordAge = -1, 0 }, "block the mapping-alone run"},
		{"infinite retries with killers only", func(c *Config) {
			c.RetryAttempts, c.MaxRecordAge, c.Faults.Poison = -1, 0, 0
		}, "a poison or killer record"},
		{"killer rates", func(c *Config) { c.Faults.Crash, c.Faults.Hang = 0.6, 0.5 }, "crash+hang exceeds 1"},
		{"runtime", func(c *Config) { c.Runtime = "docker" }, `runtime "docker"`},
		{"in-function rates", func(c *Config) { c.Faults.Transient, c.Faults.Slow = 0.7, 0.5 }, "exceeds 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.withDefaults().Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want ErrConfig containing %q", err, tt.want)
			}
		})
	}
	// The mapping runs with template.yaml's defaults (deploy/template_test.go ties them to config).
	if d := DefaultConfig(); d.RetryAttempts != config.DefaultMappingRetryAttempts || d.MaxRecordAge != config.DefaultMappingMaxRecordAge {
		t.Fatalf("demo mapping defaults: retries %d, record age %s; template's: %d, %s",
			d.RetryAttempts, d.MaxRecordAge, config.DefaultMappingRetryAttempts, config.DefaultMappingMaxRecordAge)
	}
	soak := DefaultConfig()
	soak.Records, soak.Rate, soak.Duration = 0, 0, 10*time.Minute
	soak = soak.withDefaults()
	if soak.Rate != DefaultSoakRate || soak.Records != 600*DefaultSoakRate || soak.Timeout != 20*time.Minute {
		t.Fatalf("soak defaults: rate %d, records %d, timeout %s", soak.Rate, soak.Records, soak.Timeout)
	}
}

// TestDemoExpire: one shard's invocations are throttled until the mapping gives its oldest
// records up for their age, to the SQS destination (metadata only), and the stream trims them
// (internal/local/retention) before the reconciler runs: the mapping alone loses them without a
// signal; gapless loses the same records but counts them, exactly and by id, and raises its
// alarm (a LostToRetention span); nothing else is lost.
func TestDemoExpire(t *testing.T) {
	t.Parallel() // its demo runs when runDemo has a slot
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	cfg := DefaultConfig()
	cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 200, 3, 2, 25 // production takes 8 s
	cfg.Faults = Faults{Expire: true}
	cfg.Retention = 15 * time.Second // the held shard's records of the first 5 s expire
	cfg.Timeout = 4 * time.Minute
	res := runDemo(t, cfg)
	checkWords(t, res)
	for _, v := range []*VariantResult{res.Baseline, res.Gapless} {
		if v == nil {
			t.Fatal("a variant did not run")
		}
		if v.LostToRetention == 0 || len(v.LostToRetentionIDs) != v.LostToRetention || v.HeldShard == "" {
			t.Errorf("%s: lost to retention %d (%d ids) on %q; want the held shard's oldest records lost to retention",
				v.Name, v.LostToRetention, len(v.LostToRetentionIDs), v.HeldShard)
		}
		if v.DeliveredUnique+v.Parked+v.LostToRetention+v.Lost != v.Produced {
			t.Errorf("%s: delivered %d + parked %d + lost to retention %d + lost %d != produced %d", v.Name, v.DeliveredUnique, v.Parked, v.LostToRetention, v.Lost, v.Produced)
		}
	}
	// gapless loses nothing beyond what the stream trimmed unseen. The mapping alone loses
	// exactly what it gave up: to retention, and, on a loaded machine where batches of the
	// other shards also outlive MaximumRecordAge, for good (it has nothing to replay them).
	if g := res.Gapless; g.Lost != 0 {
		t.Errorf("gapless lost %d records beyond those lost to retention: %v", g.Lost, g.LostIDs)
	}
	if b := res.Baseline; b.Lost+b.LostToRetention > b.Mapping.RecordsGivenUp {
		t.Errorf("the mapping alone lost %d + %d to retention, more than the %d records it gave up", b.Lost, b.LostToRetention, b.Mapping.RecordsGivenUp)
	}
	if res.Gapless.Reconciler.LostToRetention < 1 {
		t.Errorf("gapless counted %d lost spans: its alarm stayed silent", res.Gapless.Reconciler.LostToRetention)
	}
	if !res.OK() || res.LostToRetention != res.Gapless.LostToRetention {
		t.Errorf("OK %v, lost_to_retention %d", res.OK(), res.LostToRetention)
	}
}

// TestDemoExpireReplaysFromS3Object: under --expire with an S3 on-failure destination and no
// destination fault, the held shard's oldest records are given up by the mapping
// (MaximumRecordAge) and written to the bucket with their data, the stream trims them, and only
// then does the reconciler (down until the trim) read the objects: it replays the records from
// them, so nothing is lost, to retention or otherwise.
func TestDemoExpireReplaysFromS3Object(t *testing.T) {
	t.Parallel() // its demo runs when runDemo has a slot
	if testing.Short() {
		t.Skip("end-to-end demo: skipped with -short")
	}
	cfg := DefaultConfig()
	cfg.Records, cfg.Shards, cfg.Parallelization, cfg.Rate = 120, 3, 2, 30 // production takes 4 s
	cfg.Faults = Faults{Expire: true}
	cfg.OnFailure = OnFailureS3
	cfg.Retention = 10 * time.Second
	cfg.Variants, cfg.Runtime = []string{VariantGapless}, RuntimeInProcess
	cfg.Timeout = 3 * time.Minute
	res := runDemo(t, cfg)
	g := res.Gapless
	if g == nil {
		t.Fatal("gapless did not run")
	}
	if g.Mapping.RecordAgeExceeded == 0 || g.Mapping.DestinationDeliveryFailures != 0 {
		t.Errorf("the mapping gave up %d batches for their age (%d not delivered to the bucket); want the held shard's oldest given up to the bucket",
			g.Mapping.RecordAgeExceeded, g.Mapping.DestinationDeliveryFailures)
	}
	if g.Lost != 0 || g.LostToRetention != 0 || g.Pending != 0 {
		t.Errorf("lost %d, lost to retention %d %v, pending %d: want every record delivered", g.Lost, g.LostToRetention, g.LostToRetentionIDs, g.Pending)
	}
	// The records the mapping gave up (the held shard's oldest) were trimmed before the
	// reconciler ran, and reached the target queue only afterwards, from the reconciler.
	if g.ReplayedAfterTrim == 0 || g.ReplayedAfterTrim > g.Mapping.RecordsGivenUp || res.ReplayedAfterTrim != g.ReplayedAfterTrim {
		t.Errorf("replayed after the trim: %d (result %d); given up by the mapping: %d; want at least 1, at most those given up",
			g.ReplayedAfterTrim, res.ReplayedAfterTrim, g.Mapping.RecordsGivenUp)
	}
	if l := expireLine(res); !strings.Contains(l, fmt.Sprintf("replayed %d of them", g.ReplayedAfterTrim)) {
		t.Errorf("the report's retention line does not give the figure: %q", l)
	}
	if !res.OK() {
		t.Errorf("run not OK (verified %v)", g.Verified)
	}
}
