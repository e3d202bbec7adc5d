package cli

import (
	"context"
	"io"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localops"
)

// The package's tests run redrive, replay and doctor --live against the local stack as the
// developer tool does: with its harness.
func init() {
	Local = &LocalHarness{
		StartReconciler: func(ctx context.Context, dir string, env map[string]string, timeout time.Duration, stderr io.Writer) (Invoker, error) {
			f, err := localops.Harness{}.StartReconciler(ctx, dir, env, timeout, stderr)
			if err != nil {
				return nil, err
			}
			return f, nil
		},
		ControlPlane: localops.Harness{}.ControlPlane,
	}
}
