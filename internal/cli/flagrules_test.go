package cli

import (
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/config"
)

// functionsAccept reports whether the functions accept name=value at cold start (the
// reconciler's loader: it reads every variable the CLI shares with them).
func functionsAccept(name, value string) bool {
	env := map[string]string{
		config.EnvGroup: "g", config.EnvCheckpointTable: "c", config.EnvDedupeTable: "d",
		config.EnvParkedQueueURL: "http://q", config.EnvTargetQueueURL: "http://t",
		config.EnvPayloadBucket: "payloads", config.EnvStreamName: "s", name: value,
	}
	_, err := config.LoadReconciler(func(k string) string { return env[k] })
	return err == nil
}

// TestFlagsFollowTheFunctionsRules: a flag that sets a value the functions also read from a
// variable accepts exactly what the functions accept, and so does the variable when the CLI
// takes its default from it. Before, MAX_RECORD_ATTEMPTS=abc was ignored, and LEDGER_TTL=1h,
// --ledger-ttl 1m and --settle -5m were accepted although the functions refuse them.
func TestFlagsFollowTheFunctionsRules(t *testing.T) {
	cases := []struct {
		cmd, flag, env string
		values         []string
	}{
		{"replay", "max-attempts", config.EnvMaxRecordAttempts, []string{"0", "1", "5", "1000", "1001", "abc", "-3"}},
		{"redrive", "max-attempts", config.EnvMaxRecordAttempts, []string{"0", "7", "1001"}},
		{"replay", "ledger-ttl", config.EnvLedgerTTL, []string{"1m", "1h", "24h59m", "25h", "192h", "-1h", "0s", "abc"}},
		{"redrive", "ledger-ttl", config.EnvLedgerTTL, []string{"1h", "400h"}},
		{"status", "settle", config.EnvSettleAfter, []string{"-5m", "0s", "1s", "30m", "abc"}},
	}
	// status's --settle is a view of the stream, not a deployed value: 0 (every missing record
	// is a gap now) is accepted there, while SETTLE_AFTER=0 is refused as the functions refuse it.
	settleView := map[string]bool{"0s": true}
	for _, tc := range cases {
		for _, v := range tc.values {
			want := functionsAccept(tc.env, v)
			t.Run(tc.cmd+" --"+tc.flag+"="+v, func(t *testing.T) {
				_, stderr, code := gapless(t, tc.cmd, "--"+tc.flag+"="+v, "--no-such-flag")
				refused := strings.Contains(stderr, "for flag --"+tc.flag)
				accept := want || tc.flag == "settle" && settleView[v]
				if refused == accept || code != 2 {
					t.Errorf("accepted %s=%s: %v; the flag: exit %d, %s", tc.env, v, accept, code, firstLine(stderr))
				}
			})
			if tc.cmd == "redrive" {
				continue // with every flag valid, redrive goes on to the queue: its flags are checked above
			}
			t.Run(tc.cmd+" with "+tc.env+"="+v, func(t *testing.T) {
				// Without a group (status) or a range (replay) the command stops before any
				// client is built, with a usage error, once the variables have been checked.
				t.Setenv(config.EnvGroup, "")
				t.Setenv(tc.env, v)
				_, stderr, code := gapless(t, tc.cmd)
				refused := strings.Contains(stderr, tc.env+"=")
				if refused == want || code != 2 {
					t.Errorf("functions accept %s=%s: %v; the CLI: exit %d, %s", tc.env, v, want, code, firstLine(stderr))
				}
				if refused && !strings.Contains(stderr, "--"+tc.flag) {
					t.Errorf("the refusal does not name the flag that overrides %s: %s", tc.env, firstLine(stderr))
				}
			})
		}
	}
}

// TestFlagsOfTheCLIOnly: flags with no function variable are held to their own ranges (the
// developer tool's invoke --timeout is tested with its command).
func TestFlagsOfTheCLIOnly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" = accepted
	}{
		{[]string{"status", "--max-records", "-1"}, "for flag --max-records"},
		{[]string{"status", "--max-records", "0"}, "for flag --max-records"},
		{[]string{"status", "--max-records", "1"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := gapless(t, append(tc.args, "--no-such-flag")...)
			if code != 2 {
				t.Fatalf("exit %d", code)
			}
			got := strings.Contains(stderr, "for flag --")
			if tc.want == "" && got || tc.want != "" && !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want %q", firstLine(stderr), tc.want)
			}
		})
	}
}

// TestMisspeltSuggestion: a misspelt flag or command gets the nearest one suggested; a word
// far from every name gets none.
func TestMisspeltSuggestion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--ledger-tl", "30h"}, "(did you mean --ledger-ttl?)"},
		{[]string{"status", "--setle", "1m"}, "(did you mean --settle?)"},
		{[]string{"stauts"}, `(did you mean "status"?)`},
		{[]string{"redirve"}, `(did you mean "redrive"?)`},
		{[]string{"status", "--xyz"}, ""},
		{[]string{"frobnicate"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := gapless(t, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d", code)
			}
			if tc.want == "" && strings.Contains(stderr, "did you mean") || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want %q", firstLine(stderr), tc.want)
			}
		})
	}
}

// TestErrorNamesTheCommandOnce: an error of the package behind a command that starts with the
// command's name is printed with the name once (it read "gapless doctor: doctor: template: ...").
func TestErrorNamesTheCommandOnce(t *testing.T) {
	_, stderr, code := gapless(t, "doctor", "--template", t.TempDir()+"/missing.yaml")
	if code != 1 || strings.Count(stderr, "doctor:") != 1 || !strings.Contains(stderr, "missing.yaml") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestNearest: a swap of two neighbouring letters is one edit, so a short name misspelt that
// way still gets its suggestion; a word as far from a name as it is long gets none.
func TestNearest(t *testing.T) {
	names := []string{"bench", "demo", "down", "invoke", "status", "up"}
	for _, tc := range []struct{ in, want string }{
		{"dmeo", "demo"},
		{"dwon", "down"},
		{"invkoe", "invoke"},
		{"stats", "status"},
		{"pu", ""},
		{"xyzw", ""},
	} {
		if got := nearest(tc.in, names); got != tc.want {
			t.Errorf("nearest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
