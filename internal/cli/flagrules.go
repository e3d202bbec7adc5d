package cli

import (
	"flag"
	"fmt"
	"strconv"
	"time"
)

// A flag held to a rule: its value is refused while the flags are parsed (exit 2, naming the
// flag), the way the functions refuse the variable that sets the same value at cold start. A
// rule returns why a value is refused, "" when it is accepted (the config package's rules).

type ruledInt struct {
	p    *int
	rule func(int) string
}

func (v ruledInt) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v ruledInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not an integer")
	}
	if why := v.rule(n); why != "" {
		return fmt.Errorf("%s", why)
	}
	*v.p = n
	return nil
}

func (ruledInt) typeName() string { return "int" }

type ruledDuration struct {
	p    *time.Duration
	rule func(time.Duration) string
}

func (v ruledDuration) String() string {
	if v.p == nil {
		return "0s"
	}
	return v.p.String()
}

func (v ruledDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a Go duration like 30m or 192h")
	}
	if why := v.rule(d); why != "" {
		return fmt.Errorf("%s", why)
	}
	*v.p = d
	return nil
}

func (ruledDuration) typeName() string { return "duration" }

// intFlag declares an int flag whose values must pass rule.
func intFlag(fs *flag.FlagSet, p *int, name string, def int, usage string, rule func(int) string) {
	*p = def
	fs.Var(ruledInt{p, rule}, name, usage)
}

// durationFlag declares a duration flag whose values must pass rule.
func durationFlag(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string, rule func(time.Duration) string) {
	*p = def
	fs.Var(ruledDuration{p, rule}, name, usage)
}

// atLeast is the rule of a count that must be min or more.
func atLeast(min int) func(int) string {
	return func(n int) string {
		if n < min {
			return fmt.Sprintf("must be %d or more", min)
		}
		return ""
	}
}

// notNegative is the rule of a window that may be 0 (none) but not negative.
func notNegative(d time.Duration) string {
	if d < 0 {
		return "must be 0 or more"
	}
	return ""
}

// functionTimeout is the rule of a Lambda function timeout: 1 s to 900 s (Lambda's limit, AWS
// Lambda developer guide, "Configure Lambda function timeout").
func functionTimeout(d time.Duration) string {
	if d < time.Second || d > 900*time.Second {
		return "must be from 1s to 15m, as a Lambda function's timeout"
	}
	return ""
}
