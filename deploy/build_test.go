package deploy

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests run the mk/sam.mk targets the way `sam build` does and inspect what they produce.
// They build ./functions/consumer and ./functions/reconciler; CONSUMER_SRC / RECONCILER_SRC in
// the environment point the targets elsewhere (make's ?= defaults yield to the environment).

var lambdaFunctions = []string{"ConsumerFunction", "ReconcilerFunction"}

// runMake runs make in the module root with the given arguments.
func runMake(t *testing.T, args ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-compiles the functions (make test runs it; -short is make check's)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = repoRoot(t)
	// sam sets ARTIFACTS_DIR itself; a stray one in the test's environment must not leak in.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ARTIFACTS_DIR=") })
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, v := range []string{"CONSUMER_SRC", "RECONCILER_SRC"} {
		if s := os.Getenv(v); s != "" {
			t.Logf("%s=%s from the environment", v, s)
		}
	}
}

// checkStaticLinuxELF asserts that r is a static Linux executable for machine: no program
// interpreter, no dynamic section, no shared libraries — what provided.al2023 runs as bootstrap.
func checkStaticLinuxELF(t *testing.T, name string, r io.ReaderAt, machine elf.Machine) {
	t.Helper()
	f, err := elf.NewFile(r)
	if err != nil {
		t.Fatalf("%s: not an ELF file: %v", name, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
		t.Errorf("%s: class %v type %v, want ELFCLASS64 ET_EXEC", name, f.Class, f.Type)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s: OS ABI %v", name, f.OSABI)
	}
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", name, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: program header %v: dynamically linked", name, p.Type)
		}
	}
	for _, s := range []string{".interp", ".dynamic"} {
		if f.Section(s) != nil {
			t.Errorf("%s: has section %s", name, s)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s: imports %v (%v)", name, libs, err)
	}
}

func checkBootstrapFile(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s is not executable: %v", path, fi.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkStaticLinuxELF(t, path, f, machine)
}

// TestBuildTargets runs build-<LogicalId> with ARTIFACTS_DIR set, as sam does, for the
// template's arm64 and for GOARCH_LAMBDA=amd64.
func TestBuildTargets(t *testing.T) {
	t.Parallel()
	for _, fn := range lambdaFunctions {
		for _, arch := range []struct {
			goarch  string
			machine elf.Machine
		}{{"arm64", elf.EM_AARCH64}, {"amd64", elf.EM_X86_64}} {
			t.Run(fn+"/"+arch.goarch, func(t *testing.T) {
				dir := t.TempDir()
				runMake(t, "build-"+fn, "ARTIFACTS_DIR="+dir, "GOARCH_LAMBDA="+arch.goarch)
				checkBootstrapFile(t, filepath.Join(dir, "bootstrap"), arch.machine)
				entries, err := os.ReadDir(dir)
				if err != nil || len(entries) != 1 {
					t.Errorf("ARTIFACTS_DIR holds %d entries (%v), want only bootstrap", len(entries), err)
				}
			})
		}
	}
}

// TestBuildTargetDefaultsArtifactsDir: without sam (no ARTIFACTS_DIR) a target writes to
// $(SAM_BUILD_DIR)/<LogicalId>, which defaults to .aws-sam/build.
func TestBuildTargetDefaultsArtifactsDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runMake(t, "build-ConsumerFunction", "SAM_BUILD_DIR="+dir)
	checkBootstrapFile(t, filepath.Join(dir, "ConsumerFunction", "bootstrap"), elf.EM_AARCH64)
}

// TestBuildAndPackage checks `make package` (and the `make build` it runs): sam build's layout
// with a template whose CodeUri points at each function's directory, and one zip per function
// with an executable bootstrap at its root.
func TestBuildAndPackage(t *testing.T) {
	t.Parallel()
	build, pkg := t.TempDir(), t.TempDir()
	runMake(t, "package", "SAM_BUILD_DIR="+build, "SAM_PACKAGE_DIR="+pkg)

	built := loadCFN(t, filepath.Join(build, "template.yaml"))
	orig := loadTemplate(t)
	for _, fn := range lambdaFunctions {
		if got := scalar(built.prop(fn, "CodeUri")); got != fn {
			t.Errorf("built template: %s CodeUri %q, want %q", fn, got, fn)
		}
		checkBootstrapFile(t, filepath.Join(build, fn, "bootstrap"), elf.EM_AARCH64)
	}
	// Apart from CodeUri the built template is template.yaml.
	origText, _ := os.ReadFile(filepath.Join(repoRoot(t), "template.yaml"))
	builtText, _ := os.ReadFile(filepath.Join(build, "template.yaml"))
	strip := func(b []byte) []string {
		return slices.DeleteFunc(strings.Split(string(b), "\n"), func(l string) bool {
			return strings.HasPrefix(strings.TrimSpace(l), "CodeUri:")
		})
	}
	if !slices.Equal(strip(origText), strip(builtText)) {
		t.Errorf("built template differs from template.yaml beyond CodeUri")
	}
	if len(keys(get(built.root, "Resources"))) != len(keys(get(orig.root, "Resources"))) {
		t.Errorf("built template lost resources")
	}

	for _, fn := range lambdaFunctions {
		zr, err := zip.OpenReader(filepath.Join(pkg, fn+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 1 || zr.File[0].Name != "bootstrap" {
			var names []string
			for _, f := range zr.File {
				names = append(names, f.Name)
			}
			t.Fatalf("%s.zip holds %v, want only bootstrap at the root", fn, names)
		}
		zf := zr.File[0]
		if zf.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s.zip: bootstrap mode %v is not executable", fn, zf.Mode())
		}
		rc, err := zf.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		checkStaticLinuxELF(t, fn+".zip:bootstrap", bytes.NewReader(b), elf.EM_AARCH64)
		zr.Close()
	}
}
