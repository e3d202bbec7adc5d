// Command gapless-dev is the developer tool: the local stack (up, down), a function under the
// Lambda runtime emulator (invoke), the demo and the benchmarks, a new service to start from
// (new), and the operator commands with the local harness (redrive and replay run the local
// reconciler without a deployed function).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gapless-dev/gapless/internal/cli"
	_ "github.com/gapless-dev/gapless/internal/local/devcli" // its commands and harness
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli.Program = "gapless-dev"
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
