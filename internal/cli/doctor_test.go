package cli

import (
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestDoctorOffline: the checkout's template passes (exit 0) for every samconfig environment;
// a parameter that breaks a rule is one ERROR line naming the check and its fix, and exit 1.
func TestDoctorOffline(t *testing.T) {
	for _, env := range []string{"default", "dev", "prod"} {
		stdout, stderr, code := gapless(t, "doctor", "--config-env", env)
		if code != 0 || strings.Contains(stdout, "ERROR") || !strings.Contains(stdout, "ok: ") {
			t.Errorf("[%s]: exit %d, stderr %q\n%s", env, code, stderr, stdout)
		}
	}
	stdout, stderr, code := gapless(t, "doctor", "--parameter-overrides", "MaximumRetryAttempts=-1")
	if code != 1 || strings.Count(stdout, "ERROR") != 1 || !strings.Contains(stdout, "ERROR   mapping.retries-infinite: ") ||
		!strings.Contains(stdout, "fix: set MaximumRetryAttempts") || !strings.Contains(stdout, "FAIL: ") ||
		!strings.Contains(stderr, "error-level findings: 1") {
		t.Errorf("broken override: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	// --kpl yes with the template's ParallelizationFactor 4 is an error; --json says so too.
	stdout, _, code = gapless(t, "doctor", "--kpl", "yes", "--json")
	rep := decodeJSON[struct {
		Errors   int `json:"errors"`
		Findings []struct {
			ID, Level string
		} `json:"findings"`
	}](t, stdout)
	if code != 1 || rep.Errors != 1 || rep.Findings[0].ID != "kpl.parallelization" || rep.Findings[0].Level != "error" {
		t.Errorf("--kpl yes: exit %d, %+v", code, rep)
	}
	for _, bad := range [][]string{{"doctor", "--kpl", "maybe"}, {"doctor", "--parameter-overrides", "NoSuchParameter=1"}, {"doctor", "--config-env", "nosuch"}} {
		if _, _, code := gapless(t, bad...); code == 0 {
			t.Errorf("%v: exit 0", bad)
		}
	}
}

// TestDoctorLiveLocal runs doctor --live against the local stack: the stream, tables and
// checkpoints are the stack's, the mapping the emulated one configured from template.yaml.
func TestDoctorLiveLocal(t *testing.T) {
	stream, _ := stacktest.Stream(t, 1)
	args := []string{"doctor", "--live", "--kpl", "no", "--group", "g", "--stream", stream,
		"--checkpoint-table", stacktest.CheckpointTable(t), "--dedupe-table", stacktest.LedgerTable(t)}
	stdout, stderr, code := gapless(t, args...)
	if code != 0 || !strings.Contains(stdout, "gapless doctor: local stack "+stream) || !strings.Contains(stdout, "retention (24h)") {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	// A stream that does not exist is an error naming it, not a report.
	_, stderr, code = gapless(t, "doctor", "--live", "--group", "g", "--stream", "no-such-stream", "--checkpoint-table", "c", "--dedupe-table", "d")
	if code != 1 || !strings.Contains(stderr, "no-such-stream") {
		t.Errorf("missing stream: exit %d, stderr %q", code, stderr)
	}
}
