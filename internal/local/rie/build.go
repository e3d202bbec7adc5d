package rie

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// BuildFlags are the go build flags of a Lambda bootstrap: those of `make build` (mk/sam.mk,
// LAMBDA_GOFLAGS) less the linker's, which change no compiled package.
var BuildFlags = []string{"-trimpath", "-buildvcs=false"}

// BuildEnv is the environment of a Lambda bootstrap's build for this machine: `make build`'s
// (mk/sam.mk, LAMBDA_GOENV) with the host's architecture, so the emulator can run it.
func BuildEnv() []string {
	return append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
}

// Build builds the main package pkg (relative to dir, or an import path) into out as a Lambda
// bootstrap for this machine: static, with the tag lambda.norpc and any extra tags, and with
// the flags and environment of `make build`. Every bootstrap the tests and the demo build goes
// through here, so that they share one build cache: a second set of flags (cgo on, or no
// -trimpath) would compile the AWS SDK once more.
func Build(ctx context.Context, dir, pkg, out string, tags ...string) error {
	args := append([]string{"build", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ",")}, BuildFlags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
	cmd.Dir, cmd.Env = dir, BuildEnv()
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}
