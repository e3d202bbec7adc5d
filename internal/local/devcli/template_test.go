package devcli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/samtemplate"
)

// TestRepositoryTemplateWithItsEnvFile: events/env.json sets every variable the root
// template.yaml gives an intrinsic value, so invoke runs both functions in this checkout, with
// the template's timeouts (ConsumerTimeoutSeconds' default and 300 s).
func TestRepositoryTemplateWithItsEnvFile(t *testing.T) {
	t.Parallel()
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	tp, err := samtemplate.Read(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := readEnvFile(filepath.Join(root, "events", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	for id := range chaosFunctions {
		f, err := lookupFunction(tp, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Env(env); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		if f.Timeout < time.Second || f.Timeout > 15*time.Minute {
			t.Errorf("%s: timeout %v", id, f.Timeout)
		}
	}
}

// TestBuild: a makefile target gets ARTIFACTS_DIR and GOARCH_LAMBDA/GOARCH of this machine and
// must leave an executable bootstrap there; a Go CodeUri without metadata is built with go
// build; an unknown BuildMethod is refused naming it.
func TestBuild(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs make and go build")
	}
	dir := t.TempDir()
	files := map[string]string{
		"Makefile": "build-Good:\n\t@test \"$(GOARCH_LAMBDA)\" = \"$$GOARCH\" && test \"$$GOOS\" = linux\n\tprintf '#!/bin/sh\\n' > $(ARTIFACTS_DIR)/bootstrap && chmod +x $(ARTIFACTS_DIR)/bootstrap\n" +
			"build-Empty:\n\t@true\n",
		"gofn/go.mod":  "module example.com/gofn\n\ngo 1.22\n",
		"gofn/main.go": "package main\n\nfunc main() {}\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		fn  samtemplate.Function
		err string
	}{
		{fn: samtemplate.Function{LogicalID: "Good", CodeDir: dir, BuildMethod: "makefile"}},
		{fn: samtemplate.Function{LogicalID: "Empty", CodeDir: dir, BuildMethod: "makefile"}, err: "no executable bootstrap"},
		{fn: samtemplate.Function{LogicalID: "Plain", CodeDir: filepath.Join(dir, "gofn")}},
		{fn: samtemplate.Function{LogicalID: "NoGo", CodeDir: dir}, err: "holds no Go package"},
		{fn: samtemplate.Function{LogicalID: "Rust", CodeDir: dir, BuildMethod: "rust-cargolambda"}, err: `BuildMethod "rust-cargolambda"`},
	} {
		t.Run(tc.fn.LogicalID, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "build", tc.fn.LogicalID, "bootstrap")
			var log bytes.Buffer
			err := build(context.Background(), dir, &tc.fn, out, &log)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want one saying %q\n%s", err, tc.err, log.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
		})
	}
}
