package esm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFilterCriteria: records whose data FilterCriteria drops never reach the function, a batch
// they empty is not invoked, and the lane's checkpoint passes them (also at the end of a batch).
func TestFilterCriteria(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	var puts []putResult
	var want []string // the records the function must get, in order
	for i := range 25 {
		data := []byte(`{"kind":"order"}`)
		switch {
		case i < 10 && i%2 == 1, i >= 10 && i < 20, i == 24:
			data = []byte(`{"kind":"noise"}`)
		case i == 4:
			data = []byte(`kind=order`) // not JSON: Lambda drops it
		}
		p := s.put(t, "k", data)
		puts = append(puts, p)
		if string(data) == `{"kind":"order"}` {
			want = append(want, p.seq)
		}
	}
	cfg := baseConfig(s)
	cfg.BatchSize = 10
	cfg.ReportBatchItemFailures = true
	cfg.FilterCriteria = []string{`{"data": {"kind": ["order"]}}`}
	r := newRecorder(t, nil)
	m, log := drain(t, s, nil, r, cfg)

	if got := r.delivered(); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want only the matching records %v", got, want)
	}
	if got := batchSizes(r); !slices.Equal(got, []int{4, 4}) {
		t.Fatalf("batch sizes %v, want [4 4] (records 0-9 and 20-24 filtered; 10-19 all dropped: no invocation)", got)
	}
	var cps []string
	for _, e := range log.all(EventCheckpoint) {
		cps = append(cps, e.Checkpoint)
	}
	if want := []string{puts[8].seq, puts[9].seq, puts[19].seq, puts[23].seq, puts[24].seq}; !slices.Equal(cps, want) {
		t.Fatalf("checkpoints %v, want %v", cps, want)
	}
	if got := m.Checkpoints()[puts[0].shard]; !slices.Equal(got, []string{puts[24].seq}) {
		t.Fatalf("Checkpoints() = %v, want the last record (filtered) done", got)
	}
	n := 0
	for _, e := range log.all(EventRecordsFiltered) {
		n += e.Size
	}
	if n != 25-len(want) {
		t.Fatalf("%d records reported filtered, want %d", n, 25-len(want))
	}
}

func TestFilterCriteriaConfig(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.StreamName, cfg.FunctionName = "s", "f"
	cfg.FilterCriteria = []string{`{"partitionKey": ["1"]}`}
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with a pattern Kinesis cannot filter on: %v, want ErrConfig", err)
	}

	path := filepath.Join(t.TempDir(), "template.yaml")
	tmpl := "Parameters:\n  RecordFilter:\n    Type: String\n    Default: '{\"data\": {\"kind\": [\"order\"]}}'\n"
	if err := os.WriteFile(path, []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ConfigFromTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.FilterCriteria, []string{`{"data": {"kind": ["order"]}}`}) {
		t.Fatalf("FilterCriteria from the template = %q", got.FilterCriteria)
	}
}
