package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// modulePackages lists the module's package directories relative to the root ("" for the root).
func modulePackages(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(strings.TrimPrefix(p, publicPackage), "/"))
	}
	return pkgs
}

// covered reports whether pkg or one of its parents is among paths.
func covered(pkg string, paths map[string]bool) bool {
	for p := pkg; ; p = filepath.Dir(p) {
		if paths[p] {
			return true
		}
		if p == "." || p == "/" || !strings.Contains(p, "/") {
			return paths[p]
		}
	}
}

// checkMap: every package of the module is named (itself or a parent directory) by the
// document's map, and every directory the map names exists.
func checkMap(t *testing.T, doc string, named map[string]bool) {
	t.Helper()
	if len(named) < 10 {
		t.Fatalf("%s: found only %d paths: %v", doc, len(named), named)
	}
	for _, pkg := range modulePackages(t) {
		if pkg == "" {
			pkg = publicPackage
		}
		if !covered(pkg, named) {
			t.Errorf("%s does not name the package %s", doc, pkg)
		}
	}
	for p := range named {
		if p == publicPackage {
			continue
		}
		if fi, err := os.Stat(filepath.Join(repoRoot(t), p)); err != nil || !fi.IsDir() {
			t.Errorf("%s names %s, which is not a directory of the tree", doc, p)
		}
	}
}

var pathToken = regexp.MustCompile("`((?:github\\.com/gapless-dev/gapless|cmd|deploy|events|examples|functions|internal|process)(?:/[a-z0-9_-]+)*)/?`")

// TestDesignPackageMapMatchesTheTree: docs/design.md's package table names every package of the
// module, and nothing that is not there.
func TestDesignPackageMapMatchesTheTree(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Packages\n")
	section, _, _ = strings.Cut(section, "\n## ")
	named := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range pathToken.FindAllStringSubmatch(first, -1) {
			named[m[1]] = true
		}
	}
	checkMap(t, "docs/design.md", named)
}

// TestLayoutMatchesTheTree: the annotated tree in docs/design.md's Layout section names every
// package of the module, and nothing that is not there.
func TestLayoutMatchesTheTree(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Layout\n")
	_, block, _ := strings.Cut(section, "```\n")
	block, _, _ = strings.Cut(block, "```\n")
	named := map[string]bool{}
	dir := regexp.MustCompile(`^((?:[a-z0-9_-]+/)+)(?:,\s+((?:[a-z0-9_-]+/)+))?\s`)
	for _, line := range strings.Split(block, "\n") {
		if m := dir.FindStringSubmatch(line); m != nil {
			for _, p := range m[1:] {
				if p != "" {
					named[strings.TrimSuffix(p, "/")] = true
				}
			}
		}
		if strings.HasPrefix(line, "*.go (root)") {
			named[publicPackage] = true
		}
	}
	checkMap(t, "docs/design.md's layout", named)
}
