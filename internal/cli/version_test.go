package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	root "github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestVersion: the binary reports the module's release, which is the first release CHANGELOG.md
// describes and a semantic version a tag can carry.
func TestVersion(t *testing.T) {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(root.Version) {
		t.Fatalf("root.Version %q is not vMAJOR.MINOR.PATCH", root.Version)
	}
	stdout, _, code := gapless(t, "version", "--short")
	if code != 0 || strings.TrimSpace(stdout) != root.Version {
		t.Errorf("version --short: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		stdout, _, code := gapless(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "gapless "+root.Version+" (") {
			t.Errorf("%v: exit %d, %q", args, code, stdout)
		}
	}
	dir, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v\S+)`).FindStringSubmatch(string(b))
	if m == nil || m[1] != root.Version {
		t.Errorf("CHANGELOG.md's first release is %v, root.Version %s", m, root.Version)
	}
}
