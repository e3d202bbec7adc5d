package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/filter"
)

// The parity checks: settings that the mapping and both functions must hold alike. They need
// the functions' environments (Deployment.ConsumerEnv, ReconcilerEnv); a function whose
// environment was not read (nil) is left out of the comparison.
var parityChecks = []Check{
	{
		ID: "filter.invalid", Level: Error,
		Fix: "give RECORD_FILTER (template parameter RecordFilter) a pattern in the syntax package internal/filter supports (docs/deploy.md, \"Record filter\"), or leave it empty",
		Eval: func(d *Deployment) string {
			var bad []string
			for _, fn := range d.functionEnvs() {
				raw := strings.TrimSpace(fn.env[config.EnvRecordFilter])
				if raw == "" {
					continue
				}
				if _, err := filter.Parse(raw); err != nil {
					bad = append(bad, fmt.Sprintf("the %s's RECORD_FILTER %s: %v", fn.name, raw, err))
				}
			}
			if len(bad) == 0 {
				return ""
			}
			return strings.Join(bad, "; ") + ": the function fails at cold start (config validation), so nothing is processed"
		},
	},
	{
		ID: "filter.mismatch", Level: Error,
		Fix: "put the same pattern on the mapping's FilterCriteria and in both functions' RECORD_FILTER (template.yaml does it from the one parameter RecordFilter)",
		Eval: func(d *Deployment) string {
			type side struct {
				name     string
				patterns []string
			}
			var sides []side
			if d.Mapping != nil && !d.Mapping.FiltersUnknown {
				sides = append(sides, side{"the mapping's FilterCriteria", d.Mapping.Filters})
			}
			for _, fn := range d.functionEnvs() {
				var ps []string
				if raw := strings.TrimSpace(fn.env[config.EnvRecordFilter]); raw != "" {
					ps = []string{raw}
				}
				sides = append(sides, side{"the " + fn.name + "'s RECORD_FILTER", ps})
			}
			for _, s := range sides[min(1, len(sides)):] {
				if !samePatterns(sides[0].patterns, s.patterns) {
					return fmt.Sprintf("%s is %s but %s is %s: records the mapping drops would be replayed by the reconciler as gaps, or records the functions drop never processed",
						sides[0].name, describePatterns(sides[0].patterns), s.name, describePatterns(s.patterns))
				}
			}
			return ""
		},
	},
	{
		ID: "onpark.invalid", Level: Error,
		Fix: "set ON_PARK (template parameter OnPark) to continue or hold-key",
		Eval: func(d *Deployment) string {
			var bad []string
			for _, fn := range d.functionEnvs() {
				if v := onPark(fn.env); v != config.OnParkContinue && v != config.OnParkHoldKey {
					bad = append(bad, fmt.Sprintf("the %s's ON_PARK %q", fn.name, v))
				}
			}
			if len(bad) == 0 {
				return ""
			}
			return strings.Join(bad, " and ") + " is not continue or hold-key: the function fails at cold start (config validation), so nothing is processed"
		},
	},
	{
		ID: "onpark.mismatch", Level: Error,
		Fix: "give both functions the same ON_PARK (template.yaml does it from the one parameter OnPark)",
		Eval: func(d *Deployment) string {
			if d.ConsumerEnv == nil || d.ReconcilerEnv == nil {
				return ""
			}
			c, r := onPark(d.ConsumerEnv), onPark(d.ReconcilerEnv)
			if c == r {
				return ""
			}
			return fmt.Sprintf("the consumer's ON_PARK is %s, the reconciler's %s: with one of them continue, the reconciler's replays (or the consumer) would apply later records of a held key while its head is parked", c, r)
		},
	},
	{
		ID: "onpark.hold-key-retries", Level: Warning,
		Fix: "with ON_PARK=hold-key keep MAX_RECORD_ATTEMPTS at most MaximumRetryAttempts (the defaults 5 and 10; docs/consumer.md, \"Holding a key\")",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			held := false
			for _, fn := range d.functionEnvs() {
				held = held || onPark(fn.env) == config.OnParkHoldKey
			}
			if !held || m.MaximumRetryAttempts < 0 || d.MaxRecordAttempts <= m.MaximumRetryAttempts {
				return ""
			}
			return fmt.Sprintf("ON_PARK=hold-key with MAX_RECORD_ATTEMPTS %d above MaximumRetryAttempts %d: the mapping can give up on a key's head before the consumer parks it, and the key's later records are then already delivered, unheld",
				d.MaxRecordAttempts, m.MaximumRetryAttempts)
		}),
	},
}

func init() { Checks = append(Checks, parityChecks...) }

type namedEnv struct {
	name string
	env  map[string]string
}

// functionEnvs are the functions whose environment is known, consumer first.
func (d *Deployment) functionEnvs() []namedEnv {
	var out []namedEnv
	if d.ConsumerEnv != nil {
		out = append(out, namedEnv{"consumer", d.ConsumerEnv})
	}
	if d.ReconcilerEnv != nil {
		out = append(out, namedEnv{"reconciler", d.ReconcilerEnv})
	}
	return out
}

// onPark is a function's effective ON_PARK: unset is the default, continue.
func onPark(env map[string]string) string {
	if v := strings.TrimSpace(env[config.EnvOnPark]); v != "" {
		return v
	}
	return config.OnParkContinue
}

// samePatterns compares two pattern lists as sets of JSON values (key order and white space
// do not matter; a pattern that is not JSON is compared as text).
func samePatterns(a, b []string) bool {
	norm := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, normalizePattern(p))
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}

func normalizePattern(p string) string {
	dec := json.NewDecoder(strings.NewReader(p))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return p
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return p
	}
	return strings.TrimSpace(b.String())
}

func describePatterns(ps []string) string {
	if len(ps) == 0 {
		return "empty (every record)"
	}
	return strings.Join(ps, " or ")
}
