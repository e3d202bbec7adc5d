package cli

import (
	"strings"
	"testing"
)

// TestStatusNamesWhatIsWrong: a stream, table or group that does not exist is one line naming
// it and the flag (and variable) to fix, exit 1: not an SDK error, not a table of zeros.
func TestStatusNamesWhatIsWrong(t *testing.T) {
	s := newOpsStack(t)
	s.putN(3)

	// No group has consumed anything yet: status works and says so.
	stdout, stderr, code := gapless(t, append([]string{"status"}, s.args()...)...)
	if code != 0 || !strings.Contains(stderr, "no group has a checkpoint on stream "+s.stream) || !strings.Contains(stdout, "SHARD") {
		t.Fatalf("fresh stream: exit %d, stderr %q", code, stderr)
	}

	s.run(0, 3, false, 5, true) // group s.group has a checkpoint now
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"stream", s.argsWith("--stream", "no-such-stream"), `stream "no-such-stream" does not exist (--stream or $STREAM_NAME)`},
		{"checkpoint table", s.argsWith("--checkpoint-table", "no-such-table"), `table "no-such-table" does not exist (--checkpoint-table or $CHECKPOINT_TABLE)`},
		{"ledger table", s.argsWith("--dedupe-table", "no-such-ledger"), `table "no-such-ledger" does not exist (--dedupe-table or $DEDUPE_TABLE)`},
		{"group", s.argsWith("--group", "no-such-group"), `group "no-such-group" does not exist on stream ` + s.stream + `: table ` + s.cpTable + ` has checkpoints of group ` + s.group + ` there (--group or $GAPLESS_GROUP)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := gapless(t, append([]string{"status"}, tc.args...)...)
			if code != 1 || stdout != "" {
				t.Fatalf("exit %d, stdout %q", code, stdout)
			}
			if got := strings.TrimSpace(stderr); got != "gapless status: "+tc.want {
				t.Errorf("stderr %q\nwant     %q", got, "gapless status: "+tc.want)
			}
		})
	}
	if _, stderr, code := gapless(t, append([]string{"status"}, s.args()...)...); code != 0 || stderr != "" {
		t.Errorf("right names: exit %d, stderr %q", code, stderr)
	}
}

// argsWith is args with one flag's value replaced.
func (s *opsStack) argsWith(flag, value string) []string {
	args := s.args()
	for i := range args {
		if args[i] == flag {
			args[i+1] = value
		}
	}
	return args
}
