package rie

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// BuildFlags are the go build flags of a Lambda bootstrap, those of `make build` (mk/sam.mk,
// LAMBDA_GOFLAGS): static with CGO_ENABLED=0 (BuildFor's environment), stripped, no RPC mode
// (the tag lambda.norpc, which BuildFor adds to any others).
var BuildFlags = []string{"-tags", "lambda.norpc", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w"}

// BuildFor builds the main package pkg (relative to dir, or an import path) into out as a
// Lambda bootstrap for linux/goarch, with the flags and environment of `make build` and the
// extra tags given. Every bootstrap the tests, the demo and the bench build goes through here,
// so that they share one build cache: a second set of flags (cgo on, or no -trimpath) would
// compile the AWS SDK once more.
func BuildFor(ctx context.Context, dir, pkg, out, goarch string, tags ...string) error {
	args := append([]string{"build"}, BuildFlags...)
	args[2] = strings.Join(append([]string{args[2]}, tags...), ",") // the -tags value
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (linux/%s): %w\n%s", pkg, goarch, err, msg)
	}
	return nil
}

// Build is BuildFor this machine's architecture, so that the emulator can run the bootstrap.
func Build(ctx context.Context, dir, pkg, out string, tags ...string) error {
	return BuildFor(ctx, dir, pkg, out, runtime.GOARCH, tags...)
}
