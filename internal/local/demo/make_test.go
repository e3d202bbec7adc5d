package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestMakeDemoStdoutIsOnlyTheDemo runs the Makefile's demo target with a stand-in bin/gapless
// (GO=true leaves it alone): stdout must be exactly what the demo printed, so that
// `make demo DEMO_FLAGS=--json | jq` works; make's own lines go to stderr or nowhere.
func TestMakeDemoStdoutIsOnlyTheDemo(t *testing.T) {
	t.Parallel()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := "#!/bin/sh\necho '{\"lost\":0,\"args\":\"'\"$*\"'\"}'\n"
	if err := os.WriteFile(filepath.Join(bin, "gapless-dev"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// DEMO_DEPS without tools: this test never installs the emulators (npm ci would replace
	// tools/node_modules, which may be shared).
	cmd := exec.CommandContext(ctx, makeBin, "demo", "DEMO_DEPS=gapless", "GO=true", "BIN="+bin, "DEMO_FLAGS=--json --seed 7")
	cmd.Dir = root // as a user runs it (make -C would add "Entering directory" lines)
	// As a user runs it from a shell: not as a sub-make of `make test`, whose MAKELEVEL and
	// MAKEFLAGS would turn on make's "Entering directory" lines.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKELEVEL" && k != "MAKEFLAGS" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("make demo: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	if got, want := out.String(), "{\"lost\":0,\"args\":\"demo --json --seed 7\"}\n"; got != want {
		t.Fatalf("stdout = %q, want only the demo's output %q (stderr: %s)", got, want, errb.String())
	}
	if !strings.Contains(errb.String(), "building") {
		t.Errorf("stderr does not say what make is doing: %q", errb.String())
	}
}
