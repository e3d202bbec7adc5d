package demo

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/esm"
)

func TestParseVariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{in: "gapless", want: []string{VariantGapless}},
		{in: "gapless, mapping-alone", want: []string{VariantBaseline, VariantGapless}}, // run order, not flag order
		{in: "all", want: AllVariants()},
		{in: "checkpoint-decides", want: []string{VariantCheckpointDecides}},
		{in: "", err: "none given"},
		{in: "gapless,", err: `empty name in "gapless,"`},
		{in: "bare", err: `unknown variant "bare"`},
		{in: "gapless,gapless", err: `"gapless" given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseVariants(tt.in)
			if tt.err != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.err) ||
					!strings.Contains(err.Error(), "mapping-alone, checkpoint-decides, gapless") {
					t.Fatalf("ParseVariants(%q) = %v, want ErrConfig with %q and the valid names", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("ParseVariants(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
	c := DefaultConfig()
	c.Variants = []string{"gapless", "nope"}
	if err := c.withDefaults().Validate(); err == nil || !strings.Contains(err.Error(), `unknown variant "nope"`) {
		t.Fatalf("Validate with a bad variant: %v", err)
	}
	c = DefaultConfig()
	c.Baseline = false
	if got := c.withDefaults().Variants; len(got) != 1 || got[0] != VariantGapless {
		t.Fatalf("Baseline false: variants %v", got)
	}
	if got := DefaultConfig().withDefaults().Variants; strings.Join(got, ",") != strings.Join(AllVariants(), ",") {
		t.Fatalf("default variants %v", got)
	}
}

func TestResultJSONKeys(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(sampleResult())
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"produced", "delivered_unique", "duplicates", "parked", "lost", "lost_esm_only", "lost_checkpoint_decides",
		"gaps_detected", "gaps_replayed", "ddb_requests_per_batch", "ddb_wcu_per_record", "seconds", "variants",
		"gapless", "mapping_alone", "checkpoint_decides"} {
		if _, ok := top[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if top["lost_checkpoint_decides"] != float64(40) || top["lost_esm_only"] != float64(7) {
		t.Errorf("lost_checkpoint_decides %v, lost_esm_only %v", top["lost_checkpoint_decides"], top["lost_esm_only"])
	}
	cd, _ := top["checkpoint_decides"].(map[string]any)
	if cd["name"] != VariantCheckpointDecides || cd["handler"] == nil || cd["duplicates_by_cause"] == nil {
		t.Errorf("checkpoint_decides = %v", cd)
	}
	// A variant that did not run is null, not 0.
	r := sampleResult()
	r.CheckpointDecides, r.LostCheckpointDecides = nil, nil
	b, _ = json.Marshal(r)
	top = nil
	_ = json.Unmarshal(b, &top)
	if v, ok := top["lost_checkpoint_decides"]; !ok || v != nil {
		t.Errorf("lost_checkpoint_decides without the variant = %v (present %v), want null", v, ok)
	}
}

func TestOutcomeChart(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	svg := OutcomeChart(res.ran())
	if err := wellFormed(svg); err != nil {
		t.Fatalf("%v\n%s", err, svg)
	}
	for _, s := range []string{"mapping alone", "checkpoint decides", "gapless", "LOST", "parked with payload", ">4493</text>", ">40</text>", ">3000</text>",
		"the mapping alone lost 1 record; gapless parked exactly those ids, with their payload"} {
		if !strings.Contains(svg, s) {
			t.Errorf("outcome chart lacks %q", s)
		}
	}
}

func TestMemoryTableCompactByDefault(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	for i := range 40 {
		res.Gapless.Processes = append(res.Gapless.Processes, ProcessRSS{PID: 100 + i, Name: "bootstrap", FirstKB: 16000 + int64(i), SteadyKB: 17000, LastKB: 17500, MaxKB: 18000, Flat: true})
	}
	compact := Markdown(res)
	if n := strings.Count(compact, "| gapless | bootstrap |"); n != 1 {
		t.Errorf("compact report has %d bootstrap rows, want 1", n)
	}
	if !strings.Contains(compact, "| gapless | bootstrap | 40 |") {
		t.Error("compact row does not count the processes")
	}
	res.FullReport = true
	if n := strings.Count(Markdown(res), "| gapless | bootstrap |"); n != 40 {
		t.Errorf("full report has %d bootstrap rows, want 40", n)
	}
}

func TestPruneReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"report.md", "result.json", "outcome.svg", "sdk.log", "bin/consumer/bootstrap", "stack/logs/dynalite.log",
		"gapless/chart.svg", "gapless/functions.log", "gapless/chaos-state/x"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pruneReport(dir)
	for f, keep := range map[string]bool{"report.md": true, "result.json": true, "outcome.svg": true, "gapless/chart.svg": true,
		"gapless/functions.log": true, "sdk.log": false, "bin": false, "stack": false, "gapless/chaos-state": false} {
		_, err := os.Stat(filepath.Join(dir, f))
		if keep != (err == nil) {
			t.Errorf("%s: kept %v, want %v", f, err == nil, keep)
		}
	}
}

// TestDuplicateCauses attributes synthetic deliveries the way a run records them.
func TestDuplicateCauses(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	seq := func(n int) string { return fmt.Sprintf("%056d", n) }
	const shard = "shardId-000000000001"
	key := "pk-1"
	lane := laneOf(key, 4)
	invs := newInvocationJournal()
	ev := func(m int, typ esm.EventType, req string, s int, first, last int, mod func(*esm.Event)) {
		e := esm.Event{Type: typ, RequestID: req, ShardID: shard, Lane: lane, FirstSeq: seq(first), LastSeq: seq(last)}
		if mod != nil {
			mod(&e)
		}
		invs.observe(m, e)
		invs.mu.Lock()
		if inv := invs.byReq[req]; inv != nil && typ == esm.EventBatchInvoked {
			inv.start = at(s)
		}
		invs.mu.Unlock()
	}
	// Mapping 0: invocation a (10..20) times out, b (10..20) fails its ledger write, c (10..20)
	// partially fails at 12, d (12..20) succeeds. Mapping 1 (racer): e (10..20).
	ev(0, esm.EventBatchInvoked, "a", 1, 10, 20, nil)
	ev(0, esm.EventFunctionError, "a", 0, 10, 20, func(e *esm.Event) { e.Err = fmt.Errorf("%w: %w", esm.ErrFunction, esm.ErrFunctionTimeout) })
	ev(0, esm.EventBatchInvoked, "b", 10, 10, 20, nil)
	ev(0, esm.EventPartialFailure, "b", 0, 10, 20, func(e *esm.Event) { e.FailedSeq = seq(10) })
	ev(0, esm.EventBatchInvoked, "c", 20, 10, 20, nil)
	ev(0, esm.EventPartialFailure, "c", 0, 10, 20, func(e *esm.Event) { e.FailedSeq = seq(12) })
	ev(0, esm.EventBatchInvoked, "d", 30, 12, 20, nil)
	ev(1, esm.EventBatchInvoked, "e", 40, 10, 20, nil)
	ledgerFailed := map[string]bool{shard + " " + seq(10): true}

	writes := []written{{id: "r-15", key: key, shard: shard, seq: seq(15)}, {id: "r-12", key: key, shard: shard, seq: seq(12)},
		{id: "r-dup", key: key, shard: shard, seq: seq(16)}, {id: "r-dup", key: key, shard: shard, seq: seq(17)}}
	sends := []send{
		{id: "r-15", source: sourceConsumer, invocation: "s1", at: at(2)},    // first: in a
		{id: "r-15", source: sourceConsumer, invocation: "s2", at: at(11)},   // in b: a timed out after processing
		{id: "r-15", source: sourceConsumer, invocation: "s2", at: at(12)},   // the SDK retried s2
		{id: "r-15", source: sourceConsumer, invocation: "s3", at: at(21)},   // in c: b's ledger write failed
		{id: "r-15", source: sourceConsumer, invocation: "s4", at: at(31)},   // in d: c failed at 12 below 15
		{id: "r-15", source: sourceRacer, invocation: "s5", at: at(41)},      // the racing mapping
		{id: "r-15", source: sourceReconciler, invocation: "s6", at: at(50)}, // replay inside the window
		{id: "r-15", source: sourceReconciler, invocation: "s7", at: at(60)}, // replayed again
		{id: "r-12", source: sourceConsumer, invocation: "t1", at: at(21)},   // in c, where 12 failed
		{id: "r-12", source: sourceConsumer, invocation: "t2", at: at(31)},   // in d: Process failed after its send
		{id: "r-dup", source: sourceConsumer, invocation: "u1", at: at(2)},
		{id: "r-dup", source: sourceConsumer, invocation: "u2", at: at(3)},
	}
	got := duplicateCausesOf(sends, invs, ledgerFailed, writes, 4, 9+1) // 9 duplicate sends, 1 more at the queue
	want := map[string]int{
		"timeout_after_processing": 1, "sqs_send_retried": 1, "ledger_write_failed": 1, "partial_failure_redelivery": 1,
		"racing_mapping": 1, "settle_window_replay": 1, "reconciler_replayed_again": 1, "process_failed_after_send": 1,
		"business_key": 1, "queue_redelivered": 1, "unattributed": 0, "function_error_after_processing": 0,
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

func TestLedgerFailuresFromTheConsumerLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	line := `{"time":"x","level":"ERROR","msg":"batch failed as a whole","error":"pipeline: ledger unavailable: record demo|s|shardId-000000000003 [4959001, 4959009]: throttled","reported_failure":"4959001"}`
	other := `{"msg":"batch failed as a whole","error":"pipeline: invalid batch"}`
	f := filepath.Join(dir, "functions.log")
	if err := os.WriteFile(f, []byte(other+"\n"+line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := ledgerFailures(f, filepath.Join(dir, "missing.log"))
	if len(got) != 1 || !got["shardId-000000000003 4959001"] {
		t.Fatalf("ledgerFailures = %v", got)
	}
}

// TestSendTap: the tap forwards everything and journals only the target queue's records that
// SQS accepted, with the SDK's invocation id.
func TestSendTap(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	sqsFake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer sqsFake.Close()
	j := &sendJournal{}
	tap, err := startSendTap(sqsFake.URL, "http://sqs.local/000000000000/demo-target", sourceRacer, j)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	post := func(target, inv, body string) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, tap.URL()+"/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Amz-Sdk-Invocation-Id", inv)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	msg := func(queue, id string) string {
		b, _ := json.Marshal(map[string]string{"QueueUrl": "http://x/000000000000/" + queue, "MessageBody": `{"id":"` + id + `","key":"k","n":1}`})
		return string(b)
	}
	post("AmazonSQS.SendMessage", "i1", msg("demo-target", "r-1"))
	post("AmazonSQS.SendMessage", "i2", msg("demo-parked", "r-2")) // another queue
	post("AmazonSQS.ReceiveMessage", "i3", msg("demo-target", "r-3"))
	post("AmazonSQS.SendMessageBatch", "i4", `{"QueueUrl":"http://x/1/demo-target","Entries":[{"Id":"a","MessageBody":"{\"id\":\"r-4\"}"},{"Id":"b","MessageBody":"{\"id\":\"r-5\"}"}]}`)
	fail.Store(true)
	post("AmazonSQS.SendMessage", "i5", msg("demo-target", "r-6")) // SQS refused it
	got := j.all()
	var ids []string
	for _, s := range got {
		ids = append(ids, s.id+"/"+s.invocation+"/"+s.source)
	}
	if strings.Join(ids, " ") != "r-1/i1/racer r-4/i4/racer r-5/i4/racer" {
		t.Fatalf("journal %v", ids)
	}
}

// wellFormed parses svg as XML.
func wellFormed(svg string) error {
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestLossFates: each record the mapping alone lost is matched by id with what gapless did
// with it (parked, delivered, or lost, trimmed or pending there too), and gapless's parked
// records the mapping alone delivered are counted apart.
func TestLossFates(t *testing.T) {
	t.Parallel()
	alone := &VariantResult{Name: VariantBaseline, LostIDs: []string{"r-1", "r-2", "r-3", "r-4", "r-5", "r-6"}}
	g := &VariantResult{Name: VariantGapless, ParkedIDs: []string{"r-1", "r-2", "r-9"}, LostIDs: []string{"r-3"},
		LostToRetentionIDs: []string{"r-4"}, PendingRecords: []PendingRecord{{ID: "r-5"}}}
	got := lossFates(alone, g)
	want := LossFates{Lost: 6, Parked: 2, Delivered: 1, Unaccounted: 3, ParkedElsewhere: 1}
	if got != want {
		t.Fatalf("lossFates = %+v, want %+v", got, want)
	}
	for _, s := range []string{"lost 6 records", "parked 2 of those same ids", "delivered 1", "3 are lost or pending in gapless too", "also parked 1 record the mapping alone delivered"} {
		if !strings.Contains(got.Line(), s) {
			t.Errorf("line %q lacks %q", got.Line(), s)
		}
	}
	g.Pending, g.PendingRecords = 60, make([]PendingRecord, 50)
	if f := lossFates(alone, g); f.PendingUnlisted != 10 || !strings.Contains(f.Line(), "(at most: 10 of gapless's pending records are not listed by id)") {
		t.Errorf("with 60 pending, 50 listed: %+v %q", f, f.Line())
	}
	exact := lossFates(&VariantResult{LostIDs: []string{"r-1", "r-2"}}, &VariantResult{ParkedIDs: []string{"r-1", "r-2"}})
	if exact != (LossFates{Lost: 2, Parked: 2}) || exact.Line() != "the mapping alone lost 2 records; gapless parked exactly those ids, with their payload" {
		t.Errorf("exact match: %+v %q", exact, exact.Line())
	}
}
