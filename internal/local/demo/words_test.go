package demo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// rowCells returns the cells of the table row labelled label ("" and false when there is none).
func rowCells(tab, label string) (string, bool) {
	for _, l := range strings.Split(tab, "\n") {
		if strings.HasPrefix(l, label+"  ") {
			return strings.Join(strings.Fields(strings.TrimPrefix(l, label)), " "), true
		}
	}
	return "", false
}

// The filter's and the retention's rows appear only in runs that had them: a row of zeros for
// a fault that was off makes a reader wonder what was filtered or expired.
func TestTableShowsFilterAndRetentionRowsOnlyWhenOn(t *testing.T) {
	t.Parallel()
	const filterRow, retentionRow = "filtered by --filter (not expected)", "lost to retention (records, --expire)"
	tests := []struct {
		name                 string
		set                  func(*Result)
		wantFilter, wantKeep bool
	}{
		{name: "neither", set: func(*Result) {}},
		{name: "--filter", set: func(r *Result) { r.Settings.Filter = `{"data": {"n": [1]}}` }, wantFilter: true},
		{name: "--expire", set: func(r *Result) { r.Settings.Faults.Expire = true }, wantKeep: true},
		{name: "records filtered without a filter setting (shown, not hidden)", set: func(r *Result) { r.Gapless.Filtered = 3 }, wantFilter: true},
		{name: "records lost to retention without --expire (shown, not hidden)", set: func(r *Result) { r.Baseline.LostToRetention = 5 }, wantKeep: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := sampleResult()
			tt.set(res)
			tab, md := Table(res), Markdown(res)
			for _, c := range []struct {
				label string
				want  bool
			}{{filterRow, tt.wantFilter}, {"  of which processed all the same", tt.wantFilter}, {retentionRow, tt.wantKeep}, {"  alarmed: LostToRetention spans", tt.wantKeep}} {
				if _, ok := rowCells(tab, c.label); ok != c.want {
					t.Errorf("table row %q shown: %v, want %v\n%s", c.label, ok, c.want, tab)
				}
				if got := strings.Contains(md, "| "+strings.TrimSpace(c.label)+" |"); got != c.want {
					t.Errorf("report row %q shown: %v, want %v", c.label, got, c.want)
				}
			}
		})
	}
}

// The reconciler's row counts records, not detections: the GapsDetected metric counts a
// record that keeps failing again on every pass (a killer: 243 detections of 15 records).
func TestReconcilerFiguresAreRecords(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	g := res.Gapless
	g.GapsDetected, g.GapsReplayed, g.ReconcilerReplayed, g.ReconcilerParked = 243, 14, 14, 1
	tab := Table(res)
	if got, _ := rowCells(tab, "records the reconciler replayed / parked"); got != "— — 14 / 1" {
		t.Errorf("reconciler row = %q, want the distinct records \"— — 14 / 1\"\n%s", got, tab)
	}
	if strings.Contains(tab, "243") || strings.Contains(tab, "gaps detected") {
		t.Errorf("the table shows the per-pass detections as if they were records:\n%s", tab)
	}
	md := Markdown(res)
	for _, s := range []string{
		"records replayed (distinct records the reconciler delivered): 14; parked by the reconciler: 1",
		"the GapsDetected and GapsReplayed metrics, summed over every pass: 243 and 14. They count detections, not records",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if regexp.MustCompile(`gaps detected: \d+`).MatchString(md) {
		t.Error("the report still calls the per-pass detections \"gaps detected\"")
	}
}

func TestDistinctSent(t *testing.T) {
	t.Parallel()
	sends := []send{
		{id: "r-1", source: sourceReconciler}, {id: "r-1", source: sourceReconciler}, // replayed again
		{id: "r-2", source: sourceReconciler}, {id: "r-3", source: sourceConsumer}, {id: "r-2", source: sourceConsumer},
	}
	for _, tt := range []struct {
		source string
		want   int
	}{{sourceReconciler, 2}, {sourceConsumer, 2}, {sourceRacer, 0}} {
		if got := distinctSent(sends, tt.source); got != tt.want {
			t.Errorf("distinctSent(%s) = %d, want %d", tt.source, got, tt.want)
		}
	}
}

// Only verified parked messages the reconciler sent count as parked by the reconciler, each
// record once.
func TestDecodeParkedCountsTheReconcilersParks(t *testing.T) {
	t.Parallel()
	payload := map[string][]byte{
		"r-0000001": []byte(`{"id":"r-0000001","key":"pk-0001","n":1}`),
		"r-0000002": []byte(`{"id":"r-0000002","key":"pk-0002","n":2}`),
	}
	v := &variant{expected: payload}
	msg := func(id, source string, data []byte) string {
		sum := sha256.Sum256(data)
		b, _ := json.Marshal(park.Message{Version: 2, RecordID: "shardId-000000000000:1:0", ShardID: "shardId-000000000000",
			Seq: "1", Group: "demo", Stream: "s", Source: source, Data: data, DataBytes: len(data), DataSHA256: hex.EncodeToString(sum[:])})
		return string(b)
	}
	for _, body := range []string{
		msg("r-0000001", pipeline.SourceReconciler, payload["r-0000001"]),
		msg("r-0000001", pipeline.SourceReconciler, payload["r-0000001"]), // parked twice: one record
		msg("r-0000002", pipeline.SourceConsumer, payload["r-0000002"]),
		msg("r-0000002", pipeline.SourceReconciler, []byte(`{"id":"r-0000002","key":"pk-0002","n":3}`)), // not its payload
	} {
		_, _, _ = v.decodeParked(body)
	}
	if got := v.parkedByReconciler.len(); got != 1 {
		t.Fatalf("parked by the reconciler: %d records, want 1", got)
	}
}

func TestDuplicateCausesNoneAreFoldedIntoOneLine(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	tab := Table(res)
	if _, ok := rowCells(tab, "  business key (written twice)"); ok {
		t.Errorf("a cause no variant had has a row of zeros:\n%s", tab)
	}
	if _, ok := rowCells(tab, "  racing mapping"); !ok {
		t.Errorf("a cause some variant had lost its row:\n%s", tab)
	}
	if !strings.Contains(tab, "(0 everywhere: ") || !strings.Contains(tab, "business key (written twice)") {
		t.Errorf("the causes no variant had are not named:\n%s", tab)
	}
	if strings.Contains(tab, "not attributed") {
		t.Errorf("\"not attributed\" is shown at 0:\n%s", tab)
	}
	if !strings.Contains(Markdown(res), "No variant had duplicates from: ") {
		t.Error("the report does not name the causes no variant had")
	}
}

func TestMarkLabelsDoNotOverlap(t *testing.T) {
	t.Parallel()
	px := func(at time.Duration) float64 { return 48 + 380*at.Seconds()/100 }
	const right = 428.0
	tests := []struct {
		name  string
		marks []chartMark
		want  []string
	}{
		{"far apart", []chartMark{{10 * time.Second, "2nd mapping", ""}, {60 * time.Second, "split", ""}}, []string{"2nd mapping", "split"}},
		{"close: joined", []chartMark{{12 * time.Second, "split", ""}, {10 * time.Second, "2nd mapping", ""}}, []string{"2nd mapping, split"}},
		{"at the right edge", []chartMark{{99 * time.Second, "2nd mapping", ""}}, []string{"2nd mapping"}},
		{"right edge pushes onto the one before", []chartMark{{90 * time.Second, "split", ""}, {99 * time.Second, "2nd mapping", ""}}, []string{"split, 2nd mapping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := markLabels(tt.marks, px, right)
			var got []string
			prevEnd := -1.0
			for _, l := range ls {
				got = append(got, l.text)
				w := 6.5 * float64(len([]rune(l.text)))
				start := l.x
				if l.anchor != "" {
					start = l.x - w
				}
				if start < prevEnd {
					t.Errorf("label %q starts at %.0f, before the one before ends (%.0f)", l.text, start, prevEnd)
				}
				if start+w > right+0.01 {
					t.Errorf("label %q runs past the panel (%.0f > %.0f)", l.text, start+w, right)
				}
				prevEnd = start + w
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("labels %q, want %q", got, tt.want)
			}
		})
	}
}

// A shard born during the run (a split's child) is drawn from 0 at the sample before it
// appeared, so a record lost on it sits on its line.
func TestChartChildShardStartsFromZero(t *testing.T) {
	t.Parallel()
	tl := []Sample{
		{At: 0, Shards: map[string]ShardSample{"shardId-000000000000": {}}},
		{At: time.Second, Shards: map[string]ShardSample{"shardId-000000000000": {Produced: 10}}},
		{At: 2 * time.Second, Shards: map[string]ShardSample{"shardId-000000000000": {Produced: 10}, "shardId-000000000001": {Produced: 20, Checkpoint: 20}}},
	}
	svg := Chart("v", tl, false, nil, map[string][]chartTick{"shardId-000000000001": {{pos: 10}}})
	// The child's panel: second column (x0 = 440+48), plot from y0 = 44+40 down h = 190-40-28.
	const x0, y0, h = 488.0, 84.0, 122.0
	w := 440.0 - 48 - 12
	re := regexp.MustCompile(`<polyline fill="none" stroke="#999999" stroke-width="3.0" points="([^"]*)"/>`)
	m := re.FindAllStringSubmatch(svg, -1)
	if len(m) != 2 {
		t.Fatalf("%d produced lines, want 2", len(m))
	}
	child := strings.Fields(m[1][1])
	if want := []string{fmtPt(x0+w/2, y0+h), fmtPt(x0+w, y0)}; !slices.Equal(child, want) {
		t.Errorf("child's produced line %q, want %q (from 0 at the sample before it appeared)", child, want)
	}
	// The lost record (10 of 20) is halfway along that segment.
	if want := `M` + fmtPt(x0+w*3/4-4, y0+h/2-4); !strings.Contains(svg, want) {
		t.Errorf("the lost record is not on the child's line (want a mark at %s)", want)
	}
}

func fmtPt(x, y float64) string { return fmt.Sprintf("%.1f,%.1f", x, y) }

// The time axis has round ticks, and none so close to the end's label that the two run
// together ("2m 2m18s").
func TestChartTimeAxis(t *testing.T) {
	t.Parallel()
	tl := []Sample{
		{At: 0, Shards: map[string]ShardSample{"shardId-000000000000": {}}},
		{At: 138 * time.Second, Shards: map[string]ShardSample{"shardId-000000000000": {Produced: 10}}},
	}
	svg := Chart("v", tl, false, nil, nil)
	for _, l := range []string{">0s<", ">30s<", ">1m<", ">1m30s<", ">2m18s<"} {
		if !strings.Contains(svg, l) {
			t.Errorf("time axis lacks %s", l)
		}
	}
	if strings.Contains(svg, ">2m<") {
		t.Error("a tick label runs into the end's label (2m next to 2m18s)")
	}
	for d, want := range map[time.Duration]string{0: "0s", 45 * time.Second: "45s", 2 * time.Minute: "2m", 150 * time.Second: "2m30s",
		61 * time.Minute: "61m", 90*time.Second + 400*time.Millisecond: "1m30s"} {
		if got := secs(d); got != want {
			t.Errorf("secs(%s) = %q, want %q", d, got, want)
		}
	}
}

// The memory table's process names are /proc's (cut to 15 characters): the report says what
// each is.
func TestMemoryTableSaysWhatEachProcessIs(t *testing.T) {
	t.Parallel()
	md := Markdown(sampleResult())
	for _, s := range []string{"`gapless` is this demo", "`node` the npm emulators", "`aws-lambda-rie-` the Lambda runtime interface emulator", "`bootstrap` the consumer"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}
