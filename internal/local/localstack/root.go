package localstack

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the module the repository root's go.mod declares.
const ModulePath = "github.com/gapless-dev/gapless"

// isRoot reports whether dir holds the go.mod of ModulePath.
func isRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == ModulePath
		}
	}
	return false
}
