package devcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/gapless-dev/gapless/internal/local/demo"
)

func init() {
	register("demo", "the field report's load test with faults: the mapping alone, checkpoint decides and gapless, side by side", runDemo)
}

// demoFlags binds every flag of `gapless demo` to a demo.Config.
func demoFlags(stderr io.Writer) (*flag.FlagSet, *demo.Config, *demoCLI) {
	cfg := demo.DefaultConfig()
	cli := &demoCLI{}
	fs := flag.NewFlagSet("gapless-dev demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: gapless-dev demo [flags]

Runs the load test of the field report gapless grew from (a clustered consumer lost ~40 of
4,500 records to a shared compare-and-set checkpoint) on the local stack (started on 127.0.0.1
and stopped again, emulators installed when missing): the same seeded workload through the
event-source mapping alone, through that report's consumer (checkpoint decides), then through
gapless, with every fault on. Prints them side by side on stdout (progress on stderr) and
writes a report (markdown, SVG charts, JSON) to reports/demo-<timestamp>/. Takes minutes.
Exits 1 when gapless loses a record or cannot prove it lost none. Ctrl-C stops everything it
started. docs/demo.md explains every figure.

workload:
`)
		printFlags(fs, "records", "shards", "parallelization", "seed", "keys", "rate", "duration")
		fmt.Fprint(fs.Output(), "\nevent-source mapping (every variant):\n")
		printFlags(fs, "batch-size", "batching-window", "function-timeout", "retry-attempts", "max-record-age", "bisect", "filter", "on-failure")
		fmt.Fprint(fs.Output(), "\ngapless:\n")
		printFlags(fs, "max-record-attempts", "settle", "reconcile-every")
		fmt.Fprint(fs.Output(), "\nfaults (probabilities per record attempt or per request; poison, crash and hang: per record):\n")
		printFlags(fs, "transient", "panic", "slow", "slow-for", "poison", "crash", "hang", "hang-for", "ddb-throttle", "ddb-error", "ddb-drop",
			"sqs-throttle", "sqs-error", "sqs-drop", "dest-fail", "split", "kill-reconciler", "race", "forge-parked", "expire", "retention", "no-faults")
		fmt.Fprint(fs.Output(), "\nrun:\n")
		printFlags(fs, "json", "variants", "baseline", "runtime", "timeout", "reports", "full-report", "backend", "reuse-stack")
	}
	fs.IntVar(&cfg.Records, "records", cfg.Records, "records to produce (with --duration: 0 means rate × duration)")
	fs.IntVar(&cfg.Shards, "shards", cfg.Shards, "initial shards of the stream")
	fs.IntVar(&cfg.Parallelization, "parallelization", cfg.Parallelization, "ParallelizationFactor (concurrent batches per shard)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload, the in-function faults and the proxies: same seed, same run")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "distinct partition keys")
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "records produced per second (0: as fast as possible)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "soak: spread production over this long (e.g. 10m) at --rate (default 20/s); skips the mapping-alone run unless --baseline is given")
	fs.IntVar(&cfg.BatchSize, "batch-size", cfg.BatchSize, "BatchSize")
	fs.DurationVar(&cfg.BatchingWindow, "batching-window", cfg.BatchingWindow, "MaximumBatchingWindowInSeconds")
	fs.DurationVar(&cfg.FunctionTimeout, "function-timeout", cfg.FunctionTimeout, "consumer function timeout (whole seconds)")
	fs.IntVar(&cfg.RetryAttempts, "retry-attempts", cfg.RetryAttempts, "MaximumRetryAttempts (-1: until the record expires); the default is template.yaml's")
	fs.DurationVar(&cfg.MaxRecordAge, "max-record-age", cfg.MaxRecordAge, "MaximumRecordAgeInSeconds (0: off); the default is template.yaml's")
	fs.BoolVar(&cfg.Bisect, "bisect", cfg.Bisect, "BisectBatchOnFunctionError")
	fs.StringVar(&cfg.OnFailure, "on-failure", demo.OnFailureSQS, "the mapping's on-failure destination: sqs (metadata to the failure queue) or s3 (records and metadata as an object, its notification to the failure queue; template.yaml's default)")
	fs.StringVar(&cfg.Filter, "filter", "", `record filter (template.yaml's RecordFilter): a FilterCriteria pattern on the data, e.g. '{"data": {"n": [{"numeric": [">", 1000]}]}}', put on the mapping and given to the gapless functions`)
	fs.IntVar(&cfg.MaxRecordAttempts, "max-record-attempts", cfg.MaxRecordAttempts, "MAX_RECORD_ATTEMPTS: failures before gapless parks a record")
	fs.DurationVar(&cfg.SettleAfter, "settle", cfg.SettleAfter, "SETTLE_AFTER: the reconciler leaves younger records alone")
	fs.DurationVar(&cfg.ReconcileEvery, "reconcile-every", cfg.ReconcileEvery, "the reconciler's schedule")
	f := &cfg.Faults
	fs.Float64Var(&f.Transient, "transient", f.Transient, "transient error in the function")
	fs.Float64Var(&f.Panic, "panic", f.Panic, "panic in the function")
	fs.Float64Var(&f.Slow, "slow", f.Slow, "call slower than the function timeout (the invocation times out)")
	fs.DurationVar(&f.SlowFor, "slow-for", 0, "how long a slow call takes (0: twice the function timeout)")
	fs.Float64Var(&f.Poison, "poison", f.Poison, "fraction of records that are poison (always fail)")
	fs.Float64Var(&f.Crash, "crash", f.Crash, "fraction of records that kill the runtime process on every attempt (killers)")
	fs.Float64Var(&f.Hang, "hang", f.Hang, "fraction of records that hang, ignoring the context, past the function timeout on every attempt")
	fs.DurationVar(&f.HangFor, "hang-for", 0, "how long a hang lasts (0: twice the function timeout)")
	fs.Float64Var(&f.DDBThrottle, "ddb-throttle", f.DDBThrottle, "DynamoDB request throttled")
	fs.Float64Var(&f.DDBError, "ddb-error", f.DDBError, "DynamoDB request answered 500")
	fs.Float64Var(&f.DDBDrop, "ddb-drop", f.DDBDrop, "DynamoDB write done, response dropped")
	fs.Float64Var(&f.SQSThrottle, "sqs-throttle", f.SQSThrottle, "SQS request throttled")
	fs.Float64Var(&f.SQSError, "sqs-error", f.SQSError, "SQS request answered 500")
	fs.Float64Var(&f.SQSDrop, "sqs-drop", f.SQSDrop, "SQS send done, response dropped")
	fs.Float64Var(&f.DestFail, "dest-fail", f.DestFail, "the mapping's on-failure message is not delivered (DestinationDeliveryFailures)")
	fs.BoolVar(&f.Split, "split", f.Split, "split a shard when half the records are produced")
	fs.BoolVar(&f.KillReconciler, "kill-reconciler", f.KillReconciler, "kill the reconciler in the middle of its first replay")
	fs.BoolVar(&f.Race, "race", f.Race, "a second mapping (same function config and group) racing on the stream")
	fs.IntVar(&f.ForgeParked, "forge-parked", f.ForgeParked, "forged parked messages (real and made-up record ids, a foreign payload object) sent to gapless's parked queue at the end of its run, then redriven: each must be refused")
	fs.BoolVar(&f.Expire, "expire", false, "a short stream retention (--retention): one shard's oldest records are given up by the mapping (MaximumRecordAge capped at half the retention) and trimmed before the reconciler runs")
	fs.DurationVar(&cfg.Retention, "retention", 0, "the stream's retention period under --expire (0: 30s; at least 10s)")
	fs.BoolVar(&cli.noFaults, "no-faults", false, "turn every fault off but --expire (overrides the other fault flags)")
	fs.BoolVar(&cli.json, "json", false, "print one JSON object on stdout instead of the table")
	fs.BoolVar(&cfg.Baseline, "baseline", cfg.Baseline, "with --variants unset: run the comparison variants (mapping alone, checkpoint decides) before gapless")
	fs.StringVar(&cli.variants, "variants", "", "comma-separated variants to run (mapping-alone, checkpoint-decides, gapless) or all; they run in that order whatever the order given (default all; a soak: gapless)")
	fs.BoolVar(&cfg.FullReport, "full-report", false, "keep everything in the report directory (SDK and emulator logs, bootstraps, every process's memory row)")
	fs.StringVar(&cfg.Runtime, "runtime", cfg.Runtime, "gapless functions: auto, rie (bootstraps under the Lambda runtime interface emulator) or inprocess")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "bound on each variant's run, every variant its own (0: 10m plus --duration)")
	fs.StringVar(&cfg.ReportsDir, "reports", "", "directory for demo-<timestamp>/ (default <repo>/reports)")
	fs.StringVar(&cfg.Backend, "backend", cfg.Backend, "DynamoDB and SQS emulators: dynalite (dynalite + fauxqs) or moto")
	fs.BoolVar(&cli.reuse, "reuse-stack", false, "use the stack named by AWS_ENDPOINT_URL_KINESIS/_DYNAMODB/_SQS instead of starting one")
	return fs, &cfg, cli
}

type demoCLI struct {
	json, noFaults, reuse bool
	variants              string
}

func printFlags(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			continue
		}
		typ, usage := flag.UnquoteUsage(f)
		def := ""
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			def = " (default " + f.DefValue + ")"
		}
		if typ != "" {
			typ = " " + typ
		}
		fmt.Fprintf(fs.Output(), "  --%s%s\n        %s%s\n", n, typ, usage, def)
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfg, cli := demoFlags(stderr)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Duration > 0 && !set["baseline"] {
		cfg.Baseline = false // a soak proves gapless; the comparison is the default run's job
	}
	if cfg.Duration > 0 {
		// A soak produces --rate records a second (default demo.DefaultSoakRate) for --duration,
		// or --records spread over --duration.
		if !set["records"] {
			cfg.Records = 0
		}
		if !set["rate"] {
			cfg.Rate = 0
		}
	}
	if cli.noFaults {
		cfg.Faults = demo.Faults{Expire: cfg.Faults.Expire} // --expire isolates the retention fault
	}
	if set["variants"] {
		vs, err := demo.ParseVariants(cli.variants)
		if err != nil {
			fmt.Fprintln(stderr, "gapless-dev demo:", err)
			return errUsage
		}
		cfg.Variants = vs
	}
	opts := demo.Options{
		// The emulators take any credentials: fixed ones, so nothing looks for real ones.
		AWS:      aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")},
		Progress: stderr,
	}
	if cli.reuse {
		opts.Endpoints = demo.Endpoints{
			Kinesis: os.Getenv("AWS_ENDPOINT_URL_KINESIS"), DynamoDB: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), SQS: os.Getenv("AWS_ENDPOINT_URL_SQS"),
		}
		if opts.Endpoints.Kinesis == "" || opts.Endpoints.DynamoDB == "" || opts.Endpoints.SQS == "" {
			return fmt.Errorf("--reuse-stack needs AWS_ENDPOINT_URL_KINESIS, _DYNAMODB and _SQS (`. .local/stack.env` after `make up`)")
		}
	}
	res, err := demo.Run(ctx, *cfg, opts)
	if err != nil {
		if errors.Is(err, demo.ErrConfig) {
			fmt.Fprintln(stderr, "gapless-dev demo:", err)
			return errUsage
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	if cli.json {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, demo.Table(res))
	}
	if !res.OK() {
		if res.Incomplete && res.Lost == 0 {
			return fmt.Errorf("%w: INCOMPLETE, %d records still pending when the run ended, none known lost (see %s)",
				demo.ErrLost, res.Pending, res.ReportDir)
		}
		return fmt.Errorf("%w (lost %d, verified %v; see %s)", demo.ErrLost, res.Lost, res.Verified, res.ReportDir)
	}
	return nil
}
