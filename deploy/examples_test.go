package deploy

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
)

// examples are the modules under examples/: services of their own built on the public package,
// each with its own go.mod, template.yaml and Makefile. `make test` vets and tests them; these
// tests check what sam would do with them, and with the service `gapless-dev new` writes
// (exampleModules).
var examples = []string{"examples/ddbwriter"}

// TestExampleBuildTargets runs each example's build-<LogicalId> the way `sam build` does (in the
// example's directory, ARTIFACTS_DIR set) and checks a static linux/arm64 bootstrap appears.
func TestExampleBuildTargets(t *testing.T) {
	t.Parallel()
	for _, ex := range exampleModules(t) {
		for _, fn := range lambdaFunctions {
			t.Run(filepath.Base(ex)+"/"+fn, func(t *testing.T) {
				dir := t.TempDir()
				runMake(t, "-C", ex, "build-"+fn, "ARTIFACTS_DIR="+dir)
				checkBootstrapFile(t, filepath.Join(dir, "bootstrap"), elf.EM_AARCH64)
			})
		}
	}
}

// publicPackage is the API: the one package of gapless a service imports.
const publicPackage = "github.com/gapless-dev/gapless"

// checkImportsOnlyThePublicPackage lists the packages pattern names in dir (the production build:
// -tags lambda.norpc; test files too when withTests) and fails for every import of a gapless
// package other than the root one. It also fails when none imports the root package at all.
func checkImportsOnlyThePublicPackage(t *testing.T, dir, pattern string, withTests bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"list", "-tags", "lambda.norpc", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}
	if withTests {
		args = append(args, "-test")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pattern)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s in %s: %v", pattern, dir, err)
	}
	usesPublic := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			usesPublic = usesPublic || imp == publicPackage
			if strings.HasPrefix(imp, publicPackage+"/") {
				t.Errorf("%s imports %s: it may use only %s", f[0], imp, publicPackage)
			}
		}
	}
	if !usesPublic {
		t.Errorf("no package of %s imports %s:\n%s", pattern, publicPackage, out)
	}
}

// TestExampleImportsOnlyThePublicPackage: an example's own packages, tests included, import
// nothing of gapless but the root package (its module path is outside gapless's, so the
// compiler already refuses internal/; this also keeps process/ and the rest out).
func TestExampleImportsOnlyThePublicPackage(t *testing.T) {
	t.Parallel()
	for _, ex := range exampleModules(t) {
		t.Run(filepath.Base(ex), func(t *testing.T) {
			checkImportsOnlyThePublicPackage(t, ex, "./...", true)
		})
	}
}

// TestFunctionsUseOnlyThePublicPackage: the deployed mains are built on the API alone, as a
// user's would be (the project eats its own cooking); their test files may reach further.
func TestFunctionsUseOnlyThePublicPackage(t *testing.T) {
	t.Parallel()
	checkImportsOnlyThePublicPackage(t, repoRoot(t), "./functions/...", false)
}

// TestExampleTemplates: each example's template gives both functions every variable gapless
// requires (TARGET_QUEUE_URL only belongs to the default Process), builds them with the
// Makefile, and passes cfn-lint without a finding.
func TestExampleTemplates(t *testing.T) {
	t.Parallel()
	required := slices.DeleteFunc(slices.Clone(config.ReconcilerRequired), func(v string) bool { return v == config.EnvTargetQueueURL })
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Fatalf("cfn-lint not on PATH: %v", err)
	}
	for _, ex := range exampleModules(t) {
		t.Run(filepath.Base(ex), func(t *testing.T) {
			path := filepath.Join(ex, "template.yaml")
			c := loadCFN(t, path)
			for _, fn := range lambdaFunctions {
				if got := scalar(get(c.resource(fn), "Metadata", "BuildMethod")); got != "makefile" {
					t.Errorf("%s: BuildMethod %q, want makefile", fn, got)
				}
				vars := c.prop(fn, "Environment", "Variables")
				for _, v := range required {
					if get(vars, v) == nil {
						t.Errorf("%s does not set %s", fn, v)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(ex, "Makefile")); err != nil {
				t.Error(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, path).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("cfn-lint %s: %v\n%s", path, err, out)
			}
		})
	}
}
