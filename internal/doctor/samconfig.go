package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Samconfig is samconfig.toml as section -> key -> value. Only the subset of TOML sam writes is
// read: [env.command.parameters] headers and key = value lines whose values are basic strings,
// booleans or numbers.
type Samconfig map[string]map[string]string

// ParseSamconfig reads samconfig.toml's bytes.
func ParseSamconfig(b []byte) (Samconfig, error) {
	cfg := Samconfig{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
			if cfg[section] != nil {
				return nil, fmt.Errorf("%w: samconfig.toml:%d: section %s twice", ErrTemplate, line, section)
			}
			cfg[section] = map[string]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("%w: samconfig.toml:%d: %q is not key = value", ErrTemplate, line, l)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if strings.HasPrefix(v, `"`) {
				u, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("%w: samconfig.toml:%d: %s: %v", ErrTemplate, line, k, err)
				}
				v = u
			}
			if section == "" && k == "version" {
				continue
			}
			if section == "" {
				return nil, fmt.Errorf("%w: samconfig.toml:%d: %s outside a section", ErrTemplate, line, k)
			}
			cfg[section][k] = v
		}
	}
	return cfg, nil
}

// LoadSamconfig reads the samconfig.toml at path.
func LoadSamconfig(path string) (Samconfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	return ParseSamconfig(b)
}

// Overrides returns the parameter_overrides of env's deploy section; an environment without a
// deploy section is an error naming it.
func (c Samconfig) Overrides(env string) (map[string]string, error) {
	sec, ok := c[env+".deploy.parameters"]
	if !ok {
		return nil, fmt.Errorf("%w: samconfig.toml has no [%s.deploy.parameters]", ErrTemplate, env)
	}
	return ParseOverrides(sec["parameter_overrides"])
}

var overridePair = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// ParseOverrides reads sam's parameter_overrides: Key=value or Key="value" pairs.
func ParseOverrides(s string) (map[string]string, error) {
	out := map[string]string{}
	var bad error
	rest := overridePair.ReplaceAllStringFunc(s, func(pair string) string {
		m := overridePair.FindStringSubmatch(pair)
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%w: parameter_overrides %s: %v", ErrTemplate, pair, err)
			}
			v = u
		}
		out[m[1]] = v
		return ""
	})
	if bad != nil {
		return nil, bad
	}
	if strings.TrimSpace(rest) != "" {
		return nil, fmt.Errorf("%w: parameter_overrides: cannot read %q", ErrTemplate, rest)
	}
	return out, nil
}
