package demo

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
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
		marks = append(marks, chartMark{at: v.raceAt.Sub(v.start), label: "2nd mapping", shard: v.raceShard})
	}
	if !v.splitAt.IsZero() {
		marks = append(marks, chartMark{at: v.splitAt.Sub(v.start), label: "split"})
	}
	v.mu.Unlock()
	svg := Chart(columnTitle[v.name], r.Timeline, v.gapless, marks, v.outcomeTicks())
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

// columnTitle is a variant's column heading.
var columnTitle = map[string]string{
	VariantBaseline: "mapping alone", VariantCheckpointDecides: "checkpoint decides", VariantGapless: "gapless",
}

// rows are the side-by-side figures: a label, then one cell per variant that ran (res.ran()).
func rows(res *Result) [][]string {
	vs := res.ran()
	num := func(f func(*VariantResult) int) func(*VariantResult) string {
		return func(r *VariantResult) string { return fmt.Sprint(f(r)) }
	}
	// only shows a figure for the named variants and a dash for the others.
	only := func(f func(*VariantResult) string, names ...string) func(*VariantResult) string {
		return func(r *VariantResult) string {
			if slices.Contains(names, r.Name) {
				return f(r)
			}
			return "—"
		}
	}
	row := func(label string, f func(*VariantResult) string) []string {
		out := []string{label}
		for _, v := range vs {
			out = append(out, f(v))
		}
		return out
	}
	same := func(label string, f func(*VariantResult) int) []string { return row(label, num(f)) }
	g := VariantGapless
	out := [][]string{
		same("produced", func(r *VariantResult) int { return r.Produced }),
		same("  of which poison", func(r *VariantResult) int { return r.PoisonProduced }),
		row("  of which killers (crash / hang)", killerKinds),
		same("delivered (unique)", func(r *VariantResult) int { return r.DeliveredUnique }),
		same("duplicates delivered", func(r *VariantResult) int { return r.Duplicates }),
		row("parked (payload verified)", only(num(func(r *VariantResult) int { return r.Parked }), g)),
		same("LOST", func(r *VariantResult) int { return r.Lost }),
	}
	if slices.ContainsFunc(vs, func(r *VariantResult) bool { return r.Pending > 0 }) {
		out = append(out, row("pending: run ended first (INCOMPLETE)", only(num(func(r *VariantResult) int { return r.Pending }), g)))
	}
	out = append(out, row("produced → delivered or parked, p50 / p99 / max", func(r *VariantResult) string {
		if r.Safety.Records == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0fs / %.0fs / %.0fs", r.Safety.P50Seconds, r.Safety.P99Seconds, r.Safety.MaxSeconds)
	}))
	if slices.ContainsFunc(vs, func(r *VariantResult) bool { return r.Name == VariantCheckpointDecides }) {
		out = append(out,
			row("  skipped as at/below the checkpoint", only(num(func(r *VariantResult) int { return r.handler().Filtered }), VariantCheckpointDecides)),
			row("  replaces lost (batch's rest skipped)", only(num(func(r *VariantResult) int { return r.handler().RacesLost }), VariantCheckpointDecides)))
	}
	// The filter's and the retention's rows only when the run had them: a row of zeros for a
	// fault that was off reads as if something had been filtered or expired.
	if res.Settings.Filter != "" || slices.ContainsFunc(vs, func(r *VariantResult) bool { return r.Filtered > 0 }) {
		out = append(out,
			same("filtered by --filter (not expected)", func(r *VariantResult) int { return r.Filtered }),
			same("  of which processed all the same", func(r *VariantResult) int { return r.FilteredProcessed }))
	}
	if res.Settings.Faults.Expire || slices.ContainsFunc(vs, func(r *VariantResult) bool { return r.LostToRetention > 0 }) {
		out = append(out,
			same("lost to retention (records, --expire)", func(r *VariantResult) int { return r.LostToRetention }),
			row("  alarmed: LostToRetention spans", only(num(func(r *VariantResult) int { return r.Reconciler.LostToRetention }), g)),
			row("trimmed, then replayed from S3 on-failure objects", only(num(func(r *VariantResult) int { return r.ReplayedAfterTrim }), g)))
	}
	out = append(out, same("records given up by the mapping", func(r *VariantResult) int { return r.Mapping.RecordsGivenUp }))
	if res.Gapless != nil {
		out = append(out,
			// Distinct records, not the reconciler's per-pass metrics (GapsDetected counts a
			// record that keeps failing again on every pass; the report's reconciler section
			// shows them, labelled).
			row("records the reconciler replayed / parked", only(func(r *VariantResult) string {
				return fmt.Sprintf("%d / %d", r.ReconcilerReplayed, r.ReconcilerParked)
			}, g)),
			row("  replays past the checkpoint (tail)", only(num(func(r *VariantResult) int { return r.Reconciler.TailReplayed }), g)),
			row("DynamoDB requests per batch", only(func(r *VariantResult) string { return fmt.Sprintf("%.2f", r.DDB.RequestsPerBatch) }, g)),
			row("DynamoDB write units per record", only(func(r *VariantResult) string { return fmt.Sprintf("%.3f", r.DDB.WCUPerRecord) }, g)))
	}
	if res.ForgedParked != nil { // only when the fault ran
		out = append(out, row("forged parked messages: sent / refused / applied", only(func(r *VariantResult) string {
			return r.ForgedParked.cell()
		}, g)))
	}
	out = append(out,
		same("invocations", func(r *VariantResult) int { return r.Mapping.Invocations }),
		row("seconds", func(r *VariantResult) string { return fmt.Sprintf("%.0f", r.Seconds) }),
	)
	return out
}

// handler is the variant's handler decisions (zero when it has none).
func (r *VariantResult) handler() HandlerStats {
	if r.Handler == nil {
		return HandlerStats{}
	}
	return *r.Handler
}

// header is the table's first row: an empty label, then the variants' titles.
func header(res *Result) []string {
	out := []string{""}
	for _, v := range res.ran() {
		out = append(out, columnTitle[v.Name])
	}
	return out
}

// Table is the side-by-side table as plain text (the CLI prints it on stdout).
func Table(res *Result) string {
	rs := append([][]string{header(res)}, rows(res)...)
	if dup := duplicateRows(res); len(dup) > 0 {
		rs = append(rs, append([]string{"duplicates by cause:"}, make([]string, len(rs[0])-1)...))
		rs = append(rs, dup...)
	}
	widths := make([]int, len(rs[0]))
	for _, r := range rs {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rs {
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
	if z := zeroCauses(res); len(z) > 0 {
		fmt.Fprintf(&b, "  (0 everywhere: %s)\n", strings.Join(z, ", "))
	}
	if f := res.ForgedParked; f != nil {
		fmt.Fprintf(&b, "\nforged parked messages: %s\n", f.Line())
	}
	if l := expireLine(res); l != "" {
		fmt.Fprintf(&b, "\nexpire: %s\n", l)
	}
	fmt.Fprintf(&b, "\nreport: %s\n", filepath.Join(res.ReportDir, "report.md"))
	return b.String()
}

// Markdown is the report.
func Markdown(res *Result) string {
	var b strings.Builder
	g := res.Gapless
	verdict := "**gapless lost nothing**"
	if g == nil {
		verdict = "**gapless did not run**"
	}
	if !res.OK() {
		verdict = "**gapless FAILED**: "
		switch {
		case res.Incomplete && res.Lost == 0 && g != nil:
			verdict = fmt.Sprintf("**gapless INCOMPLETE**: the run ended with %d records not yet accounted for (%s); none is known lost",
				res.Pending, pendingSummary(g.PendingWhere))
		case res.Lost > 0:
			verdict += fmt.Sprintf("%d records lost", res.Lost)
		case !res.Verified:
			verdict += "the reconciler had not verified every shard when the run ended"
		case !res.ForgedParked.OK():
			verdict += "the forged parked messages were not all refused: " + res.ForgedParked.Line()
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
	mdRows(&b, header(res), rows(res))
	if f := res.ForgedParked; f != nil {
		fmt.Fprintf(&b, "\nForged parked messages (--forge-parked): %s.\n", f.Line())
	}
	if l := expireLine(res); l != "" {
		fmt.Fprintf(&b, "\nStream retention (--expire): %s\n", l)
	}
	b.WriteString("\n*lost* = produced − delivered (unique ids at the target queue) − parked (records not delivered whose " +
		"exact payload is in the parked queue). The mapping alone loses what it gives up (retries exhausted: its " +
		"on-failure destination gets metadata only) and every poison record. Checkpoint decides (the field report's " +
		"consumer) also drops records at or below a shared checkpoint that another batch of the shard moved past them, " +
		"and the failed records of a batch whose compare-and-replace lost. gapless parks poison records with their " +
		"payload and replays every range the mapping gave up. *pending* = neither delivered nor parked when " +
		"the run ended before the reconciler had verified every shard, or past the checkpoint mirror: not known " +
		"lost, and the run says INCOMPLETE.\n\n")
	if f := res.MappingAloneLossInGapless; f != nil {
		fmt.Fprintf(&b, "**The same records, not relabelled:** %s (by record id: both variants produce the same "+
			"records from the seed; `mapping_alone_loss_in_gapless` in result.json).\n\n", f.Line())
	}
	if g := res.Gapless; g != nil {
		fmt.Fprintf(&b, "*parked* (%d) counts records: not delivered, their exact payload in the parked queue. "+
			"`parked_messages` (%d) counts the queue's messages: a record parked twice (by the consumer and by a "+
			"reconciler replay) is two messages, a parked record that was also delivered counts in "+
			"`parked_and_delivered` (%d), and a message without its record's exact payload counts in "+
			"`parked_bad_payload` (%d) and as nothing else.\n\n", g.Parked, g.ParkedMessages, g.ParkedAndDelivered, g.ParkedBadPayload)
	}
	for _, v := range res.ran() {
		safetySection(&b, v)
	}
	b.WriteString("![delivered, parked, lost and duplicated per variant](outcome.svg)\n\n")
	if dup := duplicateRows(res); len(dup) > 0 {
		b.WriteString("## Duplicates by cause\n\nEach delivery of a record after its first, attributed from what the run " +
			"recorded: which function's SQS proxy forwarded it (consumer of the first mapping, of the racing mapping, or " +
			"the reconciler), the SDK's invocation id of the send (a retried send), and how the mapping's invocation " +
			"that delivered the earlier copy ended (timed out, failed its ledger write, partial failure).\n\n")
		mdRows(&b, header(res), dup)
		if z := zeroCauses(res); len(z) > 0 {
			fmt.Fprintf(&b, "\nNo variant had duplicates from: %s.\n", strings.Join(z, ", "))
		}
		b.WriteString("\n")
	}

	cols := res.ran()
	table := func(title string) {
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		head := header(res)
		head[0] = " "
		b.WriteString("|" + strings.Join(head, " | ") + " |\n|---|" + strings.Repeat("---:|", len(head)-1) + "\n")
	}
	fault := func(label string, f func(*VariantResult) string) {
		cells := []string{label}
		for _, v := range cols {
			cells = append(cells, f(v))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	itoa := func(n int64) string { return fmt.Sprint(n) }
	table("Faults injected")
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
	if g != nil && g.Faults.KillNote != "" {
		fmt.Fprintf(&b, "\nKill: %s.\n", g.Faults.KillNote)
	}
	if res.Runtime == RuntimeRIE {
		b.WriteString("\nUnder the emulator the in-function faults are read back from the bootstraps' shared chaos " +
			"state (internal/local/chaos StateStats).\n")
	}

	if killersProduced(res) {
		b.WriteString(killerSection(res))
	}

	table("Event-source mapping")
	mrow := func(label string, f func(MappingStats) int) {
		fault(label, func(r *VariantResult) string { return fmt.Sprint(f(r.Mapping)) })
	}
	mrow("invocations", func(m MappingStats) int { return m.Invocations })
	mrow("function errors (timeouts included)", func(m MappingStats) int { return m.FunctionErrors })
	mrow("partial batch failures", func(m MappingStats) int { return m.PartialFailures })
	mrow("bisections", func(m MappingStats) int { return m.Bisections })
	mrow("batches given up (on-failure messages)", func(m MappingStats) int { return m.RetriesExhausted + m.RecordAgeExceeded })
	mrow("records given up", func(m MappingStats) int { return m.RecordsGivenUp })
	mrow("on-failure messages not delivered (DestinationDeliveryFailures)", func(m MappingStats) int { return m.DestinationDeliveryFailures })

	if c := res.CheckpointDecides; c != nil && c.Handler != nil {
		h := c.Handler
		fmt.Fprintf(&b, "\n## Checkpoint decides: what the handler decided\n\n- records received: %d; processed: %d; failed: %d\n"+
			"- dropped as at or below the shared checkpoint (\"processed by the other consumer\"): %d\n"+
			"- batches whose compare-and-replace lost (rest of the batch skipped): %d, leaving %d failed records unretried\n"+
			"- lost: %d records, none of them given up by the mapping: the handler reported them done\n",
			h.Received, h.Processed, h.Failed, h.Filtered, h.RacesLost, h.Abandoned, c.Lost)
	}

	if g != nil {
		r := g.Reconciler
		fmt.Fprintf(&b, "\n## Reconciler (gapless)\n\n- scheduled passes: %d (%d failed)\n- failure-queue invocations: %d "+
			"(%d messages received, %d accounted for and deleted, %d retried)\n- invocations whose runtime died (the demo's "+
			"kill, crash killers): %d\n"+
			"- records replayed (distinct records the reconciler delivered): %d; parked by the reconciler: %d\n"+
			"- the GapsDetected and GapsReplayed metrics, summed over every pass: %d and %d. They count detections, not "+
			"records: a pass counts every record it finds missing from the ledger, so a record that keeps failing (a killer, "+
			"and the records a pass could not finish because of it) counts again on every pass until it is parked; a pass "+
			"whose runtime died records nothing for the shard it was on\n"+
			"- spans lost to retention: %d\n- records the stream trimmed that the reconciler replayed afterwards, from the "+
			"mapping's S3 on-failure objects (--expire, --on-failure s3): %d\n- checkpoint mirror writes: %d\n- every shard verified "+
			"(watermark at the checkpoint mirror, closed shards to their end) before the run ended: %v\n",
			r.ScheduledRuns, r.ScheduledErrors, r.FailureInvocations, r.FailureMessages, r.FailureDeleted, r.FailureRetried,
			r.Crashes, g.ReconcilerReplayed, g.ReconcilerParked, g.GapsDetected, g.GapsReplayed, r.LostToRetention, g.ReplayedAfterTrim, r.CheckpointWrites, g.Verified)

		b.WriteString("\n## DynamoDB (gapless)\n\nRequests counted at the fault proxies (faulted requests and SDK retries included); " +
			"write units computed from the bodies of the requests that reached DynamoDB with internal/local/ddbmeter's size rules.\n\n" +
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
	}

	b.WriteString("\n## Timelines per shard\n\nRecords produced (grey) and the checkpoint (blue: gapless's mirror; for the " +
		"other variants the mapping's slowest lane), gapless's verified watermark (green); a red × is a record lost, an " +
		"orange ○ a record parked, on the produced line where production reached it; dashed lines mark the split and the " +
		"racing mapping's start.\n\n")
	for _, v := range cols {
		fmt.Fprintf(&b, "![%s](%s/chart.svg)\n\n", columnTitle[v.Name], v.Name)
	}

	b.WriteString("## Memory (RSS)\n\n")
	rssSummary(&b, cols, res.FullReport)
	b.WriteString(processLegend)
	for _, vr := range cols {
		if len(vr.LostRecords) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## Lost by %s (first %d of %d)\n\n| id | partition key | shard | sequence number |", columnTitle[vr.Name], len(vr.LostRecords), vr.Lost)
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
	b.WriteString("\nFiles: `result.json` (everything above), `outcome.svg`, `<variant>/chart.svg`, `<variant>/timeline.json`, " +
		"`<variant>/functions.log` (`runtime.log` under the emulator).")
	if res.FullReport {
		b.WriteString(" `sdk.log`, `stack/logs/` (emulators).")
	} else {
		b.WriteString(" The SDK log and the emulators' logs are kept with `--full-report`.")
	}
	b.WriteString("\n")
	return b.String()
}

// rssSummary writes the memory table: with full, every process; otherwise one row per kind of
// process and variant (how many, and the range of their first, steady and last samples).
func rssSummary(b *strings.Builder, vs []*VariantResult, full bool) {
	if full {
		b.WriteString("| variant | process | pid | first | steady | last | max | observed | flat |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, vr := range vs {
			for _, p := range vr.Processes {
				fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %.0fs | %v |\n", vr.Name, p.Name, p.PID,
					mb(p.FirstKB), mb(p.SteadyKB), mb(p.LastKB), mb(p.MaxKB), p.Seconds, p.Flat)
			}
		}
		return
	}
	b.WriteString("Per variant and kind of process (every process: `--full-report`, or `processes` in result.json).\n\n" +
		"| variant | process | count | first | steady | last | max | all flat |\n|---|---|---:|---|---|---|---:|---|\n")
	type agg struct {
		n                   int
		first, steady, last [2]int64
		max                 int64
		flat                bool
	}
	span := func(r [2]int64) string {
		if r[0] == r[1] {
			return mb(r[0])
		}
		return mb(r[0]) + "–" + mb(r[1])
	}
	for _, vr := range vs {
		by := map[string]*agg{}
		var names []string
		for _, p := range vr.Processes {
			a := by[p.Name]
			if a == nil {
				a = &agg{first: [2]int64{p.FirstKB, p.FirstKB}, steady: [2]int64{p.SteadyKB, p.SteadyKB}, last: [2]int64{p.LastKB, p.LastKB}, flat: true}
				by[p.Name] = a
				names = append(names, p.Name)
			}
			a.n++
			for _, x := range []struct {
				r *[2]int64
				v int64
			}{{&a.first, p.FirstKB}, {&a.steady, p.SteadyKB}, {&a.last, p.LastKB}} {
				x.r[0], x.r[1] = min(x.r[0], x.v), max(x.r[1], x.v)
			}
			a.max = max(a.max, p.MaxKB)
			a.flat = a.flat && p.Flat
		}
		sort.Strings(names)
		for _, n := range names {
			a := by[n]
			fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %v |\n", vr.Name, n, a.n, span(a.first), span(a.steady), span(a.last), mb(a.max), a.flat)
		}
	}
}

// processLegend says what the memory table's processes are (/proc gives their names, cut to
// 15 characters).
const processLegend = "\nProcesses: `gapless` is this demo (the mappings, proxies, meters and bookkeeping); `node` the " +
	"npm emulators (kinesis-local, and dynalite and fauxqs unless `--backend moto`); `aws-lambda-rie-` the Lambda runtime " +
	"interface emulator (one per mapping lane and reconciler trigger; /proc cuts the name); `bootstrap` the consumer and " +
	"reconciler functions it runs.\n"

// mdRows writes a markdown table: the header, then the rows, numbers right-aligned.
func mdRows(b *strings.Builder, head []string, rs [][]string) {
	b.WriteString("|" + strings.Join(head, " | ") + " |\n|---|" + strings.Repeat("---:|", len(head)-1) + "\n")
	for _, r := range rs {
		cells := append([]string{strings.TrimSpace(r[0])}, r[1:]...)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
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
	shard string // only on this shard's panel ("": every panel)
}

// Chart draws the timeline as an SVG: one panel per shard, time across, records up; produced
// (grey), the checkpoint (blue: gapless's mirror, or the mapping alone's slowest lane) and, for
// gapless, the verified watermark (green).
func Chart(name string, tl []Sample, gapless bool, marks []chartMark, ticks map[string][]chartTick) string {
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
		ml, mt = 48, 40   // margins inside a panel (the top one holds the shard's name and the marks' labels)
		mr, mb = 12, 28
		top    = 44
	)
	rowsN := (len(shards) + cols - 1) / cols
	width, height := cols*pw, top+max(rowsN, 1)*ph
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	title := name + ": produced vs. the mapping's slowest lane's checkpoint, per shard"
	if gapless {
		title = name + ": produced vs. checkpoint mirror vs. verified watermark, per shard"
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
	nLost, nParked := 0, 0
	for _, ts := range ticks {
		for _, t := range ts {
			if t.parked {
				nParked++
			} else {
				nLost++
			}
		}
	}
	lx := 10 + len(legend)*150
	fmt.Fprintf(&b, `<path d="M%d,27 l8,10 M%d,37 l8,-10" stroke="#d62728" stroke-width="2.5"/><text x="%d" y="36" fill="#d62728" font-weight="bold">lost (%d)</text>`+"\n", lx, lx, lx+14, nLost)
	fmt.Fprintf(&b, `<circle cx="%d" cy="32" r="4" fill="none" stroke="#ff7f0e" stroke-width="2"/><text x="%d" y="36" fill="#ff7f0e">parked (%d)</text>`+"\n", lx+110, lx+118, nParked)
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
		px := func(at time.Duration) float64 { return float64(x0) + float64(w)*at.Seconds()/end.Seconds() }
		// Time ticks at a round step, and the end of the run at the right edge.
		step, endLabel := timeStep(end), secs(end)
		for at := time.Duration(0); at < end; at += step {
			// A tick's label is centred on it, the end's label ends at the right edge: keep a clear
			// space between them.
			if at > 0 && px(end)-px(at) < 6.5*float64(len(endLabel)+len(secs(at)))+10 {
				break // too close to the end's label
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#cccccc"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
				px(at), y0+h, px(at), y0+h+3, px(at), y0+h+14, secs(at))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0+w, y0+h+14, endLabel)
		py := func(n int) float64 { return float64(y0+h) - float64(h)*float64(n)/float64(ymax) }
		var here []chartMark
		for _, m := range marks {
			if m.shard == "" || m.shard == id {
				here = append(here, m)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4,3"/>`+"\n", px(m.at), y0, px(m.at), y0+h)
			}
		}
		// The marks' labels go above the panel, clear of the lines, one text per group of marks
		// too close for their labels to sit apart.
		for _, l := range markLabels(here, px, float64(x0+w)) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d62728"%s>%s</text>`+"\n", l.x, y0-4, l.anchor, html.EscapeString(l.text))
		}
		line := func(color string, width float64, get func(ShardSample) int) {
			var pts []string
			before, first := time.Duration(-1), true
			for _, s := range tl {
				ss, ok := s.Shards[id]
				if !ok {
					before = s.At
					continue
				}
				if first && before >= 0 {
					// A shard born during the run (a split's child) starts from 0.
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(before), py(0)))
				}
				first = false
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
		// Lost and parked records, on the produced line at the time it reached them.
		lostHere := 0
		for _, t := range ticks[id] {
			// On the produced line: between the samples before and after production reached it.
			at, prevAt, prevN, seen := end, time.Duration(0), 0, false
			for _, s := range tl {
				ss, ok := s.Shards[id]
				if !ok {
					prevAt, prevN, seen = s.At, 0, true // the shard did not exist yet: 0 produced
					continue
				}
				if ss.Produced >= t.pos {
					at = s.At
					if seen && ss.Produced > prevN && prevAt < s.At {
						at = prevAt + time.Duration(float64(s.At-prevAt)*float64(t.pos-prevN)/float64(ss.Produced-prevN))
					}
					break
				}
				prevAt, prevN, seen = s.At, ss.Produced, true
			}
			x, y := px(at), py(t.pos)
			if t.parked {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="none" stroke="#ff7f0e" stroke-width="2"/>`+"\n", x, y)
				continue
			}
			lostHere++
			fmt.Fprintf(&b, `<path d="M%.1f,%.1f l8,8 M%.1f,%.1f l8,-8" stroke="#d62728" stroke-width="2"/>`+"\n", x-4, y-4, x-4, y+4)
		}
		if lostHere > 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#d62728" font-weight="bold">%d lost</text>`+"\n", x0+w, oy+16, lostHere)
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// timeStep is a round step for the time axis of a run lasting end: at most about six ticks.
func timeStep(end time.Duration) time.Duration {
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600} {
		if step := time.Duration(s) * time.Second; end/step <= 6 {
			return step
		}
	}
	return end
}

// secs shows a time on the chart's axis ("45s", "2m30s").
func secs(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return fmt.Sprintf("%.0fs", d.Seconds())
	}
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
}

// markLabel is one label of the marks above a panel.
type markLabel struct {
	x      float64
	anchor string // "" (start) or ` text-anchor="end"`
	text   string
}

// markLabels lays the labels of a panel's marks out on one line above it, left to right: a
// label starts at its mark, or ends at the panel's right edge when it would pass it; when it
// would then overlap the label before it, the two join ("2nd mapping, split"). Widths are
// estimated (font size 11: about 6.5 px a character).
func markLabels(marks []chartMark, px func(time.Duration) float64, right float64) []markLabel {
	ms := slices.Clone(marks)
	slices.SortStableFunc(ms, func(a, b chartMark) int { return cmp.Compare(a.at, b.at) })
	const charW, gap = 6.5, 6
	width := func(text string) float64 { return charW * float64(utf8.RuneCountInString(text)) }
	// place puts text at its mark's x, or against the right edge; it returns where it starts.
	place := func(l *markLabel, markX float64) float64 {
		l.x, l.anchor = markX, ""
		if markX+width(l.text) > right {
			l.x, l.anchor = right, ` text-anchor="end"`
			return right - width(l.text)
		}
		return markX
	}
	var out []markLabel
	var starts, markXs []float64
	for _, m := range ms {
		x := px(m.at) + 3
		l := markLabel{text: m.label}
		start := place(&l, x)
		if n := len(out); n > 0 && start < starts[n-1]+width(out[n-1].text)+gap {
			out[n-1].text += ", " + m.label
			starts[n-1] = place(&out[n-1], markXs[n-1])
			continue
		}
		out, starts, markXs = append(out, l), append(starts, start), append(markXs, x)
	}
	return out
}

// reportBinDir holds the bootstraps the demo built, inside the report directory.
const reportBinDir = "bin"

// pruneReport removes what a reader does not need from a finished report directory (kept with
// --full-report): the bootstraps, the SDK log, the emulators' logs and the chaos state.
func pruneReport(dir string) {
	for _, p := range []string{reportBinDir, "sdk.log", "stack"} {
		_ = os.RemoveAll(filepath.Join(dir, p))
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*", "chaos-state"))
	for _, m := range matches {
		_ = os.RemoveAll(m)
	}
}

// writeOutcomeChart writes outcome.svg: per variant, records delivered, parked, lost and
// duplicate deliveries.
func writeOutcomeChart(res *Result) error {
	svg := OutcomeChart(res.ran())
	if err := os.WriteFile(filepath.Join(res.ReportDir, "outcome.svg"), []byte(svg), 0o644); err != nil {
		return fmt.Errorf("demo: write outcome chart: %w", err)
	}
	return nil
}

// OutcomeChart draws one panel per figure (delivered, parked, lost, duplicate deliveries), a
// bar per variant in each, every bar labelled with its number: each panel has its own scale,
// so 7 lost records are as visible as 4,493 delivered ones.
func OutcomeChart(vs []*VariantResult) string {
	type metric struct {
		title, color string
		get          func(*VariantResult) int
	}
	metrics := []metric{
		{"delivered (unique)", "#2ca02c", func(r *VariantResult) int { return r.DeliveredUnique }},
		{"parked with payload", "#ff7f0e", func(r *VariantResult) int { return r.Parked }},
		{"LOST", "#d62728", func(r *VariantResult) int { return r.Lost }},
		{"duplicate deliveries", "#7f7f7f", func(r *VariantResult) int { return r.Duplicates }},
	}
	subtitle := "each panel has its own scale; lost = produced − delivered − parked"
	if slices.ContainsFunc(vs, func(r *VariantResult) bool { return r.LostToRetention > 0 || r.ReplayedAfterTrim > 0 }) {
		// --expire: the records the stream trimmed before anyone delivered them are counted apart.
		metrics = slices.Insert(metrics, 3, metric{"lost to retention", "#8c564b", func(r *VariantResult) int { return r.LostToRetention }})
		subtitle = "each panel has its own scale; lost = produced − delivered − parked − lost to retention"
	}
	// The mapping alone's losses are gapless's parked records, by id: said on the chart, so
	// that no one reads the parked bar as the lost one relabelled.
	var same string
	if i, j := slices.IndexFunc(vs, func(r *VariantResult) bool { return r.Name == VariantBaseline }),
		slices.IndexFunc(vs, func(r *VariantResult) bool { return r.Name == VariantGapless }); i >= 0 && j >= 0 {
		same = lossFates(vs[i], vs[j]).Line()
	}
	top := 60
	if same != "" {
		top += 18
	}
	const (
		pw, barH, gap, labelW = 300, 22, 8, 170
	)
	ph := 40 + len(vs)*(barH+gap)
	width, height := labelW+len(metrics)*pw, top+ph+30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	produced := 0
	if len(vs) > 0 {
		produced = vs[0].Produced
	}
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">What became of the %d records produced, per variant</text>`+"\n", produced)
	fmt.Fprintf(&b, `<text x="10" y="42" fill="#555">%s</text>`+"\n", subtitle)
	if same != "" {
		fmt.Fprintf(&b, `<text x="10" y="60" fill="#ff7f0e" font-weight="bold">%s</text>`+"\n", html.EscapeString(same))
	}
	for i, v := range vs {
		y := top + 30 + i*(barH+gap)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-weight="bold">%s</text>`+"\n", labelW-8, y+barH/2+4, html.EscapeString(columnTitle[v.Name]))
	}
	for k, m := range metrics {
		ox := labelW + k*pw
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold" fill="%s">%s</text>`+"\n", ox+4, top+16, m.color, html.EscapeString(m.title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#cccccc"/>`+"\n", ox, top+24, ox, top+ph)
		mx := 1
		for _, v := range vs {
			mx = max(mx, m.get(v))
		}
		for i, v := range vs {
			n := m.get(v)
			y := top + 30 + i*(barH+gap)
			w := float64(pw-80) * float64(n) / float64(mx)
			if n > 0 && w < 2 {
				w = 2
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", ox, y, w, barH, m.color)
			weight := "normal"
			if m.title == "LOST" && n > 0 {
				weight = "bold"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-weight="%s">%d</text>`+"\n", float64(ox)+w+5, y+barH/2+4, weight, n)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// chartTick marks a record on a shard's timeline: lost (red) or parked (orange), at the time
// its shard's production reached it.
type chartTick struct {
	pos    int // 1-based position of the record in its shard
	parked bool
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
		"attempt (`--crash`, `--hang`; chosen by the seed and the record's id, the same records in every variant). No " +
		"invocation holding one ever returns an outcome.\n\n")
	// The variants that ran whose killers' fates are tracked (checkpoint decides may drop a
	// killer as at or below its checkpoint, a fate this table does not have).
	var cols []*VariantResult
	for _, r := range []*VariantResult{res.Baseline, res.Gapless} {
		if r != nil {
			cols = append(cols, r)
		}
	}
	b.WriteString("| fate |")
	for _, r := range cols {
		b.WriteString(" " + columnTitle[r.Name] + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
	line := func(label string, f func(KillerStats) int) {
		b.WriteString("| " + label + " |")
		for _, r := range cols {
			fmt.Fprintf(&b, " %d |", f(r.Killers))
		}
		b.WriteString("\n")
	}
	line("produced", KillerStats.Produced)
	line("delivered", func(k KillerStats) int { return k.Delivered })
	line("parked with their payload", func(k KillerStats) int { return k.Parked })
	line("  of which by the consumer (isolated under the mapping's retries)", func(k KillerStats) int { return k.ParkedByConsumer })
	line("  of which by the reconciler (after the mapping gave up)", func(k KillerStats) int { return k.ParkedByReconciler })
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

// pendingSummary lists where pending records are, most first.
func pendingSummary(where map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range where {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprintf("%d %s", e.n, e.k)
	}
	return strings.Join(parts, "; ")
}

// safetySection is the report's "time to safety" paragraph for one variant.
func safetySection(b *strings.Builder, r *VariantResult) {
	st := r.Safety
	if st.Records == 0 {
		return
	}
	fmt.Fprintf(b, "### Time to safety: %s\n\nProduced → delivered or parked, over %d records: p50 %.1f s, p99 %.1f s, max %.1f s.\n\n",
		r.Name, st.Records, st.P50Seconds, st.P99Seconds, st.MaxSeconds)
	causes := make([]string, 0, len(st.ByCause))
	for c := range st.ByCause {
		causes = append(causes, c)
	}
	sort.Slice(causes, func(i, j int) bool { return st.ByCause[causes[i]].MaxSeconds > st.ByCause[causes[j]].MaxSeconds })
	b.WriteString("| cause | records | slowest |\n|---|---:|---:|\n")
	for _, c := range causes {
		fmt.Fprintf(b, "| %s | %d | %.1f s |\n", c, st.ByCause[c].Records, st.ByCause[c].MaxSeconds)
	}
	b.WriteString("\nSlowest records:\n\n| record | shard | seconds | cause |\n|---|---|---:|---|\n")
	for _, s := range st.Slowest {
		fmt.Fprintf(b, "| %s | %s | %.1f | %s |\n", s.ID, s.ShardID, s.Seconds, s.Cause)
	}
	b.WriteString("\n")
	if r.Pending > 0 {
		fmt.Fprintf(b, "Not in these figures: %d records still pending when the run ended (%s).\n\n", r.Pending, pendingSummary(r.PendingWhere))
	}
}

// expireLine says what --expire did to gapless's run ("" without it): what the stream trimmed,
// and of that what the reconciler replayed from the mapping's S3 on-failure objects afterwards
// and what was lost to retention.
func expireLine(res *Result) string {
	g, st := res.Gapless, res.Settings
	if !st.Faults.Expire || g == nil {
		return ""
	}
	var how string
	switch {
	case st.OnFailure == OnFailureS3:
		how = "the S3 destination's objects hold their data"
	default:
		how = "the SQS destination's messages carry metadata only"
	}
	return fmt.Sprintf("retention %s, MaximumRecordAge %s, on-failure %s, %s throttled: gapless's mapping gave up %d batches for their age "+
		"(%d on-failure deliveries failed), the stream trimmed %d records (every shard's first 10 s, most of them delivered before), "+
		"the reconciler (down until then) replayed %d of them from the mapping's on-failure objects after the trim, and %d were lost to retention (%s; LostToRetention spans counted: %d).",
		st.Retention, recordAge(st.MaxRecordAge), st.OnFailure, g.HeldShard, g.Mapping.RecordAgeExceeded, g.Mapping.DestinationDeliveryFailures,
		g.Trimmed, g.ReplayedAfterTrim, g.LostToRetention, how, g.Reconciler.LostToRetention)
}
