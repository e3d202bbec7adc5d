package deploy

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/doctor"
)

// samconfig is samconfig.toml as section -> key -> raw value, read by the parser gapless doctor
// uses (internal/doctor).
type samconfig = doctor.Samconfig

func loadSamconfig(t *testing.T) samconfig {
	t.Helper()
	cfg, err := doctor.LoadSamconfig(filepath.Join(repoRoot(t), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// parseOverrides reads sam's parameter_overrides: Key=value or Key="value" pairs.
func parseOverrides(t *testing.T, s string) map[string]string {
	t.Helper()
	out, err := doctor.ParseOverrides(s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkParameterValue applies the template's constraints to a value, as CloudFormation would.
func (c *cfn) checkParameterValue(t *testing.T, name, v string) {
	t.Helper()
	p := c.param(name)
	if allowed := stringList(get(p, "AllowedValues")); allowed != nil && !slices.Contains(allowed, v) {
		t.Errorf("%s=%q not in %v", name, v, allowed)
	}
	if pat := scalar(get(p, "AllowedPattern")); pat != "" && !regexp.MustCompile(pat).MatchString(v) {
		t.Errorf("%s=%q does not match %s", name, v, pat)
	}
	if scalar(get(p, "Type")) == "Number" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Errorf("%s=%q is not a number", name, v)
			return
		}
		for bound, bad := range map[string]func(b int) bool{"MinValue": func(b int) bool { return n < b }, "MaxValue": func(b int) bool { return n > b }} {
			if s := scalar(get(p, bound)); s != "" {
				b, _ := strconv.Atoi(s)
				if bad(b) {
					t.Errorf("%s=%d outside %s %d", name, n, bound, b)
				}
			}
		}
	}
}

func TestSamconfig(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	cfg := loadSamconfig(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`\b\d{12}\b|AKIA[0-9A-Z]{16}|aws_secret|arn:aws`).Find(raw); m != nil {
		t.Errorf("samconfig.toml holds an account id, key or ARN: %q", m)
	}
	for _, sec := range []string{"default.build.parameters", "default.validate.parameters", "default.deploy.parameters", "default.sync.parameters"} {
		if cfg[sec] == nil {
			t.Errorf("samconfig.toml lacks [%s]", sec)
		}
	}
	if cfg["default.validate.parameters"]["lint"] != "true" {
		t.Errorf("[default.validate.parameters] lint must be true")
	}
	for _, env := range []string{"default", "dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			deploy := cfg[env+".deploy.parameters"]
			if deploy == nil {
				t.Fatalf("no [%s.deploy.parameters]", env)
			}
			if cfg[env+".global.parameters"]["stack_name"] == "" {
				t.Errorf("no stack_name for %s", env)
			}
			if !strings.Contains(deploy["capabilities"], "CAPABILITY_IAM") {
				t.Errorf("capabilities %q: the template creates IAM roles", deploy["capabilities"])
			}
			eff := c.defaults()
			over := parseOverrides(t, deploy["parameter_overrides"])
			for _, name := range slices.Sorted(maps.Keys(over)) {
				if get(c.root, "Parameters", name) == nil {
					t.Errorf("override of unknown parameter %s", name)
					continue
				}
				c.checkParameterValue(t, name, over[name])
				eff[name] = over[name]
			}
			checkTiming(t, eff)
			// The same values through the reconciler's loader.
			vars := map[string]string{
				config.EnvGroup: eff["GroupName"], config.EnvCheckpointTable: "c", config.EnvDedupeTable: "d",
				config.EnvParkedQueueURL: "p", config.EnvTargetQueueURL: "t", config.EnvStreamName: "s", config.EnvPayloadBucket: "payloads",
				config.EnvMaxRecordAttempts: eff["MaxRecordAttempts"], config.EnvMaxConcurrency: eff["MaxConcurrency"],
				config.EnvDedupeKey: eff["DedupeKey"], config.EnvLedgerTTL: eff["LedgerTTL"], config.EnvSettleAfter: eff["SettleAfter"],
				config.EnvMaxRecordAge: eff["MaximumRecordAgeSeconds"], config.EnvStartingPosition: eff["StartingPosition"],
			}
			if _, err := config.LoadReconciler(func(k string) string { return vars[k] }); err != nil {
				t.Errorf("%s settings rejected by the reconciler's config: %v", env, err)
			}
			if sync := cfg[env+".sync.parameters"]; sync != nil && sync["parameter_overrides"] != "" && sync["parameter_overrides"] != deploy["parameter_overrides"] {
				t.Errorf("[%s.sync] parameter_overrides differ from [%s.deploy]", env, env)
			}
		})
	}
}
