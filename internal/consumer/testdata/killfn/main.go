// Command killfn is the consumer function (functions/consumer's wiring through internal/wire:
// typed configuration, the stores, parking, the consumer handler, lambda.Start) with a Process
// that forwards records like package process, except a record whose payload holds "kill":true:
// for it Process writes the runtime's process id to $KILL_PID_FILE and blocks, so the test can
// SIGKILL the runtime in the middle of that record. Used by TestBootstrapKilledMidRecord under
// aws-lambda-rie.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/wire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "killfn: cold start failed: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	cfg, err := config.LoadConsumer(os.Getenv)
	if err != nil {
		return err
	}
	pidFile := os.Getenv("KILL_PID_FILE")
	killable := func(forward pipeline.ProcessFunc) pipeline.ProcessFunc {
		return func(ctx context.Context, r pipeline.Record) error {
			if bytes.Contains(r.Data, []byte(`"kill":true`)) {
				if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
					return err
				}
				select {} // until SIGKILL
			}
			return forward(ctx, r)
		}
	}
	parts, err := wire.Build(ctx, cfg.Common, cfg.DeadlineMargin, os.Getenv, os.Stdout, wire.WithProcessWrapper(killable))
	if err != nil {
		return err
	}
	h := consumer.NewHandler(parts.Pipeline, cfg.Group, parts.Logger, consumer.WithMetrics(parts.Metrics))
	lambda.Start(h.HandleJSON)
	return nil
}
