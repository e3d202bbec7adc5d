package deploy

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// harnessPrefix is the parent of every package that exists to test or demonstrate gapless
// (the local event-source mapping, the runtime emulator driver, the fault proxy, chaos, the
// demo, the benchmarks, the local stack). docs/design.md states the rule: the harness imports
// the product, never the reverse, and no deployed binary links any of it.
const harnessPrefix = "github.com/gapless-dev/gapless/internal/local/"

// deps lists the packages a function's build links, for the target sam build uses
// (mk/sam.mk: linux/arm64, -tags lambda.norpc) plus extra tags.
func deps(t *testing.T, pkg, tags string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", tags, "-f", "{{.ImportPath}}", pkg)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestProductionBuildLinksNoHarness: the deployed functions contain no fault injection, no
// emulator and no demo code, so nothing in production can be switched into a test mode by an
// environment variable. The harness build (-tags gapless_chaos, what gapless demo and gapless
// invoke build) does link chaos: that half proves the check sees a harness package when one is
// there.
func TestProductionBuildLinksNoHarness(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"./functions/consumer", "./functions/reconciler"} {
		t.Run(pkg, func(t *testing.T) {
			var linked []string
			for _, p := range deps(t, pkg, "lambda.norpc") {
				if strings.HasPrefix(p, harnessPrefix) {
					linked = append(linked, p)
				}
			}
			if len(linked) > 0 {
				t.Errorf("the production build of %s links harness packages: %s", pkg, strings.Join(linked, ", "))
			}
			chaos := harnessPrefix + "chaos"
			found := false
			for _, p := range deps(t, pkg, "lambda.norpc,gapless_chaos") {
				found = found || p == chaos
			}
			if !found {
				t.Errorf("the harness build of %s (-tags gapless_chaos) does not link %s: the demo could not inject faults", pkg, chaos)
			}
		})
	}
}

// TestProductImportsNoHarness checks the one-way rule for every package outside the harness,
// the operator CLI (cmd/gapless, internal/cli) included: none imports a package under
// internal/local. Test files may (they start emulators).
func TestProductImportsNoHarness(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	const module = "github.com/gapless-dev/gapless/"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if strings.HasPrefix(pkg, harnessPrefix) {
			continue
		}
		checked++
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, harnessPrefix) {
				t.Errorf("%s imports the harness package %s", pkg, imp)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d product packages; go list output:\n%s", checked, out)
	}
}

// TestOperatorCLILinksNoHarness: the operator binary, which runs against production, links
// nothing of the harness (the developer tool, internal/local/cmd/gapless-dev, holds up, down,
// invoke, demo and bench). The developer tool's half proves the check sees the harness there.
func TestOperatorCLILinksNoHarness(t *testing.T) {
	t.Parallel()
	var linked []string
	for _, p := range deps(t, "./cmd/gapless", "") {
		if strings.HasPrefix(p, harnessPrefix) {
			linked = append(linked, p)
		}
	}
	if len(linked) > 0 {
		t.Errorf("the operator CLI links harness packages: %s", strings.Join(linked, ", "))
	}
	found := false
	for _, p := range deps(t, "./internal/local/cmd/gapless-dev", "") {
		found = found || p == harnessPrefix+"localstack"
	}
	if !found {
		t.Errorf("the developer tool does not link %slocalstack: the check would not see a harness package", harnessPrefix)
	}
}
