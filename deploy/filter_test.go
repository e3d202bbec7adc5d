package deploy

import (
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/filter"
)

// TestRecordFilter ties the RecordFilter parameter to both places that must hold the same
// pattern: the mapping's FilterCriteria (only when set: an empty pattern is no filter, and
// Lambda rejects an empty Pattern) and RECORD_FILTER of both functions (commonEnv, checked by
// TestFunctionEnvironment). A mapping that filters records the reconciler does not know about
// would have every filtered record replayed as a gap.
func TestRecordFilter(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if got := c.paramDefault("RecordFilter"); got != "" {
		t.Errorf("RecordFilter default %q, want empty (no filter)", got)
	}
	if got := commonEnv["RECORD_FILTER"]; len(got) != 1 || got[0] != "RecordFilter" {
		t.Errorf("commonEnv RECORD_FILTER = %v, want [RecordFilter] for both functions", got)
	}

	// HasRecordFilter: !Not [!Equals [!Ref RecordFilter, ""]]
	fn, arg := intrinsic(get(c.root, "Conditions", "HasRecordFilter"))
	ok := fn == "Fn::Not" && arg.Kind == yaml.SequenceNode && len(arg.Content) == 1
	if ok {
		efn, eq := intrinsic(arg.Content[0])
		ok = efn == "Fn::Equals" && eq.Kind == yaml.SequenceNode && len(eq.Content) == 2 &&
			ref(eq.Content[0]) == "RecordFilter" && eq.Content[1].Kind == yaml.ScalarNode && eq.Content[1].Value == ""
	}
	if !ok {
		t.Errorf(`condition HasRecordFilter must be !Not [!Equals [!Ref RecordFilter, ""]]`)
	}

	evs := c.events("ConsumerFunction", "Kinesis")
	if len(evs) != 1 {
		t.Fatalf("ConsumerFunction has %d Kinesis events, want 1", len(evs))
	}
	cond, set, unset, isIf := ifArgs(get(evs[0], "FilterCriteria"))
	if !isIf || cond != "HasRecordFilter" {
		t.Fatalf("mapping FilterCriteria must be !If [HasRecordFilter, {Filters: [{Pattern: !Ref RecordFilter}]}, !Ref AWS::NoValue]")
	}
	if ref(unset) != "AWS::NoValue" {
		t.Errorf("FilterCriteria without a filter: %v, want !Ref AWS::NoValue", targets(unset))
	}
	filters := get(set, "Filters")
	if filters == nil || filters.Kind != yaml.SequenceNode || len(filters.Content) != 1 || ref(get(filters.Content[0], "Pattern")) != "RecordFilter" {
		t.Errorf("FilterCriteria.Filters must be the one pattern [{Pattern: !Ref RecordFilter}]")
	}

	// The example the parameter's description gives must be a pattern the functions accept.
	desc := scalar(get(c.param("RecordFilter"), "Description"))
	ex := regexp.MustCompile(`\{"data".*?\]\}\}`).FindString(desc)
	if ex == "" {
		t.Fatalf("RecordFilter description gives no example pattern: %s", desc)
	}
	if _, err := filter.Parse(ex); err != nil {
		t.Errorf("RecordFilter description's example %s: %v", ex, err)
	}
}
