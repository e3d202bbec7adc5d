package devcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/gapless-dev/gapless/internal/local/bench"
	"github.com/gapless-dev/gapless/internal/local/localstack"
)

func init() {
	register("bench", "benchmark bare, record-level idempotency and gapless handlers side by side (and the SQS bridge, per record against batched)", runBench)
}

// benchOptions are the parsed flags of `gapless bench`.
type benchOptions struct {
	cfg       bench.Config
	jsonOut   string
	mdOut     string
	svgOut    string
	svgPF     int
	child     string // --memory-child: run as the memory child
	quick     bool
	argsShown string // the command line, for the report
}

// parseBenchFlags parses bench's flags; -h prints the help on stdout.
func parseBenchFlags(args []string, stdout io.Writer) (benchOptions, error) {
	fs := flag.NewFlagSet("gapless-dev bench", flag.ContinueOnError)
	var o benchOptions
	quick := fs.Bool("quick", false, "a ~1-minute run: short budgets, the idempotency baseline capped at 1,000 records per round, smaller side measurements")
	handlers := fs.String("handlers", strings.Join(bench.Handlers, ","), "handlers to run (bare, idempotent, gapless; bare-sqs and gapless-sqs: the default Kinesis→SQS bridge, per-record SendMessage against gapless's batched sink)")
	sizes := fs.String("batch-sizes", "10,100,1000,10000", "batch sizes")
	pfs := fs.String("pf", "1,4", "ParallelizationFactors (concurrent batches on one shard)")
	budget := fs.Duration("budget", 0, "handler time per case before it stops starting rounds (default 2s, --quick 300ms)")
	minBatches := fs.Int("min-batches", 0, "batches per case at least (default 20, --quick 8), budget and --max-records permitting")
	maxRecords := fs.Int("max-records", 0, "records per case at most, but always one round (default 40000, --quick 10000)")
	maxTime := fs.Duration("max-time", 0, "handler time per case at most, but always one round (default 15s, --quick 3s)")
	idemMax := fs.Int("idempotent-max-round", -1, "skip idempotent cases whose round (PF × batch) exceeds this; 0 runs all (default 10000: the 40,000-record round of batch 10,000 × PF 4 takes over a minute on the local stack; --quick 1000)")
	memRecords := fs.Int("memory-records", 10000, "batch size of the memory measurement (0 skips it)")
	recRecords := fs.Int("reconcile-records", -1, "records for the reconciler measurement (default 10000, --quick 2000; 0 skips it)")
	reps := fs.Int("coldstart-reps", -1, "cold starts per bootstrap under aws-lambda-rie (default 3, --quick 1; 0 skips)")
	arm64 := fs.Bool("arm64-sizes", true, "also build the bootstraps for arm64 to report the deployed size (off with --quick)")
	consumerPkg := fs.String("consumer-package", "./functions/consumer", "the gapless consumer's main package (relative to the module root)")
	fs.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.mdOut, "markdown", "", "write the results as Markdown tables to this file")
	fs.StringVar(&o.svgOut, "svg", "", "write the headline chart as SVG to this file")
	fs.IntVar(&o.svgPF, "svg-pf", 1, "ParallelizationFactor the chart shows")
	fs.StringVar(&o.child, bench.ChildFlag, "", "internal: run as the memory child with these arguments (JSON)")
	setHelp(fs, "bench [flags]",
		"Benchmarks the bare handler, record-level idempotency and gapless side by side on a private\n"+
			"local stack (docs/benchmarks.md): throughput, DynamoDB round trips and capacity units per\n"+
			"record, memory, cold start and bootstrap size. --quick is a ~1-minute run.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return o, err
	}
	o.quick = *quick
	pick := func(set, normal, q int) int {
		switch {
		case set >= 0:
			return set
		case *quick:
			return q
		}
		return normal
	}
	var err error
	c := &o.cfg
	if c.Handlers, err = parseHandlers(*handlers); err != nil {
		return o, err
	}
	if c.BatchSizes, err = parseInts("batch-sizes", *sizes, 1, 10000); err != nil {
		return o, err
	}
	if c.PFs, err = parseInts("pf", *pfs, 1, 10); err != nil {
		return o, err
	}
	c.Limits = bench.Limits{Budget: 2 * time.Second, MinBatches: 20, MaxRecords: 40000, MaxTime: 15 * time.Second}
	if *quick {
		c.Limits = bench.Limits{Budget: 300 * time.Millisecond, MinBatches: 8, MaxRecords: 10000, MaxTime: 3 * time.Second}
	}
	if *budget > 0 {
		c.Limits.Budget = *budget
	}
	if *minBatches > 0 {
		c.Limits.MinBatches = *minBatches
	}
	if *maxRecords > 0 {
		c.Limits.MaxRecords = *maxRecords
	}
	if *maxTime > 0 {
		c.Limits.MaxTime = *maxTime
	}
	c.IdempotentMaxRound = pick(*idemMax, 10000, 1000)
	c.MemoryRecords = *memRecords
	c.ReconcileRecords = pick(*recRecords, 10000, 2000)
	c.ColdStartReps = pick(*reps, 3, 1)
	c.Arm64Sizes = *arm64 && !*quick
	c.ConsumerPackage = *consumerPkg
	if c.MemoryRecords < 0 || c.MemoryRecords > 10000 {
		return o, fmt.Errorf("--memory-records %d: want 0 to 10000", c.MemoryRecords)
	}
	o.argsShown = strings.TrimSpace("gapless-dev bench " + strings.Join(args, " "))
	return o, nil
}

func parseHandlers(s string) ([]string, error) {
	var out []string
	for _, h := range strings.Split(s, ",") {
		h = strings.TrimSpace(h)
		switch h {
		case bench.Bare, bench.Idempotent, bench.Gapless, bench.BareSQS, bench.GaplessSQS:
			out = append(out, h)
		default:
			return nil, fmt.Errorf("--handlers: unknown handler %q (want %s)", h, strings.Join(bench.Handlers, ", "))
		}
	}
	return out, nil
}

func parseInts(name, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("--%s: %q is not a whole number from %d to %d", name, f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchAWSConfig is the SDK configuration for the stack: endpoints from AWS_ENDPOINT_URL_*,
// and a connection pool wide enough for 16 keys × 10 lanes of requests to one host.
func benchAWSConfig(ctx context.Context) (aws.Config, error) {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = 512, 256
	})
	return config.LoadDefaultConfig(ctx, config.WithHTTPClient(hc))
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchFlags(args, stdout)
	if err != nil {
		return err
	}
	if o.child != "" {
		return benchChild(ctx, o.child, stdout)
	}
	root, err := localstack.FindRoot()
	if err != nil {
		return err
	}
	// Use the stack named by AWS_ENDPOINT_URL_*, or start a private one for what is missing.
	need := map[string]localstack.Service{
		"AWS_ENDPOINT_URL_DYNAMODB": localstack.DynamoDB, "AWS_ENDPOINT_URL_SQS": localstack.SQS, "AWS_ENDPOINT_URL_KINESIS": localstack.Kinesis,
	}
	var missing []localstack.Service
	for _, env := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"} {
		if os.Getenv(env) == "" {
			missing = append(missing, need[env])
		}
	}
	work, err := os.MkdirTemp("", "gapless-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	backend := "the stack at " + os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if len(missing) > 0 {
		fmt.Fprintf(stderr, "starting a private local stack for %v\n", missing)
		procs, err := localstack.Start(ctx, localstack.Options{StateDir: filepath.Join(work, "stack")}, missing...)
		if err != nil {
			return err
		}
		defer localstack.Stop(procs)
		for k, v := range localstack.Env(procs) {
			if os.Getenv(k) == "" || strings.HasPrefix(k, "AWS_ENDPOINT_URL_") {
				os.Setenv(k, v)
			}
		}
		if slices.Contains(missing, localstack.DynamoDB) {
			backend = "dynalite 4.0.0 (private, started by the bench)"
		}
	}
	cfg, err := benchAWSConfig(ctx)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o.cfg.Root, o.cfg.Exe, o.cfg.ChildArgs, o.cfg.WorkDir = root, exe, []string{"bench"}, work
	o.cfg.Backend, o.cfg.Progress = backend, stderr
	res, err := bench.Run(ctx, bench.Clients{Config: cfg}, o.cfg)
	if err != nil {
		return err
	}
	write := func(path string, f func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(out); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	err = errors.Join(
		write(o.jsonOut, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(res)
		}),
		write(o.mdOut, func(w io.Writer) error { return res.WriteMarkdown(w, o.argsShown) }),
		write(o.svgOut, func(w io.Writer) error { return res.WriteSVG(w, o.svgPF) }),
	)
	if err != nil {
		return err
	}
	return res.WriteMarkdown(stdout, o.argsShown)
}

// benchChild is the memory child: one handler, one large batch, result as JSON on stdout.
func benchChild(ctx context.Context, argJSON string, stdout io.Writer) error {
	var a bench.ChildArgs
	if err := json.Unmarshal([]byte(argJSON), &a); err != nil {
		return fmt.Errorf("--%s: %w", bench.ChildFlag, err)
	}
	cfg, err := benchAWSConfig(ctx)
	if err != nil {
		return err
	}
	res, err := bench.MeasureMemoryChild(ctx, bench.Clients{Config: cfg}, a)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
