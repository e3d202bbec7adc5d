package localstack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindRootPassesExampleModules: from inside an example module (its own go.mod under
// examples/) FindRoot still finds the repository root, where tools/ and .local/ are.
func TestFindRootPassesExampleModules(t *testing.T) {
	root := t.TempDir()
	example := filepath.Join(root, "examples", "ddbwriter")
	sub := filepath.Join(example, "functions", "consumer")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, mod := range map[string]string{root: "module " + ModulePath + "\n\ngo 1.26\n", example: "module example.com/ddbwriter\n"} {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("// a comment first\n"+mod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, example, sub} {
		t.Chdir(dir)
		got, err := FindRoot()
		if err != nil {
			t.Fatal(err)
		}
		if got, _ = filepath.EvalSymlinks(got); got != want {
			t.Errorf("FindRoot from %s = %s, want %s", dir, got, want)
		}
	}
}

// TestFindRootOutsideACheckout: from a directory outside any checkout FindRoot is the one
// GAPLESS_ROOT names, and an error naming GAPLESS_ROOT when that holds no gapless go.mod or
// is unset (the test binary does not live in a checkout).
func TestFindRootOutsideACheckout(t *testing.T) {
	checkout, elsewhere := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module "+ModulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(elsewhere)
	for _, tc := range []struct {
		env, want, err string
	}{
		{env: checkout, want: checkout},
		{env: elsewhere, err: RootEnvVar + "=" + elsewhere + " holds no go.mod"},
		{env: "", err: "set " + RootEnvVar},
	} {
		t.Setenv(RootEnvVar, tc.env)
		got, err := FindRoot()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s=%q: %q, %v; want an error saying %q", RootEnvVar, tc.env, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s=%q: %q, %v; want %q", RootEnvVar, tc.env, got, err, tc.want)
		}
	}
}
