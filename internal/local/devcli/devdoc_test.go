package devcli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// TestLocalDevelopmentDoc runs every command of docs/development.md's "Local development"
// block, as written from the repository's root, in one shell (so `. .local/stack.env` carries
// over), and fails when any of them fails. The block is read from the document, so editing it
// changes what is tested.
//
// It runs in a copy of the checkout (its own .local/, so a developer's stack is left alone), on
// free ports (GAPLESS_PORT_*), with none of the suite's AWS_* or function variables: only
// what the document's commands set. `make up` starts dynalite + fauxqs whatever backend the suite
// runs on, so on the moto pass (make test-moto) the test would repeat the same run: it is
// skipped there.
func TestLocalDevelopmentDoc(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a stack and builds the CLI and the consumer")
	}
	if ep := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"); ep != "" && ep == os.Getenv("AWS_ENDPOINT_URL_SQS") {
		t.Skip("moto pass: `make up` starts dynalite + fauxqs whatever the suite's backend; the dynalite pass runs this")
	}
	for _, tool := range []string{"make", "bash", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the document's commands: %v", tool, err)
		}
	}
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	commands, err := docBlock(string(readme), "## Local development")
	if err != nil {
		t.Fatal(err)
	}
	n := len(commands)
	if n < 4 || !strings.HasPrefix(commands[0], "make up") || !strings.HasPrefix(commands[n-2], "make down") || !strings.HasPrefix(commands[n-1], ". .local/unset.env") {
		t.Fatalf("the block should start with `make up` and end with `make down` and `. .local/unset.env`: %q", commands)
	}

	dir := copyCheckout(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Whatever happens, the stack started by the block is stopped.
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(dir, "bin", "gapless"), "down")
		cmd.Dir = dir
		_ = cmd.Run()
	})

	// errexit also stops inside a loop of the block (`for ...; do make invoke ...; done`), where
	// the loop's own status would hide a failed iteration.
	var script strings.Builder
	script.WriteString("set -eE -o pipefail\ntrap 'echo \"=== failed (exit $?): $BASH_COMMAND\" >&2' ERR\n")
	for i, c := range commands {
		fmt.Fprintf(&script, "echo %s >&2\n%s\n", shellQuote(fmt.Sprintf("=== command %d: %s", i+1, c)), c)
	}
	// After the block the shell must point nowhere near the stopped stack.
	script.WriteString("if env | grep -E '^(AWS_ENDPOINT_URL_[A-Z0-9_]*|STREAM_NAME|GAPLESS_GROUP)='; then echo '=== the stack environment is still set' >&2; exit 1; fi\n")
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = docEnv(t)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	log := out.String()
	if err != nil {
		t.Fatalf("docs/development.md's local-development commands failed (%v):\n%s", err, tail(log, 12000))
	}
	// What the document says they show.
	for _, want := range []string{
		`"stream":"gapless-demo","shard_id":"shardId-000000000000"`, // SAM's sample, as STREAM_NAME's
		`"batchItemFailures":[{"itemIdentifier":"`,                  // the poison record fails ...
		`"parked":1`, // ... and the 5th attempt parks it
		`"batchItemFailures":null`,
		"1 parked messages: 1 processed", // redrive forwards it
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the output lacks %q:\n%s", want, tail(log, 12000))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".local", "stack.env")); err == nil {
		t.Errorf("`make down` left .local/stack.env behind")
	}
}

// docBlock returns the lines of the first ```sh block after heading, without blank lines.
func docBlock(md, heading string) ([]string, error) {
	_, section, ok := strings.Cut(md, "\n"+heading+"\n")
	if !ok {
		return nil, fmt.Errorf("docs/development.md has no %q section", heading)
	}
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		return nil, fmt.Errorf("no ```sh block under %q", heading)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		return nil, fmt.Errorf("the ```sh block under %q is not closed", heading)
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// copyCheckout copies the checkout's working tree (tracked and untracked, not ignored files)
// into a temporary directory; tools/ is a symlink to the original, whose emulators are
// installed already.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if rel == "" || rel == "tools" || strings.HasPrefix(rel, "tools/") {
			continue
		}
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or not a file
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "tools"), filepath.Join(dir, "tools")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// docEnv is the environment the document's commands start from: the user's tools (PATH, Go's
// caches), free ports for the stack, and none of the suite's AWS_*, GAPLESS_* or function
// variables.
func docEnv(t *testing.T) []string {
	t.Helper()
	drop := map[string]bool{"STREAM_NAME": true, "CHECKPOINT_TABLE": true, "DEDUPE_TABLE": true,
		"PARKED_QUEUE_URL": true, "TARGET_QUEUE_URL": true, "MAKEFLAGS": true, "MFLAGS": true, "MAKELEVEL": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] || strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "GAPLESS_") {
			continue
		}
		env = append(env, kv)
	}
	used := map[int]bool{}
	for _, svc := range []localstack.Service{localstack.Kinesis, localstack.DynamoDB, localstack.SQS, localstack.Moto} {
		p := 0
		for p == 0 || used[p] {
			var err error
			if p, err = localstack.FreePort(); err != nil {
				t.Fatal(err)
			}
		}
		used[p] = true
		env = append(env, fmt.Sprintf("GAPLESS_PORT_%s=%d", strings.ToUpper(string(svc)), p))
	}
	return env
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
