package cli

import (
	"strings"
	"testing"
)

// TestPrintableEscapesTerminalControls: text from message data is printed without anything a
// terminal would act on.
func TestPrintableEscapesTerminalControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain record shardId-1:5:0 processed": "plain record shardId-1:5:0 processed",
		"\x1b[2J\x1b]0;owned\x07":              `\x1b[2J\x1b]0;owned\a`,
		"a\nb\rc\td":                           `a\nb\rc\td`,
		"bad \xff byte":                        `bad \xff byte`,
		"c1 \u009b31m":                         `c1 \u009b31m`,
		"bidi \u202e reversed":                 `bidi \u202e reversed`,
		"é ünïcode ✓":                          "é ünïcode ✓",
	} {
		if got := printable(in, false); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRedriveProgressIsEscaped: the progress line printed for a parked message escapes control
// characters from its data.
func TestRedriveProgressIsEscaped(t *testing.T) {
	line := redriveLine("shardId-1:5:0", "m-1", "refused", 0, "park id \"\x1b[31mforged\" not recorded")
	if strings.ContainsRune(line, 0x1b) || !strings.Contains(line, `\x1b[31m`) {
		t.Fatalf("progress line %q", line)
	}
}
