package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
)

func timeline() []Sample {
	return []Sample{
		{At: 0, Shards: map[string]ShardSample{"shardId-000000000000": {}, "shardId-000000000001": {}}},
		{At: time.Second, Shards: map[string]ShardSample{"shardId-000000000000": {Produced: 50, Checkpoint: 20}, "shardId-000000000001": {Produced: 40, Checkpoint: 40, Watermark: 10}}},
		{At: 2 * time.Second, Shards: map[string]ShardSample{"shardId-000000000000": {Produced: 100, Checkpoint: 100, Watermark: 100}, "shardId-000000000001": {Produced: 80, Checkpoint: 80, Watermark: 80}}},
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		tl        []Sample
		gapless   bool
		marks     []chartMark
		ticks     map[string][]chartTick
		polylines int
		contains  []string
	}{
		{name: "gapless: three lines per shard", tl: timeline(), gapless: true, marks: []chartMark{{time.Second, "split <&>", ""}},
			polylines: 6, contains: []string{"shardId-000000000000", "shardId-000000000001", "verified watermark", "split &lt;&amp;&gt;", "2s", "lost (0)"}},
		{name: "a mark for one shard", tl: timeline(), polylines: 4, marks: []chartMark{{time.Second, "2nd mapping", "shardId-000000000001"}},
			contains: []string{"2nd mapping"}},
		{name: "lost and parked records are marked", tl: timeline(), polylines: 4,
			ticks:    map[string][]chartTick{"shardId-000000000000": {{pos: 30}, {pos: 60}, {pos: 70, parked: true}}},
			contains: []string{"lost (2)", "parked (1)", ">2 lost</text>", "<circle"}},
		{name: "mapping alone: no watermark", tl: timeline(), polylines: 4, contains: []string{"slowest lane"}},
		{name: "no samples", tl: nil, gapless: true, polylines: 0, contains: []string{"no samples"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svg := Chart("v", tt.tl, tt.gapless, tt.marks, tt.ticks)
			dec := xml.NewDecoder(strings.NewReader(svg))
			polylines := 0
			for {
				tok, err := dec.Token()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("not well-formed XML: %v\n%s", err, svg)
				}
				if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
					polylines++
					for _, a := range se.Attr {
						if a.Name.Local == "points" && len(strings.Fields(a.Value)) != len(tt.tl) {
							t.Errorf("polyline has %d points, want %d", len(strings.Fields(a.Value)), len(tt.tl))
						}
					}
				}
			}
			if n := strings.Count(svg, ">2nd mapping<"); len(tt.marks) > 0 && tt.marks[0].shard != "" && n != 1 {
				t.Errorf("a one-shard mark is drawn %d times", n)
			}
			if polylines != tt.polylines {
				t.Errorf("%d polylines, want %d", polylines, tt.polylines)
			}
			for _, s := range tt.contains {
				if !strings.Contains(svg, s) {
					t.Errorf("chart lacks %q", s)
				}
			}
		})
	}
}

func sampleResult() *Result {
	lost := 7
	g := &VariantResult{Name: VariantGapless, Produced: 4500, PoisonProduced: 7, DeliveredUnique: 4493, Duplicates: 835, Parked: 7,
		GapsDetected: 116, GapsReplayed: 93, ReconcilerReplayed: 90, ReconcilerParked: 2, Verified: true, Seconds: 75,
		Mapping: MappingStats{Invocations: 523, RecordsGivenUp: 110, Mappings: 2},
		DDB:     DDBStats{RequestsPerBatch: 2.8, WCUPerRecord: 0.216, Requests: map[string]int{"Query": 10, "PutItem": 9}}}
	b := &VariantResult{Name: VariantBaseline, Produced: 4500, PoisonProduced: 7, DeliveredUnique: 4493, Duplicates: 4388, Lost: 7,
		LostIDs: []string{"r-0000266"}, LostRecords: []LostRecord{{ID: "r-0000266", ShardID: "shardId-000000000001", Seq: "42"}}, Seconds: 27, Mapping: MappingStats{Invocations: 223, RecordsGivenUp: 370, Mappings: 2}}
	lostC := 40
	c := &VariantResult{Name: VariantCheckpointDecides, Produced: 4500, PoisonProduced: 7, DeliveredUnique: 4460, Duplicates: 3000, Lost: 40,
		LostIDs: []string{"r-0000300"}, LostRecords: []LostRecord{{ID: "r-0000300", ShardID: "shardId-000000000002", Seq: "43"}}, Seconds: 30,
		Mapping: MappingStats{Invocations: 230, Mappings: 2}, Handler: &HandlerStats{Received: 9000, Filtered: 33, RacesLost: 12, Abandoned: 7},
		DuplicatesByCause: map[string]int{"racing_mapping": 2000, "partial_failure_redelivery": 1000}}
	g.ParkedIDs = []string{"r-0000266"}
	g.DuplicatesByCause = map[string]int{"racing_mapping": 300, "timeout_after_processing": 500, "ledger_write_failed": 35}
	b.DuplicatesByCause = map[string]int{"racing_mapping": 1388, "partial_failure_redelivery": 3000}
	f := lossFates(b, g)
	return &Result{Produced: 4500, DeliveredUnique: 4493, Parked: 7, LostESMOnly: &lost, MappingAloneLossInGapless: &f, LostCheckpointDecides: &lostC, Verified: true,
		Runtime: RuntimeInProcess, Seed: 1, ReportDir: "/tmp/r", Gapless: g, Baseline: b, CheckpointDecides: c,
		Variants: AllVariants(), Settings: DefaultConfig().settings()}
}

func TestTableAndMarkdown(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	tab := Table(res)
	lines := strings.Split(tab, "\n")
	if !strings.Contains(lines[0], "mapping alone") || !strings.Contains(lines[0], "checkpoint decides") || !strings.Contains(lines[0], "gapless") {
		t.Fatalf("header: %q", lines[0])
	}
	want := map[string][]string{
		"LOST":                      {"7", "40", "0"},
		"parked (payload verified)": {"—", "—", "7"},
		"records the reconciler replayed / parked": {"—", "—", "90 / 2"},
		"duplicates delivered":                     {"4388", "3000", "835"},
		"  skipped as at/below the checkpoint":     {"—", "33", "—"},
		"  racing mapping":                         {"1388", "2000", "300"},
		"  retry after a failed ledger write":      {"0", "0", "35"},
	}
	for label, cells := range want {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, label+" ") })
		if i < 0 {
			t.Fatalf("no row %q in\n%s", label, tab)
		}
		f := strings.Fields(strings.TrimPrefix(lines[i], label))
		if got, w := strings.Join(f, " "), strings.Join(cells, " "); got != w {
			t.Errorf("row %q = %q, want %q", label, got, w)
		}
	}
	// Columns line up: every row has the same width.
	width := len([]rune(lines[0]))
	for _, l := range lines[1 : len(rows(res))+len(duplicateRows(res))+2] {
		if len([]rune(l)) != width {
			t.Errorf("row %q is %d wide, header %d", l, len([]rune(l)), width)
		}
	}
	md := Markdown(res)
	for _, s := range []string{"**gapless lost nothing**", "| LOST | 7 | 40 | 0 |", "gapless/chart.svg", "checkpoint-decides/chart.svg",
		"outcome.svg", "r-0000266", "r-0000300", "## Duplicates by cause", "| retry after a failed ledger write | 0 | 0 | 35 |",
		"dropped as at or below the shared checkpoint (\"processed by the other consumer\"): 33"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
	// Only the variants that ran get a column.
	two := *res
	two.CheckpointDecides, two.LostCheckpointDecides, two.Variants = nil, nil, []string{VariantBaseline, VariantGapless}
	if h := Table(&two); strings.Contains(h, "checkpoint decides") || !strings.Contains(strings.Split(h, "\n")[0], "mapping alone") {
		t.Errorf("two variants, table:\n%s", h)
	}
	res.Lost, res.Gapless.Lost = 2, 2
	if res.OK() || !strings.Contains(Markdown(res), "**gapless FAILED**: 2 records lost") {
		t.Error("a run that lost records is not reported as failed")
	}
	res.Lost, res.Gapless.Lost, res.Verified = 0, 0, false
	if res.OK() || !strings.Contains(Markdown(res), "had not verified every shard") {
		t.Error("an unverified run is not reported as failed")
	}
}

func TestDecodeParked(t *testing.T) {
	t.Parallel()
	v := &variant{expected: map[string][]byte{"r-0000001": []byte(`{"id":"r-0000001","key":"pk-0001","n":1,"poison":true}`)}}
	msg := func(data []byte) string {
		sum := sha256.Sum256(data)
		b, _ := json.Marshal(park.Message{Version: 2, RecordID: "shardId-000000000000:1:0", ShardID: "shardId-000000000000",
			Seq: "1", Group: "demo", Stream: "s", Data: data, DataBytes: len(data), DataSHA256: hex.EncodeToString(sum[:])})
		return string(b)
	}
	corrupt := strings.Replace(msg(v.expected["r-0000001"]), `"dataBytes":`, `"dataBytes":1`, 1)
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{name: "exact payload", body: msg(v.expected["r-0000001"]), ok: true},
		{name: "payload changed", body: msg([]byte(`{"id":"r-0000001","key":"pk-0001","n":2,"poison":true}`))},
		{name: "unknown id", body: msg([]byte(`{"id":"r-9"}`))},
		{name: "no payload (by reference)", body: msg(nil)},
		{name: "not a parked message", body: "hello"},
		{name: "checksum mismatch", body: corrupt},
	}
	bad := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, data, err := v.decodeParked(tt.body)
			if tt.ok {
				if err != nil || id != "r-0000001" || string(data) != string(v.expected[id]) {
					t.Fatalf("decodeParked = %q, %q, %v", id, data, err)
				}
				return
			}
			bad++
			if err == nil {
				t.Fatalf("decodeParked accepted %s", tt.body)
			}
		})
	}
	if got := v.parkBad.Load(); got != int64(bad) || v.parkMsgs.Load() != int64(len(tests)) {
		t.Fatalf("parkBad = %d, parkMsgs = %d; want %d, %d", got, v.parkMsgs.Load(), bad, len(tests))
	}
}

func TestPosition(t *testing.T) {
	t.Parallel()
	seqs := []string{"5", "10", "100", "1000"}
	for _, tt := range []struct {
		seq  string
		want int
	}{{"", 0}, {"4", 0}, {"5", 1}, {"99", 2}, {"100", 3}, {"99999", 4}} {
		if got := position(seqs, tt.seq); got != tt.want {
			t.Errorf("position(%q) = %d, want %d", tt.seq, got, tt.want)
		}
	}
}

func TestLaneOfSpreadsKeys(t *testing.T) {
	t.Parallel()
	counts := make([]int, 4)
	for i := range 400 {
		l := laneOf("pk-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), 4)
		counts[l]++
	}
	for l, n := range counts {
		if n == 0 {
			t.Fatalf("lane %d got no keys: %v", l, counts)
		}
	}
	if laneOf("anything", 1) != 0 {
		t.Fatal("one lane: laneOf must be 0")
	}
	if laneOf("k", 4) != laneOf("k", 4) {
		t.Fatal("laneOf is not a function of the key")
	}
}

func TestRSSOfChildren(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(context.Background(), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	var found bool
	for range 50 { // the child may need a moment to exec
		if slices.Contains(descendants(pidSelf()), pid) {
			if name, kb, ok := readStatus(pid); ok && name == "sleep" && kb > 0 {
				found = true
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !found {
		t.Fatalf("child %d (sleep) not found among descendants with an RSS", pid)
	}
	tr := newRSSTracker()
	tr.sample(0)
	tr.sample(time.Second) // within the interval: skipped
	tr.sample(10 * time.Second)
	var self, child *ProcessRSS
	rep := tr.report()
	for i := range rep {
		switch rep[i].PID {
		case pidSelf():
			self = &rep[i]
		case pid:
			child = &rep[i]
		}
	}
	if self == nil || child == nil {
		t.Fatalf("report lacks this process or the child: %+v", rep)
	}
	if child.Samples != 2 || child.Seconds != 10 || child.LastKB <= 0 || !child.Flat {
		t.Fatalf("child report %+v: want 2 samples over 10s, flat", *child)
	}
}

func pidSelf() int { return os.Getpid() }
