package demo

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gapless-dev/gapless/internal/local/loadgen"
)

func TestFilterConfig(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Variants = []string{VariantGapless}
	cfg.Filter = `{"key": ["pk-0001"]}` // not under "data": Kinesis filters only on data
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with a bad filter: %v, want ErrConfig", err)
	}
	cfg.Filter = `{"data": {"key": [{"anything-but": {"prefix": "pk-00"}}]}}`
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if m := (&variant{e: &env{cfg: cfg}}).mappingConfig(); len(m.FilterCriteria) != 1 || m.FilterCriteria[0] != cfg.Filter {
		t.Fatalf("mapping FilterCriteria %q, want the demo's filter", m.FilterCriteria)
	}
}

// TestFilteredIDsJudgeTheProducedBytes: the records the demo expects the filter to drop are
// judged on the bytes the producer writes.
func TestFilteredIDsJudgeTheProducedBytes(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Filter = `{"data": {"key": [{"anything-but": {"prefix": "pk-00"}}]}}`
	recs := loadgen.Records(loadgen.Spec{Records: 400, Keys: 200, Seed: 1})
	v := &variant{e: &env{cfg: cfg}, recs: recs}
	got := v.filteredIDs()
	want := 0
	for _, p := range recs {
		b, _ := json.Marshal(p)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		drop := m["key"].(string)[:5] == "pk-00"
		if drop != got[p.ID] {
			t.Errorf("%s (key %s): filtered %v, want %v", p.ID, p.Key, got[p.ID], drop)
		}
		if drop {
			want++
		}
	}
	if want == 0 || want == len(recs) || len(got) != want {
		t.Fatalf("%d filtered of %d, want %d (some, not all)", len(got), len(recs), want)
	}
	cfg.Filter = ""
	if (&variant{e: &env{cfg: cfg}, recs: recs}).filteredIDs() != nil {
		t.Fatal("without a filter nothing is filtered")
	}
}
