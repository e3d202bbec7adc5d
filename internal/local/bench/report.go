package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gapless-dev/gapless/internal/local/rie"
)

// find returns the case result for handler, batch size and PF.
func (r *Results) find(h string, bs, pf int) (CaseResult, bool) {
	for _, c := range r.Cases {
		if c.Handler == h && c.BatchSize == bs && c.PF == pf {
			return c, true
		}
	}
	return CaseResult{}, false
}

// grid returns the batch sizes and PFs present, sorted.
func (r *Results) grid() (sizes, pfs []int) {
	for _, c := range r.Cases {
		if !slices.Contains(sizes, c.BatchSize) {
			sizes = append(sizes, c.BatchSize)
		}
		if !slices.Contains(pfs, c.PF) {
			pfs = append(pfs, c.PF)
		}
	}
	slices.Sort(sizes)
	slices.Sort(pfs)
	return sizes, pfs
}

// Target is one goal of the issue and what this run measured for it.
type Target struct {
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      *bool  `json:"met,omitempty"` // nil when not measured in this run
}

func verdict(ok bool) *bool { return &ok }

// Targets evaluates the goals on the results.
func (r *Results) Targets() []Target {
	var out []Target
	sizes, pfs := r.grid()
	maxRT, maxWCU, minBaseWCU, maxTime, minTime := -1.0, -1.0, -1.0, -1.0, -1.0
	var timeAt, minTimeAt string
	for _, c := range r.Cases {
		switch c.Handler {
		case Gapless, GaplessSQS: // one consumer critical path, whatever the sink
			maxRT = math.Max(maxRT, c.CriticalPathRoundTrips)
			if c.Handler == Gapless && c.BatchSize >= 100 {
				maxWCU = math.Max(maxWCU, c.WriteUnitsPerRecord)
			}
		case Idempotent:
			if minBaseWCU < 0 || c.WriteUnitsPerRecord < minBaseWCU {
				minBaseWCU = c.WriteUnitsPerRecord
			}
		}
	}
	var cpuParts []string
	lastCPU := math.NaN()
	for _, bs := range sizes {
		for _, pf := range pfs {
			a, okA := r.find(Bare, bs, pf)
			g, okG := r.find(Gapless, bs, pf)
			if !okA || !okG {
				continue
			}
			if pf == pfs[0] {
				o := g.CPUMicrosPerRecord/a.CPUMicrosPerRecord - 1
				cpuParts = append(cpuParts, fmt.Sprintf("%+.0f%% at batch %d", o*100, bs))
				lastCPU = o
			}
			if bs < 100 {
				continue
			}
			t := a.RecordsPerSec / g.RecordsPerSec
			if t > maxTime {
				maxTime, timeAt = t, fmt.Sprintf("batch %d, PF %d", bs, pf)
			}
			if minTime < 0 || t < minTime {
				minTime, minTimeAt = t, fmt.Sprintf("batch %d, PF %d", bs, pf)
			}
		}
	}
	add := func(goal string, measured bool, text string, ok bool) {
		t := Target{Goal: goal, Measured: "not measured in this run"}
		if measured {
			t.Measured, t.Met = text, verdict(ok)
		}
		out = append(out, t)
	}
	add("≤ 2 sequential DynamoDB round trips per batch in the consumer's critical path (gapless and gapless-sqs, happy path, any batch size; the in-flight marker goes out beside the lookup, the checkpoint beside the ledger entry)", maxRT >= 0,
		fmt.Sprintf("max %.2f", maxRT), maxRT <= 2)
	add("≤ 0.03 write units per record at batch size ≥ 100 (gapless, in-flight marker included)", maxWCU >= 0,
		fmt.Sprintf("max %.4f", maxWCU), maxWCU <= 0.03+1e-9)
	add("the idempotency baseline spends ≥ 2 write units per record", minBaseWCU >= 0,
		fmt.Sprintf("min %.2f", minBaseWCU), minBaseWCU >= 2)
	add("gapless handler time within 1.2× of the bare handler at batch size ≥ 100", maxTime >= 0,
		fmt.Sprintf("%.2f× (%s) to %.2f× (%s)", minTime, minTimeAt, maxTime, timeAt), maxTime <= 1.2)
	add(fmt.Sprintf("pipeline CPU overhead over event decoding ≤ 10%% (gapless CPU per record over bare's, which is decoding plus Process; PF %d; judged at the largest batch, where the client-side CPU of the three SDK calls per batch is amortized)", firstOr(pfs, 1)),
		!math.IsNaN(lastCPU), strings.Join(cpuParts, ", "), lastCPU <= 0.10)
	var mem *MemResult
	for i := range r.Memory {
		if r.Memory[i].Handler == Gapless {
			mem = &r.Memory[i]
		}
	}
	add("peak memory for a 6 MB batch ≤ 3× the payload (gapless)", mem != nil,
		func() string {
			if mem == nil {
				return ""
			}
			return fmt.Sprintf("%.2f× (%.1f MB over a %.1f MB payload)", mem.PeakOverBytes, mb(mem.BatchPeakBytes), mb(int64(mem.PayloadBytes)))
		}(), mem != nil && mem.PeakOverBytes <= 3)
	// The default bridge: batched gapless against the per-record bare bridge.
	minRatio, worstReq := -1.0, -1.0
	var ratioAt, reqAt string
	for _, bs := range sizes {
		if bs < 100 {
			continue
		}
		for _, pf := range pfs {
			a, okA := r.find(BareSQS, bs, pf)
			g, okG := r.find(GaplessSQS, bs, pf)
			if okG && g.SQSRequestsPerRecord > worstReq {
				worstReq, reqAt = g.SQSRequestsPerRecord, fmt.Sprintf("batch %d, PF %d", bs, pf)
			}
			if !okA || !okG {
				continue
			}
			if t := g.RecordsPerSec / a.RecordsPerSec; minRatio < 0 || t < minRatio {
				minRatio, ratioAt = t, fmt.Sprintf("batch %d, PF %d", bs, pf)
			}
		}
	}
	add("gapless with the batched SQS bridge at least as fast as the bare per-record bridge at batch size ≥ 100 (records/s gapless-sqs ÷ bare-sqs)", minRatio >= 0,
		fmt.Sprintf("min %.2f× (%s)", minRatio, ratioAt), minRatio >= 1)
	add("≤ 0.11 SQS requests per record at batch size ≥ 100 (gapless-sqs)", worstReq >= 0,
		fmt.Sprintf("max %.4f (%s)", worstReq, reqAt), worstReq <= 0.11+1e-9)
	var memSQS *MemResult
	for i := range r.Memory {
		if r.Memory[i].Handler == GaplessSQS {
			memSQS = &r.Memory[i]
		}
	}
	add("peak memory for a 6 MB batch ≤ 3× the payload (gapless-sqs: the batched bridge)", memSQS != nil,
		func() string {
			if memSQS == nil {
				return ""
			}
			return fmt.Sprintf("%.2f× (%.1f MB over a %.1f MB payload)", memSQS.PeakOverBytes, mb(memSQS.BatchPeakBytes), mb(int64(memSQS.PayloadBytes)))
		}(), memSQS != nil && memSQS.PeakOverBytes <= 3)
	rc := r.Reconcile
	add("reconciler: ≤ 1 GetRecords call per 10,000 records verified", rc != nil,
		func() string {
			if rc == nil {
				return ""
			}
			return fmt.Sprintf("%.2f", rc.GetRecordsPer10k)
		}(), rc != nil && rc.GetRecordsPer10k <= 1)
	add("reconciler: ≤ 0.02 read units per record", rc != nil,
		func() string {
			if rc == nil {
				return ""
			}
			return fmt.Sprintf("%.4f", rc.ReadUnitsPerRecord)
		}(), rc != nil && rc.ReadUnitsPerRecord <= 0.02)
	var boot *BootstrapResult
	for i := range r.Bootstraps {
		if r.Bootstraps[i].Handler == Gapless && r.Bootstraps[i].Pending == "" {
			boot = &r.Bootstraps[i]
		}
	}
	add("cold start under 50 ms in RIE (gapless consumer: cold − warm empty invocation)", boot != nil,
		func() string {
			if boot == nil {
				return ""
			}
			return fmt.Sprintf("median %.1f ms", boot.InitMedianMs)
		}(), boot != nil && boot.InitMedianMs < 50)
	add("bootstrap under 15 MB (gapless consumer)", boot != nil,
		func() string {
			if boot == nil {
				return ""
			}
			s := fmt.Sprintf("%.1f MB", mb(boot.SizeBytes))
			if boot.SizeBytesArm64 > 0 {
				s += fmt.Sprintf(" (arm64 %.1f MB)", mb(boot.SizeBytesArm64))
			}
			return s
		}(), boot != nil && boot.SizeBytes < 15<<20 && boot.SizeBytesArm64 < 15<<20)
	return out
}

func firstOr(v []int, def int) int {
	if len(v) == 0 {
		return def
	}
	return v[0]
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func ratio(a, b float64) string {
	if a == 0 || b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func num3(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// WriteMarkdown writes the results as the tables of docs/benchmarks.md.
func (r *Results) WriteMarkdown(w io.Writer, command string) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.Machine
	p("Generated by `%s` on %s in %.0f s.\n\n", command, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Seconds)
	p("Machine: %s, %d CPUs (%s), %s; DynamoDB: %s; load average before/after: %s / %s.\n",
		m.OS, m.CPUs, m.CPUModel, m.GoVersion, m.Backend, m.LoadBefore, m.LoadAfter)
	p("Process: %s. All handlers run %d partition keys at once, each key in order.\n\n", r.Process, r.Concurrency)

	sizes, pfs := r.grid()
	p("### Headline: (c) gapless against (a) bare and (b) record-level idempotency (checksum Process)\n\n")
	p("| batch | PF | DynamoDB round trips / batch (b · c) | write units / record (b · c) | read units / record (b · c) | records/s (a · b · c) | handler time c÷a | handler time b÷c | CPU / record c÷a |\n")
	p("|---:|---:|---|---|---|---|---:|---:|---:|\n")
	for _, bs := range sizes {
		for _, pf := range pfs {
			a, okA := r.find(Bare, bs, pf)
			i, okI := r.find(Idempotent, bs, pf)
			g, okG := r.find(Gapless, bs, pf)
			if !okA && !okI && !okG {
				continue
			}
			ib := func(f func(CaseResult) float64) string {
				if !okI {
					return "–"
				}
				return num3(f(i))
			}
			p("| %d | %d | %s · %s | %s · %s | %s · %s | %s · %s · %s | %s | %s | %s |\n", bs, pf,
				ib(func(c CaseResult) float64 { return c.DDBAttemptsPerBatch }), num3(g.DDBAttemptsPerBatch),
				ib(func(c CaseResult) float64 { return c.WriteUnitsPerRecord }), num3(g.WriteUnitsPerRecord),
				ib(func(c CaseResult) float64 { return c.ReadUnitsPerRecord }), num3(g.ReadUnitsPerRecord),
				num3(a.RecordsPerSec), ib(func(c CaseResult) float64 { return c.RecordsPerSec }), num3(g.RecordsPerSec),
				ratio(a.RecordsPerSec, g.RecordsPerSec), ratio(g.RecordsPerSec, i.RecordsPerSec),
				ratio(g.CPUMicrosPerRecord, a.CPUMicrosPerRecord))
		}
	}
	p("\nHandler time ratios are records/s inverted (time per record); b÷c > 1 means the baseline is slower.\n\n")

	if r.hasSQS() {
		p("### The default bridge to SQS: bare per-record SendMessage (a) against gapless batched (c)\n\n")
		p("Both forward every record to the same local standard queue with the default bridge (`process.New`: one SendMessage per record, 16 keys at once; `process.NewBatch` through `pipeline.WithBatchSink`: SendMessageBatch waves, one record per key per wave). Cost at list prices: SQS USD %.2f per million requests (each started 64 KB of a request's payload billed as one), DynamoDB on-demand USD %.3f per million write and %.3f per million read request units.\n\n",
			SQSPerMillionRequests, DDBPerMillionWRU, DDBPerMillionRRU)
		p("| batch | PF | records/s (a · c) | c÷a | SQS requests / record (a · c) | billed SQS requests / record (a · c) | DynamoDB sequential round trips / batch (c) | USD per million records, SQS + DynamoDB (a · c) |\n")
		p("|---:|---:|---|---:|---|---|---:|---|\n")
		for _, bs := range sizes {
			for _, pf := range pfs {
				a, okA := r.find(BareSQS, bs, pf)
				g, okG := r.find(GaplessSQS, bs, pf)
				if !okA && !okG {
					continue
				}
				p("| %d | %d | %s · %s | %s | %s · %s | %s · %s | %s | %.2f + %.2f · %.2f + %.2f |\n", bs, pf,
					num3(a.RecordsPerSec), num3(g.RecordsPerSec), ratio(g.RecordsPerSec, a.RecordsPerSec),
					num3(a.SQSRequestsPerRecord), num3(g.SQSRequestsPerRecord),
					num3(a.SQSBilledRequestsPerRecord), num3(g.SQSBilledRequestsPerRecord), num3(g.CriticalPathRoundTrips),
					a.SQSUSDPerMillionRecords, a.DDBUSDPerMillionRecords, g.SQSUSDPerMillionRecords, g.DDBUSDPerMillionRecords)
			}
		}
		p("\nc÷a > 1: gapless with the batched bridge moves more records per second than the bare per-record bridge.\n\n")
	}

	p("### All cases\n\n")
	p("| handler | batch | PF | batches | records | failed batches | records/s | p50 ms | p99 ms | CPU µs / record | allocs / record | KB allocated / record | DynamoDB calls / batch | round trips / batch | sequential round trips / batch | calls by operation / batch | WCU / record | RCU / record |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, c := range r.Cases {
		var ops []string
		for op, v := range c.DDBOpsPerBatch {
			ops = append(ops, fmt.Sprintf("%s %s", op, num3(v)))
		}
		slices.Sort(ops)
		p("| %s | %d | %d | %d | %d | %d | %.0f | %.2f | %.2f | %.1f | %.1f | %.2f | %s | %s | %s | %s | %s | %s |\n",
			c.Handler, c.BatchSize, c.PF, c.Batches, c.Records, c.FailedBatches, c.RecordsPerSec, c.P50Ms, c.P99Ms,
			c.CPUMicrosPerRecord, c.AllocsPerRecord, c.AllocBytesPerRecord/1024, num3(c.DDBCallsPerBatch),
			num3(c.DDBAttemptsPerBatch), num3(c.CriticalPathRoundTrips), strings.Join(ops, ", "), num3(c.WriteUnitsPerRecord), num3(c.ReadUnitsPerRecord))
	}
	for _, s := range r.Skipped {
		p("\nSkipped: %s.", s)
	}
	if len(r.Skipped) > 0 {
		p("\n")
	}

	if len(r.Memory) > 0 {
		p("\n### Memory for one large batch\n\n%s.\n\n", r.MemoryMethod)
		p("| handler | records | payload MB | RSS before MB | peak RSS MB | batch peak MB | batch peak ÷ payload | allocations | MB allocated | GC cycles | seconds |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range r.Memory {
			reset := ""
			if !x.PeakReset {
				reset = " (peak not reset)"
			}
			p("| %s | %d | %.2f | %.1f | %.1f%s | %.1f | %.2f× | %d | %.1f | %d | %.2f |\n", x.Handler, x.Records,
				mb(int64(x.PayloadBytes)), mb(x.BaseRSSBytes), mb(x.PeakRSSBytes), reset, mb(x.BatchPeakBytes),
				x.PeakOverBytes, x.Allocs, mb(int64(x.AllocBytes)), x.GCCycles, x.Seconds)
		}
	}

	if len(r.Bootstraps) > 0 {
		p("\n### Bootstraps under aws-lambda-rie\n\nBuilt with `CGO_ENABLED=0 GOOS=linux go build %s`. Each cold start is a fresh emulator invoked twice with an empty event; init = first − second invocation (process start, Go runtime, main's init, runtime API handshake).\n\n",
			strings.ReplaceAll(strings.Join(rie.BuildFlags, " "), "-s -w", `"-s -w"`))
		p("| handler | package | size MB | size MB (arm64) | init ms (median) | init ms (all) | cold invoke ms | warm invoke ms |\n")
		p("|---|---|---:|---:|---:|---|---|---|\n")
		for _, x := range r.Bootstraps {
			if x.Pending != "" {
				p("| %s | `%s` | pending: %s | | | | | |\n", x.Handler, x.Package, x.Pending)
				continue
			}
			arm := "–"
			if x.SizeBytesArm64 > 0 {
				arm = fmt.Sprintf("%.2f", mb(x.SizeBytesArm64))
			}
			p("| %s | `%s` | %.2f | %s | %.1f | %s | %s | %s |\n", x.Handler, x.Package, mb(x.SizeBytes), arm,
				x.InitMedianMs, floats(x.InitMs), floats(x.ColdInvokeMs), floats(x.WarmInvokeMs))
		}
	}

	if rc := r.Reconcile; rc != nil {
		p("\n### Reconciler\n\n%d records written to a one-shard stream (plus a tail of %d not consumed, the stream's live end), consumed by the gapless handler in %d batches, then verified by `reconcile.Reconciler.Run` (settle window 0) in %d run(s), %.1f s.\n\n",
			rc.Records, rc.Tail, rc.ConsumedBatches, rc.Runs, rc.Seconds)
		var calls []string
		for op, n := range rc.KinesisCalls {
			calls = append(calls, fmt.Sprintf("%s %d", op, n))
		}
		slices.Sort(calls)
		p("| records verified | gaps | Kinesis calls | GetRecords / 10,000 | Kinesis calls / 10,000 | DynamoDB calls | RCU / record | WCU |\n")
		p("|---:|---:|---|---:|---:|---:|---:|---:|\n")
		p("| %d | %d | %s | %.2f | %.2f | %d | %.4f | %.0f |\n", rc.RecordsVerified, rc.GapsDetected, strings.Join(calls, ", "),
			rc.GetRecordsPer10k, rc.KinesisCallsPer10k, rc.DDBCalls, rc.ReadUnitsPerRecord, rc.WriteUnits)
		if rc.ReportedGetRecords != rc.KinesisCalls["GetRecords"] {
			p("\nThe reconciler's report says %d GetRecords calls; its Kinesis client made %d (the client's count is used above).\n",
				rc.ReportedGetRecords, rc.KinesisCalls["GetRecords"])
		}
	}
	for _, s := range r.Pending {
		p("\nPending: %s.\n", s)
	}

	p("\n### Targets\n\n| goal | measured | |\n|---|---|---|\n")
	for _, t := range r.Targets() {
		v := "–"
		if t.Met != nil {
			v = "missed"
			if *t.Met {
				v = "met"
			}
		}
		p("| %s | %s | %s |\n", t.Goal, t.Measured, v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}

// hasSQS reports whether the run has a case of the SQS bridge handlers.
func (r *Results) hasSQS() bool {
	for _, c := range r.Cases {
		if c.Handler == BareSQS || c.Handler == GaplessSQS {
			return true
		}
	}
	return false
}
