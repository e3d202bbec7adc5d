package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkWords checks what a reader of a finished run sees against what the run did (called by
// the end-to-end tests on their result, so no extra run): no filter or retention rows in a run
// without --filter or --expire (and the retention row with --expire), and the reconciler's figures in records — the distinct records
// it delivered and parked, which no more than the records produced can be — in the table and
// in result.json.
func checkWords(t *testing.T, res *Result) {
	t.Helper()
	tab := Table(res)
	if res.Settings.Filter == "" && strings.Contains(tab, "--filter") {
		t.Errorf("the table of a run without --filter shows filter rows:\n%s", tab)
	}
	if !res.Settings.Faults.Expire && res.LostToRetention == 0 && strings.Contains(tab, "--expire") {
		t.Errorf("the table of a run without --expire shows retention rows:\n%s", tab)
	}
	if _, ok := rowCells(tab, "lost to retention (records, --expire)"); res.Settings.Faults.Expire && !ok {
		t.Errorf("the table of a run with --expire lacks the retention row:\n%s", tab)
	}
	g := res.Gapless
	if g == nil {
		return
	}
	if g.ReconcilerReplayed > g.DeliveredUnique || g.ReconcilerParked > g.Parked+g.ParkedAndDelivered ||
		g.ReconcilerReplayed+g.ReconcilerParked > g.Produced {
		t.Errorf("the reconciler's figures are not records: replayed %d, parked %d of %d produced (%d delivered, %d parked)",
			g.ReconcilerReplayed, g.ReconcilerParked, g.Produced, g.DeliveredUnique, g.Parked)
	}
	want := fmt.Sprintf("%d / %d", g.ReconcilerReplayed, g.ReconcilerParked)
	if got, ok := rowCells(tab, "records the reconciler replayed / parked"); !ok || !strings.HasSuffix(got, want) {
		t.Errorf("reconciler row %q, want it to end with %q", got, want)
	}
	top := resultJSON(t, res.ReportDir)
	if top["reconciler_replayed_records"] != float64(g.ReconcilerReplayed) || top["reconciler_parked_records"] != float64(g.ReconcilerParked) {
		t.Errorf("result.json: reconciler_replayed_records %v, reconciler_parked_records %v; want %d, %d",
			top["reconciler_replayed_records"], top["reconciler_parked_records"], g.ReconcilerReplayed, g.ReconcilerParked)
	}
	t.Logf("reconciler: %d records replayed, %d parked; GapsDetected %d, GapsReplayed %d summed over passes",
		g.ReconcilerReplayed, g.ReconcilerParked, g.GapsDetected, g.GapsReplayed)
}

// resultJSON decodes the report's result.json as a map, so a test sees its keys as written.
func resultJSON(t *testing.T, dir string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	return top
}
