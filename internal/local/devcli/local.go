package devcli

import (
	"context"
	"io"
	"time"

	"github.com/gapless-dev/gapless/internal/cli"
	"github.com/gapless-dev/gapless/internal/local/localops"
)

// The developer tool's operator commands reach the local stack's functions: redrive and replay
// without --reconciler-function build the reconciler's main and run it under the Lambda runtime
// interface emulator; doctor --live on the local stack reads the emulated mapping.
func init() { cli.Local = Harness() }

// Harness is the local harness of the operator commands.
func Harness() *cli.LocalHarness {
	return &cli.LocalHarness{
		StartReconciler: func(ctx context.Context, dir string, env map[string]string, timeout time.Duration, stderr io.Writer) (cli.Invoker, error) {
			f, err := localops.Harness{}.StartReconciler(ctx, dir, env, timeout, stderr)
			if err != nil {
				return nil, err
			}
			return f, nil
		},
		ControlPlane: localops.Harness{}.ControlPlane,
	}
}
