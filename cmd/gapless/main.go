// Command gapless is the operator CLI: status, doctor, replay, redrive and version against a
// deployed stack (a local one only with --local). It links nothing of the local harness; the
// developer tool (gapless-dev: up, down, invoke, demo, bench) is internal/local/cmd/gapless-dev.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gapless-dev/gapless/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
