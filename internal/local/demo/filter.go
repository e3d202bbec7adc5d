package demo

import (
	"encoding/json"
	"fmt"

	"github.com/gapless-dev/gapless/internal/filter"
)

// recordFilter parses Config.Filter (nil for none).
func (c Config) recordFilter() (*filter.Filter, error) {
	f, err := filter.Parse(c.Filter)
	if err != nil {
		return nil, fmt.Errorf("%w: filter: %v", ErrConfig, err)
	}
	return f, nil
}

// filteredIDs are the ids of the produced records that --filter drops, judged on the exact
// bytes the producer writes (loadgen marshals each Payload with encoding/json): the mapping never
// sends them, so they are not expected downstream and are not lost. nil without a filter.
func (v *variant) filteredIDs() map[string]bool {
	f, err := v.e.cfg.recordFilter()
	if err != nil || !f.Active() {
		return nil
	}
	out := map[string]bool{}
	for _, p := range v.recs {
		b, err := json.Marshal(p)
		if err == nil && !f.Keep(b) {
			out[p.ID] = true
		}
	}
	return out
}
