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
	"unicode"
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

// mdLink is a Markdown link's target: a path relative to the document, an optional #anchor.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// sectionCite is a citation of a document's section in prose or comments:
// a document's path, a comma and the quoted beginning of a heading (a comment's line breaks and
// markers inside the quote are read as one space).
var sectionCite = regexp.MustCompile(`(docs/[a-z-]+\.md|README\.md),\s+\\?"([^"\\]+)\\?"`)

// commentMarks are the line breaks of a comment or YAML block inside a quoted heading.
var commentMarks = regexp.MustCompile(`\n\s*(//|#)?`)

// headingSlug is the anchor GitHub gives a heading: lower case, punctuation other than '-' and
// '_' dropped, spaces as '-'.
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headings reads a Markdown file's headings (outside code blocks).
func headings(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			hs = append(hs, strings.TrimSpace(strings.TrimLeft(line, "#")))
		}
	}
	return hs
}

// TestDocReferencesResolve: every relative link of the project's Markdown documents names a file
// that exists and, with an anchor, a heading of it; every citation of a document's section
// (its path, then the quoted heading) in the documents, the Go sources and the templates names a heading
// that begins with the quoted text. A moved or renamed section fails here, not in a reader's
// browser.
func TestDocReferencesResolve(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", ".local", "reports", "bin", ".aws-sam", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".md", ".go", ".yaml", ".tmpl":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string][]string{}
	headingsOf := func(p string) []string {
		if hs, ok := cache[p]; ok {
			return hs
		}
		cache[p] = headings(t, p)
		return cache[p]
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		text := string(b)
		if filepath.Ext(f) == ".md" {
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.Join(filepath.Dir(f), path)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s: no such file", rel, target)
					continue
				}
				checked++
				if anchor == "" || filepath.Ext(file) != ".md" {
					continue
				}
				found := false
				for _, h := range headingsOf(file) {
					found = found || headingSlug(h) == anchor
				}
				if !found {
					t.Errorf("%s links to %s: no heading with that anchor", rel, target)
				}
			}
		}
		for _, m := range sectionCite.FindAllStringSubmatch(text, -1) {
			doc := filepath.Join(root, m[1])
			if _, err := os.Stat(doc); err != nil {
				t.Errorf("%s cites %s: no such document", rel, m[1])
				continue
			}
			checked++
			quoted := strings.ToLower(strings.Join(strings.Fields(commentMarks.ReplaceAllString(m[2], " ")), " "))
			found := false
			for _, h := range headingsOf(doc) {
				found = found || strings.HasPrefix(strings.ToLower(h), quoted)
			}
			if !found {
				t.Errorf("%s cites %s, %q: no heading begins so", rel, m[1], m[2])
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d references: the patterns no longer match the documents", checked)
	}
	t.Logf("%d references checked in %d files", checked, len(files))
}
