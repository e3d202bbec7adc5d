package config

import (
	"strings"

	"github.com/gapless-dev/gapless/internal/filter"
)

// EnvRecordFilter holds the record filter: one Lambda FilterCriteria pattern on the Kinesis
// record's data (package filter lists the supported syntax), the same string template.yaml puts
// on the event-source mapping (parameter RecordFilter). Empty: no filter.
const EnvRecordFilter = "RECORD_FILTER"

// recordFilter parses RECORD_FILTER (nil when unset), failing cold start with the variable's name
// on a pattern package filter cannot evaluate: a pattern the functions could not read would make
// the reconciler replay every record the mapping drops.
func (p *parser) recordFilter() *filter.Filter {
	raw := strings.TrimSpace(p.getenv(EnvRecordFilter))
	if raw == "" {
		return nil
	}
	f, err := filter.Parse(raw)
	if err != nil {
		p.fail(EnvRecordFilter, raw, "is not a supported filter pattern: "+err.Error())
		return nil
	}
	return f
}
