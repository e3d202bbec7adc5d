// Package bench drives one workload through three Kinesis handlers side by side and reports
// what each costs (`gapless bench`, `make bench`; results in docs/benchmarks.md):
//
//   - (a) Bare: internal/local/baseline.Bare, the event-source mapping alone, no state;
//   - (b) Idempotent: internal/local/baseline.Idempotent, Powertools-style record-level idempotency
//     (one conditional INPROGRESS PutItem and one COMPLETED UpdateItem per record);
//   - (c) Gapless: internal/consumer's handler over internal/pipeline with the DynamoDB ledger
//     (internal/dedupe), the checkpoint mirror (internal/checkpoint) and parking (internal/park).
//
// and, with the default Kinesis→SQS bridge instead of checksum.Process:
//
//   - (a) BareSQS: Bare around process.New, one SendMessage per record (the usual recipe);
//   - (c) GaplessSQS: Gapless with process.NewBatch through pipeline.WithBatchSink (SendMessageBatch
//     waves, as internal/wire wires the functions), with SQS requests per record counted by an SDK
//     middleware (SQSMeter) and the SQS + DynamoDB cost per million records at list prices.
//
// All three run the same Process (checksum.Process: FNV-1a over the data, no I/O) with the same
// concurrency (16 partition keys at once, each key in order), on the same synthetic shard
// contents (Workload), against the same local DynamoDB, and are handed the raw invocation
// payload: the baselines pay json.Unmarshal into events.KinesisEvent as lambda.Start would, the
// gapless consumer decodes it itself. Per case (handler × batch size × ParallelizationFactor) the
// Runner measures DynamoDB calls and HTTP round trips per batch and capacity units per record
// (internal/local/ddbmeter: computed from item sizes), records/s, p50/p99 batch latency, CPU and heap
// allocations per record. Besides the matrix: memory for one 6 MB batch in a child process
// (MeasureMemory), binary size and cold start of each bootstrap under aws-lambda-rie
// (ColdStarts), and the reconciler's Kinesis and DynamoDB cost per 10,000 verified records
// (Reconcile).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/schema"
)

// Config is one benchmark run.
type Config struct {
	Handlers   []string
	BatchSizes []int
	PFs        []int
	Limits     Limits
	// IdempotentMaxRound skips Idempotent cases whose one round (PF × batch size) exceeds it
	// (0: no limit); at ~500 records/s on the local stack, 40,000 records take over a minute.
	// The memory measurement of Idempotent is skipped when MemoryRecords exceeds it.
	IdempotentMaxRound int

	MemoryRecords    int // batch size of the memory measurement (0: skip)
	ReconcileRecords int // records the reconciler verifies (0: skip)
	ColdStartReps    int // cold starts per bootstrap (0: skip)
	Arm64Sizes       bool

	Root            string // module root (for go build)
	ConsumerPackage string // the gapless consumer's main package, e.g. ./functions/consumer
	Exe             string // this binary, for the memory child
	ChildArgs       []string
	WorkDir         string
	Backend         string // what serves DynamoDB, for the report
	Progress        io.Writer
}

// Results is everything one run measured.
type Results struct {
	Started      time.Time `json:"started"`
	Seconds      float64   `json:"seconds"`
	Machine      Machine   `json:"machine"`
	Process      string    `json:"process"`
	Concurrency  int       `json:"concurrency"`
	Cases        []CaseResult
	Skipped      []string          `json:"skipped,omitempty"`
	Memory       []MemResult       `json:"memory,omitempty"`
	MemoryMethod string            `json:"memory_method,omitempty"`
	Bootstraps   []BootstrapResult `json:"bootstraps,omitempty"`
	Reconcile    *ReconcileResult  `json:"reconcile,omitempty"`
	Pending      []string          `json:"pending,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	GoVersion  string `json:"go"`
	OS         string `json:"os"`
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	Backend    string `json:"backend"`
}

// ProcessDescription names the Process all handlers run.
const ProcessDescription = "checksum.Process: FNV-1a over each record's data, no I/O (the same function in all three)"

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Run sets up fresh tables, runs the matrix and the side measurements, and returns the results.
func Run(ctx context.Context, c Clients, cfg Config) (Results, error) {
	res := Results{
		Started: time.Now(), Process: ProcessDescription, Concurrency: Concurrency, MemoryMethod: MemoryMethod,
		Machine: Machine{GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
			CPUModel: cpuModel(), LoadBefore: loadAvg(), Backend: cfg.Backend},
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	nonce := Nonce()
	tables, err := Setup(ctx, c, nonce)
	if err != nil {
		return res, err
	}
	var subjects []*Subject
	for _, h := range cfg.Handlers {
		s, err := NewSubject(h, c, tables)
		if err != nil {
			return res, err
		}
		subjects = append(subjects, s)
	}
	r := NewRunner(subjects, "bench-"+nonce, cfg.Limits)
	if err := r.Warm(ctx); err != nil {
		return res, err
	}
	// The handlers of one (batch size, PF) run interleaved, so their ratios share the load.
	for _, bs := range cfg.BatchSizes {
		for _, pf := range cfg.PFs {
			var cases []Case
			for _, h := range cfg.Handlers {
				c := Case{Handler: h, BatchSize: bs, PF: pf}
				if h == Idempotent && cfg.IdempotentMaxRound > 0 && bs*pf > cfg.IdempotentMaxRound {
					res.Skipped = append(res.Skipped, fmt.Sprintf("%s: one round is %d records (limit %d)", c, bs*pf, cfg.IdempotentMaxRound))
					continue
				}
				cases = append(cases, c)
			}
			crs, err := r.RunTogether(ctx, cases)
			if err != nil {
				return res, err
			}
			for _, cr := range crs {
				fmt.Fprintf(progress, "%-32s %7d records %8.0f rec/s  p50 %8.2f ms  p99 %8.2f ms  ddb %5.2f calls/batch  %.4f WCU/rec  sqs %.4f req/rec\n",
					cr.Case, cr.Records, cr.RecordsPerSec, cr.P50Ms, cr.P99Ms, cr.DDBCallsPerBatch, cr.WriteUnitsPerRecord, cr.SQSRequestsPerRecord)
			}
			res.Cases = append(res.Cases, crs...)
		}
	}
	// Report order: by handler, then batch size and PF.
	slices.SortStableFunc(res.Cases, func(a, b CaseResult) int {
		return slices.Index(Handlers, a.Handler) - slices.Index(Handlers, b.Handler)
	})
	if cfg.MemoryRecords > 0 {
		var handlers []string
		for _, h := range cfg.Handlers {
			if h == Idempotent && cfg.IdempotentMaxRound > 0 && cfg.MemoryRecords > cfg.IdempotentMaxRound {
				res.Skipped = append(res.Skipped, fmt.Sprintf("memory %s: %d records (limit %d)", h, cfg.MemoryRecords, cfg.IdempotentMaxRound))
				continue
			}
			handlers = append(handlers, h)
		}
		fmt.Fprintf(progress, "memory: %d-record batch per handler, in child processes\n", cfg.MemoryRecords)
		mem, err := MeasureMemory(ctx, cfg.Exe, cfg.ChildArgs, cfg.WorkDir, handlers, cfg.MemoryRecords, tables)
		if err != nil {
			return res, err
		}
		res.Memory = mem
	}
	if cfg.ColdStartReps > 0 {
		fmt.Fprintf(progress, "cold starts: building bootstraps, %d starts each under aws-lambda-rie\n", cfg.ColdStartReps)
		boots := []Bootstrap{
			{Handler: Bare, Package: "./internal/local/bench/bootstrap/bare"},
			{Handler: Idempotent, Package: "./internal/local/bench/bootstrap/idempotent", Env: map[string]string{"IDEMPOTENCY_TABLE": tables.Idempotency}},
			{Handler: Gapless, Package: cfg.ConsumerPackage, Env: map[string]string{
				"GAPLESS_GROUP": tables.Group, "CHECKPOINT_TABLE": tables.Checkpoint, "DEDUPE_TABLE": tables.Ledger,
				"PARKED_QUEUE_URL": tables.ParkedQueue, "TARGET_QUEUE_URL": tables.TargetQueue,
				"PAYLOAD_BUCKET": schema.PayloadBucket, // a cold start only checks the name
			}},
		}
		bs, err := ColdStarts(ctx, cfg.Root, cfg.WorkDir, boots, cfg.ColdStartReps, cfg.Arm64Sizes)
		if err != nil {
			return res, err
		}
		for _, b := range bs {
			if b.Pending != "" {
				res.Pending = append(res.Pending, fmt.Sprintf("cold start of %s: %s", b.Handler, b.Pending))
			}
		}
		res.Bootstraps = bs
	}
	if cfg.ReconcileRecords > 0 {
		fmt.Fprintf(progress, "reconciler: %d records through the gapless handler, then verified\n", cfg.ReconcileRecords)
		rr, err := Reconcile(ctx, c, tables, nonce, cfg.ReconcileRecords, 1000)
		if err != nil {
			return res, err
		}
		res.Reconcile = &rr
	}
	res.Machine.LoadAfter = loadAvg()
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}
