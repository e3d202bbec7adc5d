package gapless_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeSnippetCompiles: the program README.md's "Use gapless in your own service" shows
// builds and vets against this package as written.
func TestReadmeSnippetCompiles(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Use gapless in your own service\n")
	if !ok {
		t.Fatal(`README.md has no "## Use gapless in your own service" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, code, ok := strings.Cut(section, "```go\n")
	if code, _, ok = strings.Cut(code, "```\n"); !ok || !strings.Contains(code, "gapless.StartConsumer") {
		t.Fatalf("no go block calling gapless.StartConsumer in the section:\n%s", section)
	}
	// A directory inside the module (the go tool skips names starting with _ in ./...).
	dir, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "vet", "./"+filepath.ToSlash(dir)).CombinedOutput(); err != nil {
		t.Fatalf("go vet of README.md's program: %v\n%s\n%s", err, out, code)
	}
}
