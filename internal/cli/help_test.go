package cli

import (
	"strings"
	"testing"
)

// TestEverySubcommandHelp: `gapless <cmd> -h` (and --help, and `gapless help <cmd>`) prints the
// help in one format on stdout and exits 0; no default is shown twice, no internal flag shown.
func TestEverySubcommandHelp(t *testing.T) {
	t.Setenv("GAPLESS_GROUP", "set-by-env") // an env-backed default must not add a second "(default"
	t.Setenv("LEDGER_TTL", "400h")
	for name := range commands {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				stdout, stderr, code := gapless(t, args...)
				if code != 0 || stderr != "" {
					t.Fatalf("exit %d, stderr %q", code, stderr)
				}
				if !strings.HasPrefix(stdout, "usage: gapless "+name) {
					t.Errorf("stdout does not start with the usage line: %q", firstLine(stdout))
				}
				if !strings.Contains(stdout, "\n  --") {
					t.Errorf("no --flag lines:\n%s", stdout)
				}
				for _, line := range strings.Split(stdout, "\n") {
					if strings.Count(line, "(default") > 1 {
						t.Errorf("default shown twice: %q", line)
					}
					if strings.Contains(line, "internal:") || strings.HasPrefix(strings.TrimSpace(line), "-"+"memory-child") {
						t.Errorf("internal flag shown: %q", line)
					}
					if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && !strings.HasPrefix(line, "  -e ") {
						t.Errorf("flag not written --name: %q", line)
					}
				}
			})
		}
	}
	stdout, _, code := gapless(t, "-h")
	if code != 0 || !strings.HasPrefix(stdout, "usage: gapless <command>") {
		t.Errorf("gapless -h: exit %d, stdout %q", code, firstLine(stdout))
	}
}

// TestUnexpectedArgument: a positional argument no subcommand takes is an error in one line
// (exit 2), as is an unknown flag.
func TestUnexpectedArgument(t *testing.T) {
	var cases [][]string
	for name := range commands {
		cases = append(cases, []string{name, "--no-such-flag"})
		if name == "invoke" {
			cases = append(cases, []string{name, "ConsumerFunction", "-e", "x.json", "extra"})
		} else {
			cases = append(cases, []string{name, "extra"})
		}
	}
	for _, args := range cases {
		name := args[0]
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr, code := gapless(t, args...)
			if code != 2 || stdout != "" {
				t.Fatalf("exit %d, stdout %q", code, stdout)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "gapless "+name+": ") || lines[1] != "run 'gapless "+name+" -h' for its flags" {
				t.Errorf("stderr is not one error line and the pointer to -h:\n%s", stderr)
			}
		})
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
