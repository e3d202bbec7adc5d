package demo

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// writeVariantFiles writes a variant's timeline (JSON) and chart (SVG) into its directory.
func writeVariantFiles(v *variant, r *VariantResult) error {
	b, err := json.MarshalIndent(r.Timeline, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v.dir, "timeline.json"), b, 0o644); err != nil {
		return fmt.Errorf("demo: write timeline: %w", err)
	}
	v.mu.Lock()
	var marks []chartMark
	if !v.raceAt.IsZero() {
		marks = append(marks, chartMark{at: v.raceAt.Sub(v.start), label: "2nd mapping"})
	}
	if !v.splitAt.IsZero() {
		marks = append(marks, chartMark{at: v.splitAt.Sub(v.start), label: "split"})
	}
	v.mu.Unlock()
	svg := Chart(r.Timeline, v.gapless, marks)
	if err := os.WriteFile(filepath.Join(v.dir, "chart.svg"), []byte(svg), 0o644); err != nil {
		return fmt.Errorf("demo: write chart: %w", err)
	}
	return nil
}

// writeReport writes report.md and result.json into the report directory.
func writeReport(res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(res.ReportDir, "result.json"), b, 0o644); err != nil {
		return fmt.Errorf("demo: write result: %w", err)
	}
	if err := os.WriteFile(filepath.Join(res.ReportDir, "report.md"), []byte(Markdown(res)), 0o644); err != nil {
		return fmt.Errorf("demo: write report: %w", err)
	}
	return nil
}

// rows are the side-by-side figures: label, mapping alone, gapless.
func rows(res *Result) [][3]string {
	g, b := res.Gapless, res.Baseline
	cell := func(r *VariantResult, f func(*VariantResult) string) string {
		if r == nil {
			return "—"
		}
		return f(r)
	}
	num := func(f func(*VariantResult) int) func(*VariantResult) string {
		return func(r *VariantResult) string { return fmt.Sprint(f(r)) }
	}
	row := func(label string, fb, fg func(*VariantResult) string) [3]string {
		return [3]string{label, cell(b, fb), cell(g, fg)}
	}
	same := func(label string, f func(*VariantResult) int) [3]string { return row(label, num(f), num(f)) }
	dash := func(*VariantResult) string { return "—" }
	return [][3]string{
		same("produced", func(r *VariantResult) int { return r.Produced }),
		same("  of which poison", func(r *VariantResult) int { return r.PoisonProduced }),
		row("  of which killers (crash / hang)", killerKinds, killerKinds),
		same("delivered (unique)", func(r *VariantResult) int { return r.DeliveredUnique }),
		same("duplicates delivered", func(r *VariantResult) int { return r.Duplicates }),
		row("parked (payload verified)", dash, num(func(r *VariantResult) int { return r.Parked })),
		same("LOST", func(r *VariantResult) int { return r.Lost }),
		same("records given up by the mapping", func(r *VariantResult) int { return r.Mapping.RecordsGivenUp }),
		row("gaps detected / replayed", dash, func(r *VariantResult) string { return fmt.Sprintf("%d / %d", r.GapsDetected, r.GapsReplayed) }),
		row("DynamoDB requests per batch", dash, func(r *VariantResult) string { return fmt.Sprintf("%.2f", r.DDB.RequestsPerBatch) }),
		row("DynamoDB write units per record", dash, func(r *VariantResult) string { return fmt.Sprintf("%.3f", r.DDB.WCUPerRecord) }),
		same("invocations", func(r *VariantResult) int { return r.Mapping.Invocations }),
		row("seconds", func(r *VariantResult) string { return fmt.Sprintf("%.0f", r.Seconds) }, func(r *VariantResult) string { return fmt.Sprintf("%.0f", r.Seconds) }),
	}
}

// Table is the side-by-side table as plain text (the CLI prints it on stdout).
func Table(res *Result) string {
	rs := rows(res)
	lw, w1, w2 := 0, len("mapping alone"), len("gapless")
	for _, r := range rs {
		lw, w1, w2 = max(lw, len(r[0])), max(w1, len(r[1])), max(w2, len(r[2]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %*s  %*s\n", lw, "", w1, "mapping alone", w2, "gapless")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-*s  %*s  %*s\n", lw, r[0], w1, r[1], w2, r[2])
	}
	fmt.Fprintf(&b, "\nreport: %s\n", filepath.Join(res.ReportDir, "report.md"))
	return b.String()
}

// Markdown is the report.
func Markdown(res *Result) string {
	var b strings.Builder
	g := res.Gapless
	verdict := "**gapless lost nothing**"
	if !res.OK() {
		verdict = "**gapless FAILED**: "
		switch {
		case res.Lost > 0:
			verdict += fmt.Sprintf("%d records lost", res.Lost)
		case !res.Verified:
			verdict += "the reconciler had not verified every shard when the run ended"
		default:
			verdict += "a parked message does not carry its record's payload"
		}
	}
	fmt.Fprintf(&b, "# gapless demo\n\n%s. Seed %d, runtime %s, %.0f s in all.\n\n", verdict, res.Seed, res.Runtime, res.Seconds)
	s := res.Settings
	fmt.Fprintf(&b, "Workload: %d records (%d partition keys) at %d/s over %d shards, ParallelizationFactor %d, batch size %d, "+
		"function timeout %s, MaximumRetryAttempts %d, MaximumRecordAgeInSeconds %s, bisect %v; gapless parks after %d failed attempts, reconciler every %s "+
		"with a settle window of %s.\n\n", s.Records, s.Keys, s.Rate, s.Shards, s.Parallelization, s.BatchSize,
		s.FunctionTimeout, s.RetryAttempts, recordAge(s.MaxRecordAge), s.Bisect, s.MaxRecordAttempts, s.Reconcile, s.SettleAfter)
	if s.Duration != "0s" {
		fmt.Fprintf(&b, "Soak: production spread over %s.\n\n", s.Duration)
	}
	b.WriteString("| | mapping alone | gapless |\n|---|---:|---:|\n")
	for _, r := range rows(res) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", strings.TrimSpace(r[0]), r[1], r[2])
	}
	b.WriteString("\n*lost* = produced − delivered (unique ids at the target queue) − parked (records not delivered whose " +
		"exact payload is in the parked queue). The mapping alone loses what it gives up (retries exhausted: its " +
		"on-failure destination gets metadata only) and every poison record; gapless parks poison records with their " +
		"payload and replays every range the mapping gave up.\n\n")

	b.WriteString("## Faults injected\n\n| fault | mapping alone | gapless |\n|---|---:|---:|\n")
	fault := func(label string, f func(*VariantResult) string) {
		bv := "—"
		if res.Baseline != nil {
			bv = f(res.Baseline)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", label, bv, f(g))
	}
	itoa := func(n int64) string { return fmt.Sprint(n) }
	fault("poison records produced (permanent failure)", func(r *VariantResult) string { return fmt.Sprint(r.PoisonProduced) })
	fault("in-function transient errors", func(r *VariantResult) string { return itoa(r.Faults.Chaos.Transient) })
	fault("in-function panics", func(r *VariantResult) string { return itoa(r.Faults.Chaos.Panics) })
	fault("in-function slow calls (invocation timeouts)", func(r *VariantResult) string {
		return itoa(r.Faults.Chaos.Slow) + fmt.Sprintf(" (%d)", r.Mapping.Timeouts)
	})
	fault("killer records produced (crash / hang)", killerKinds)
	fault("attempts at crash killers (runtime exits)", func(r *VariantResult) string { return itoa(r.Faults.Chaos.Crashes) })
	fault("attempts at hang killers (past the timeout)", func(r *VariantResult) string { return itoa(r.Faults.Chaos.Hangs) })
	fault("DynamoDB throttled / 5xx / response dropped", func(r *VariantResult) string {
		return fmt.Sprintf("%d / %d / %d", r.Faults.DynamoDB.Throttled, r.Faults.DynamoDB.ServerErrors, r.Faults.DynamoDB.DroppedAfter)
	})
	fault("SQS throttled / 5xx / response dropped", func(r *VariantResult) string {
		return fmt.Sprintf("%d / %d / %d", r.Faults.SQS.Throttled, r.Faults.SQS.ServerErrors, r.Faults.SQS.DroppedAfter)
	})
	fault("shard split", func(r *VariantResult) string { return orDash(r.Mapping.SplitShard) })
	fault("racing mappings (same function config and group)", func(r *VariantResult) string { return fmt.Sprint(r.Mapping.Mappings) })
	fault("reconciler killed mid-replay", func(r *VariantResult) string {
		if r.Name != VariantGapless {
			return "—"
		}
		return fmt.Sprint(r.Faults.ReconcilerKills)
	})
	if g.Faults.KillNote != "" {
		fmt.Fprintf(&b, "\nKill: %s.\n", g.Faults.KillNote)
	}
	if res.Runtime == RuntimeRIE {
		b.WriteString("\nUnder the emulator the in-function faults are read back from the bootstraps' shared chaos " +
			"state (internal/chaos StateStats).\n")
	}

	if killersProduced(res) {
		b.WriteString(killerSection(res))
	}

	b.WriteString("\n## Event-source mapping\n\n| | mapping alone | gapless |\n|---|---:|---:|\n")
	mrow := func(label string, f func(MappingStats) int) {
		fault(label, func(r *VariantResult) string { return fmt.Sprint(f(r.Mapping)) })
	}
	mrow("invocations", func(m MappingStats) int { return m.Invocations })
	mrow("function errors (timeouts included)", func(m MappingStats) int { return m.FunctionErrors })
	mrow("partial batch failures", func(m MappingStats) int { return m.PartialFailures })
	mrow("bisections", func(m MappingStats) int { return m.Bisections })
	mrow("batches given up (on-failure messages)", func(m MappingStats) int { return m.RetriesExhausted + m.RecordAgeExceeded })
	mrow("records given up", func(m MappingStats) int { return m.RecordsGivenUp })

	r := g.Reconciler
	fmt.Fprintf(&b, "\n## Reconciler (gapless)\n\n- scheduled passes: %d (%d failed)\n- failure-queue invocations: %d "+
		"(%d messages received, %d accounted for and deleted, %d retried)\n- invocations killed: %d\n"+
		"- gaps detected: %d, replayed: %d; lost to retention: %d\n- checkpoint mirror writes: %d\n- every shard verified "+
		"(watermark at the checkpoint mirror, closed shards to their end) before the run ended: %v\n",
		r.ScheduledRuns, r.ScheduledErrors, r.FailureInvocations, r.FailureMessages, r.FailureDeleted, r.FailureRetried,
		r.Crashes, g.GapsDetected, g.GapsReplayed, r.LostToRetention, r.CheckpointWrites, g.Verified)

	b.WriteString("\n## DynamoDB (gapless)\n\nRequests counted at the fault proxies (faulted requests and SDK retries included); " +
		"write units computed from the bodies of the requests that reached DynamoDB with internal/ddbmeter's size rules.\n\n" +
		"| operation | consumer requests | reconciler requests |\n|---|---:|---:|\n")
	ops := map[string]bool{}
	for op := range g.DDB.Requests {
		ops[op] = true
	}
	for op := range g.DDB.ReconcilerRequests {
		ops[op] = true
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	for _, op := range names {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", op, g.DDB.Requests[op], g.DDB.ReconcilerRequests[op])
	}
	fmt.Fprintf(&b, "\nConsumer: %d invocations, %.2f requests per batch, %.1f write units in all; reconciler: %.1f write units; "+
		"%.3f write units per produced record.\n", g.Mapping.Invocations, g.DDB.RequestsPerBatch,
		g.DDB.Meter.Total.WriteUnits, g.DDB.ReconcilerMeter.Total.WriteUnits, g.DDB.WCUPerRecord)

	b.WriteString("\n## Checkpoint mirror, verified watermark and production per shard\n\n![gapless](gapless/chart.svg)\n\n")
	if res.Baseline != nil {
		b.WriteString("The mapping alone has no mirror; its chart shows the slowest lane's checkpoint per shard:\n\n" +
			"![mapping alone](mapping-alone/chart.svg)\n\n")
	}

	b.WriteString("## Memory (RSS) of every process\n\n| variant | process | pid | first | steady | last | max | observed | flat |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, vr := range []*VariantResult{res.Baseline, g} {
		if vr == nil {
			continue
		}
		for _, p := range vr.Processes {
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %.0fs | %v |\n", vr.Name, p.Name, p.PID,
				mb(p.FirstKB), mb(p.SteadyKB), mb(p.LastKB), mb(p.MaxKB), p.Seconds, p.Flat)
		}
	}
	for _, vr := range []*VariantResult{res.Baseline, g} {
		if vr == nil || len(vr.LostRecords) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## Lost by %s (first %d)\n\n| id | partition key | shard | sequence number |", vr.Name, len(vr.LostRecords))
		if vr == g {
			b.WriteString(" ledger: done / parked / attempts |\n|---|---|---|---|---|\n")
		} else {
			b.WriteString("\n|---|---|---|---|\n")
		}
		for _, l := range vr.LostRecords {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |", l.ID, l.PartitionKey, l.ShardID, l.Seq)
			if vr == g {
				if l.LedgerError != "" {
					fmt.Fprintf(&b, " lookup failed: %s |", l.LedgerError)
				} else {
					fmt.Fprintf(&b, " %v / %v / %d |", l.LedgerDone, l.LedgerParked, l.LedgerAttempts)
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nFiles: `result.json` (everything above), `<variant>/timeline.json`, `<variant>/functions.log`, " +
		"`stack/logs/` (emulators).\n")
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func mb(kb int64) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }

// chartMark is a vertical line on the chart (the split, the racing mapping's start).
type chartMark struct {
	at    time.Duration
	label string
}

// Chart draws the timeline as an SVG: one panel per shard, time across, records up; produced
// (grey), the checkpoint (blue: gapless's mirror, or the mapping alone's slowest lane) and, for
// gapless, the verified watermark (green).
func Chart(tl []Sample, gapless bool, marks []chartMark) string {
	shardSet := map[string]bool{}
	var end time.Duration
	for _, s := range tl {
		for id := range s.Shards {
			shardSet[id] = true
		}
		end = max(end, s.At)
	}
	shards := make([]string, 0, len(shardSet))
	for id := range shardSet {
		shards = append(shards, id)
	}
	sort.Strings(shards)
	const (
		cols   = 2
		pw, ph = 440, 190 // panel
		ml, mt = 48, 26   // margins inside a panel
		mr, mb = 12, 28
		top    = 44
	)
	rowsN := (len(shards) + cols - 1) / cols
	width, height := cols*pw, top+max(rowsN, 1)*ph
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	title := "mapping alone: produced vs. the slowest lane's checkpoint, per shard"
	if gapless {
		title = "gapless: produced vs. checkpoint mirror vs. verified watermark, per shard"
	}
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))
	legend := []struct{ color, label string }{{"#999999", "produced"}, {"#1f77b4", "checkpoint"}}
	if gapless {
		legend = append(legend, struct{ color, label string }{"#2ca02c", "verified watermark"})
	}
	for i, l := range legend {
		x := 10 + i*150
		fmt.Fprintf(&b, `<line x1="%d" y1="32" x2="%d" y2="32" stroke="%s" stroke-width="3"/><text x="%d" y="36">%s</text>`+"\n", x, x+24, l.color, x+30, l.label)
	}
	if len(shards) == 0 || end <= 0 {
		b.WriteString(`<text x="10" y="70">no samples</text></svg>` + "\n")
		return b.String()
	}
	for i, id := range shards {
		ox, oy := (i%cols)*pw, top+(i/cols)*ph
		x0, y0 := ox+ml, oy+mt
		w, h := pw-ml-mr, ph-mt-mb
		ymax := 1
		for _, s := range tl {
			ymax = max(ymax, s.Shards[id].Produced)
		}
		fmt.Fprintf(&b, `<g><text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, oy+16, html.EscapeString(id))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#cccccc"/>`+"\n", x0, y0, w, h)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%d</text><text x="%d" y="%d" text-anchor="end">0</text>`+"\n", x0-4, y0+4, ymax, x0-4, y0+h)
		fmt.Fprintf(&b, `<text x="%d" y="%d">0s</text><text x="%d" y="%d" text-anchor="end">%.0fs</text>`+"\n", x0, y0+h+14, x0+w, y0+h+14, end.Seconds())
		px := func(at time.Duration) float64 { return float64(x0) + float64(w)*at.Seconds()/end.Seconds() }
		py := func(n int) float64 { return float64(y0+h) - float64(h)*float64(n)/float64(ymax) }
		for k, m := range marks {
			x := px(m.at)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4,3"/><text x="%.1f" y="%d" fill="#d62728">%s</text>`+"\n",
				x, y0, x, y0+h, x+3, y0+12+14*k, html.EscapeString(m.label))
		}
		line := func(color string, width float64, get func(ShardSample) int) {
			var pts []string
			for _, s := range tl {
				ss, ok := s.Shards[id]
				if !ok {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.At), py(get(ss))))
			}
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", color, width, strings.Join(pts, " "))
			}
		}
		line("#999999", 3, func(s ShardSample) int { return s.Produced })
		line("#1f77b4", 2, func(s ShardSample) int { return s.Checkpoint })
		if gapless {
			line("#2ca02c", 2, func(s ShardSample) int { return s.Watermark })
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func killerKinds(r *VariantResult) string {
	return fmt.Sprintf("%d / %d", r.Killers.Crash, r.Killers.Hang)
}

func killersProduced(res *Result) bool {
	for _, r := range []*VariantResult{res.Baseline, res.Gapless} {
		if r != nil && r.Killers.Produced() > 0 {
			return true
		}
	}
	return false
}

// killerSection says what became of the killer records in each variant.
func killerSection(res *Result) string {
	var b strings.Builder
	b.WriteString("\n## Killer records\n\nRecords that exit the runtime or hang past the function timeout on every " +
		"attempt (`--crash`, `--hang`; chosen by the seed and the record's id, the same records in both runs). No " +
		"invocation holding one ever returns an outcome.\n\n| fate | mapping alone | gapless |\n|---|---:|---:|\n")
	line := func(label string, f func(KillerStats) int) {
		cell := func(r *VariantResult) string {
			if r == nil {
				return "—"
			}
			return fmt.Sprint(f(r.Killers))
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", label, cell(res.Baseline), cell(res.Gapless))
	}
	line("produced", KillerStats.Produced)
	line("delivered", func(k KillerStats) int { return k.Delivered })
	line("parked with their payload", func(k KillerStats) int { return k.Parked })
	line("given up by the mapping: retries exhausted", func(k KillerStats) int { return k.GivenUpRetry })
	line("given up by the mapping: record age", func(k KillerStats) int { return k.GivenUpAge })
	line("held: still retried, lane blocked, when the run ended", func(k KillerStats) int { return k.Held })
	if bl := res.Baseline; bl != nil && bl.Killers.Produced() > 0 {
		k := bl.Killers
		fmt.Fprintf(&b, "\nThe mapping alone: of %d killers it gave up on %d after MaximumRetryAttempts (%d) and discarded "+
			"%d for their age; its on-failure messages carry metadata only, so those records are gone. %d were still "+
			"being retried, their lanes blocked, when the run ended.\n",
			k.Produced(), k.GivenUpRetry, res.Settings.RetryAttempts, k.GivenUpAge, k.Held)
	}
	if g := res.Gapless; g != nil && g.Killers.Produced() > 0 {
		k := g.Killers
		fmt.Fprintf(&b, "\ngapless: %d of %d killers parked with their payload; %d given up by the mapping and left to "+
			"the reconciler; %d still held when the run ended.\n", k.Parked, k.Produced(), k.GivenUpRetry+k.GivenUpAge, k.Held)
	}
	return b.String()
}

// recordAge shows a MaximumRecordAgeInSeconds setting ("0s": off).
func recordAge(d string) string {
	if d == "" || d == "0s" {
		return "off"
	}
	return d
}
