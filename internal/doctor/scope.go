package doctor

import (
	"fmt"
	"strings"

	"github.com/gapless-dev/gapless/internal/config"
)

// startingPositionCheck: the reconciler's STARTING_POSITION must be the mapping's
// StartingPosition. It decides which records of a lineage the mapping never checkpointed are
// in scope (docs/reconciler.md, "A lineage the mapping never checkpointed").
var startingPositionCheck = Check{
	ID: "mapping.starting-position-mismatch", Level: Error,
	Fix: "give the reconciler STARTING_POSITION equal to the mapping's StartingPosition (template.yaml does it from the one parameter StartingPosition)",
	Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
		if d.ReconcilerEnv == nil || m.StartingPosition == "" {
			return ""
		}
		r := strings.TrimSpace(d.ReconcilerEnv[config.EnvStartingPosition])
		if r == "" {
			r = config.StartingTrimHorizon
		}
		switch {
		case r == m.StartingPosition:
			return ""
		case r == config.StartingTrimHorizon && m.StartingPosition == Latest:
			return "the mapping starts at LATEST but the reconciler's STARTING_POSITION is TRIM_HORIZON: on a shard the mapping never checkpointed it would replay records written before the mapping existed, which nobody asked it to process"
		case r == config.StartingLatest && m.StartingPosition == TrimHorizon:
			return "the mapping starts at TRIM_HORIZON but the reconciler's STARTING_POSITION is LATEST: on a shard the mapping never checkpointed, records written before the reconciler's first pass are never verified (lost silently if the mapping gave them up)"
		}
		return fmt.Sprintf("the mapping's StartingPosition is %s, the reconciler's STARTING_POSITION %q", m.StartingPosition, r)
	}),
}

func init() { Checks = append(Checks, startingPositionCheck) }
