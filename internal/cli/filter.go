package cli

import (
	"flag"
	"os"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/filter"
)

// filterFlag declares --filter (default $RECORD_FILTER, the functions' record filter) and
// returns the parser to call after flag parsing: status and replay must judge records as the
// mapping and the reconciler do, so that records the filter drops are not taken for gaps.
func filterFlag(fs *flag.FlagSet) func() (*filter.Filter, error) {
	v := fs.String("filter", os.Getenv(config.EnvRecordFilter),
		"record filter: the mapping's FilterCriteria pattern; records it drops are accounted for, not gaps (default $"+config.EnvRecordFilter+", empty = none)")
	return func() (*filter.Filter, error) {
		f, err := filter.Parse(*v)
		if err != nil {
			return nil, usagef("--filter: %v", err)
		}
		return f, nil
	}
}
