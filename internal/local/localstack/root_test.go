package localstack

import (
	"os"
	"path/filepath"
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
