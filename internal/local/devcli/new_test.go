package devcli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestNewFlagErrors: every bad invocation of `gapless-dev new` exits 2 naming the bad input,
// and writes nothing.
func TestNewFlagErrors(t *testing.T) {
	t.Parallel()
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(full, "main.go")
	for _, tc := range []struct {
		name string
		args []string // after "new"; "NEW" is replaced by a directory that does not exist yet
		want string
	}{
		{"no directory", []string{"--module", "example.com/orders"}, "the target directory is required"},
		{"no module", []string{"NEW"}, "--module is required"},
		{"directory after the flags, no module", []string{"--name", "orders", "NEW"}, "--module is required"},
		{"empty module element", []string{"NEW", "--module", "example.com//orders"}, `element ""`},
		{"space in module", []string{"NEW", "--module", "example.com/my orders"}, `invalid module path "example.com/my orders"`},
		{"module ends with a dot", []string{"NEW", "--module", "example.com/orders."}, `element "orders."`},
		{"gapless's own module", []string{"NEW", "--module", "github.com/gapless-dev/gapless/orders"}, "it is gapless's own"},
		{"upper-case name", []string{"NEW", "--module", "example.com/orders", "--name", "Orders"}, `--name "Orders"`},
		{"name starting with a digit", []string{"NEW", "--module", "example.com/orders", "--name", "1orders"}, `--name "1orders"`},
		{"module suggests no valid name", []string{"NEW", "--module", "example.com/orders_v1"}, `suggests the service name "orders_v1", which is not valid`},
		{"non-empty directory", []string{full, "--module", "example.com/orders"}, "is not empty: " + full + " holds main.go"},
		{"directory is a file", []string{file, "--module", "example.com/orders"}, file + " is a file"},
		{"gapless-dir not a checkout", []string{"NEW", "--module", "example.com/orders", "--gapless-dir", full}, "--gapless-dir " + full + ": not a gapless checkout"},
		{"unknown flag", []string{"NEW", "--module", "example.com/orders", "--gapless", root}, "unknown flag --gapless"},
		{"two directories", []string{"NEW", "--module", "example.com/orders", "other"}, `one target directory, not 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "orders")
			args := []string{"new"}
			for _, a := range tc.args {
				if a == "NEW" {
					a = dir
				}
				args = append(args, a)
			}
			_, stderr, code := gapless(t, args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("gapless-dev %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, stderr, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s was written: %v", dir, err)
			}
		})
	}
}

// TestNewDefaults: the service name comes from the module path's last element (before a major
// version suffix), the package name from the service name.
func TestNewDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ module, name, pkg string }{
		{"example.com/orders", "orders", "orders"},
		{"example.com/team/order-writer", "order-writer", "orderwriter"},
		{"example.com/orders/v2", "orders", "orders"},
		{"orders", "orders", "orders"},
		{"example.com/Billing", "billing", "billing"},
		{"example.com/go", "go", "gosvc"},
	} {
		if got := defaultName(tc.module); got != tc.name {
			t.Errorf("defaultName(%q) = %q, want %q", tc.module, got, tc.name)
		}
		if got := packageName(tc.name); got != tc.pkg {
			t.Errorf("packageName(%q) = %q, want %q", tc.name, got, tc.pkg)
		}
	}
}

// inDir runs a command in dir, bounded by ctx, and returns its combined output.
func inDir(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestNew renders a service with `gapless-dev new` into a directory outside the repository,
// built against this checkout (--gapless-dir), and holds it to the project's own checks from
// that directory: `gapless doctor` finds no error, cfn-lint nothing, go vet nothing, and the
// service's own tests pass against the local stack (TestMain's, whose AWS_ENDPOINT_URL_* the
// go command passes on): the unit test of the Process and both functions run end to end.
func TestNew(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy, go vet and go test in a new module")
	}
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "orders")
	stdout, stderr, code := gapless(t, "new", dir, "--module", "example.com/orders", "--gapless-dir", root)
	if code != 0 {
		t.Fatalf("gapless-dev new: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"running `go mod tidy` in " + dir, "cd " + dir, "make lint test", "sam build && sam deploy --guided",
		"gapless-dev up", "gapless-dev invoke ConsumerFunction -e events/kinesis.json", ". .local/unset.env"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("gapless-dev new's output does not say %q:\n%s", want, stdout)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"module example.com/orders\n", "github.com/gapless-dev/gapless " + versionOf(t), "replace github.com/gapless-dev/gapless => " + root + "\n"} {
		if !strings.Contains(string(gomod), want) {
			t.Errorf("go.mod does not hold %q:\n%s", want, gomod)
		}
	}
	if !fileExists(filepath.Join(dir, "go.sum")) {
		t.Error("no go.sum: go mod tidy did not run")
	}
	// A second run refuses the directory it wrote.
	if _, stderr, code := gapless(t, "new", dir, "--module", "example.com/orders"); code != 2 || !strings.Contains(stderr, dir+" holds") {
		t.Errorf("gapless-dev new on the written directory: exit %d, %s", code, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The steps run in order from the service's directory; each is what a user of the service
	// runs there (its README's commands).
	t.Chdir(dir)
	t.Setenv(localstack.RootEnvVar, root) // the test binary is not in the checkout's bin/
	dev := func(t *testing.T, args ...string) string {
		t.Helper()
		stdout, stderr, code := gapless(t, args...)
		if code != 0 {
			t.Fatalf("gapless-dev %s: exit %d\n%s\n%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}
	t.Cleanup(func() { gapless(t, "down") })
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"doctor", func(t *testing.T) {
			// doctor reads the template and the samconfig.toml beside it as the user's shell would
			stdout, stderr, code := gapless(t, "doctor", "--template", "template.yaml")
			if code != 0 || !strings.Contains(stdout, " 0 errors") {
				t.Errorf("gapless doctor --template template.yaml: exit %d\n%s\n%s", code, stdout, stderr)
			}
		}},
		{"cfn-lint", func(t *testing.T) {
			if _, err := exec.LookPath("cfn-lint"); err != nil {
				t.Skip("cfn-lint is not on PATH: the template was not linted")
			}
			if out, err := inDir(ctx, dir, "cfn-lint", "template.yaml"); err != nil || strings.TrimSpace(out) != "" {
				t.Errorf("cfn-lint template.yaml: %v\n%s", err, out)
			}
		}},
		{"go vet", func(t *testing.T) {
			if out, err := inDir(ctx, dir, "go", "vet", "./..."); err != nil {
				t.Errorf("go vet ./...: %v\n%s", err, out)
			}
		}},
		{"go test", func(t *testing.T) {
			out, err := inDir(ctx, dir, "go", "test", "-count=1", "-v", "./...")
			if err != nil {
				t.Fatalf("go test ./...: %v\n%s", err, out)
			}
			for _, want := range []string{"--- PASS: TestProcessIsIdempotent", "--- PASS: TestWritesEveryRecordOnce"} {
				if !strings.Contains(out, want) {
					t.Errorf("go test ./... did not report %q (skipped without the stack?):\n%s", want, out)
				}
			}
		}},
		{"up", func(t *testing.T) {
			dev(t, "up", "--free-ports")
			if !fileExists(filepath.Join(dir, ".local", "stack.env")) {
				t.Fatal("gapless-dev up wrote no .local/stack.env next to template.yaml")
			}
		}},
		{"invoke", func(t *testing.T) {
			event := dev(t, "generate-event", "kinesis", "--stream", "orders-stream", "events/payloads.jsonl")
			if err := os.WriteFile("event.json", []byte(event), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, ev := range []string{"event.json", "events/kinesis.json"} {
				if got := strings.TrimSpace(dev(t, "invoke", "ConsumerFunction", "-e", ev)); got != `{"batchItemFailures":null}` {
					t.Errorf("invoke ConsumerFunction -e %s: response %q, want every record done", ev, got)
				}
			}
			if got := dev(t, "invoke", "ReconcilerFunction", "-e", "events/schedule.json"); !json.Valid([]byte(got)) {
				t.Errorf("invoke ReconcilerFunction: response %q is not JSON", got)
			}
		}},
	} {
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
	}
}

// versionOf is the release gapless-dev version reports.
func versionOf(t *testing.T) string {
	t.Helper()
	stdout, _, code := gapless(t, "version", "--short")
	if code != 0 {
		t.Fatalf("gapless-dev version --short: exit %d", code)
	}
	return strings.TrimSpace(stdout)
}
