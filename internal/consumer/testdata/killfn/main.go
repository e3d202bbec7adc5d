// Command killfn is the consumer function as functions/consumer builds it (the public package's
// StartConsumer with the default Process), wrapped so that a record whose payload holds
// "kill":true makes Process write the runtime's process id to $KILL_PID_FILE and block, so the
// test can SIGKILL the runtime in the middle of that record. Used by TestBootstrapKilledMidRecord
// under aws-lambda-rie.
package main

import (
	"bytes"
	"context"
	"os"
	"strconv"

	"github.com/gapless-dev/gapless"
)

func main() {
	pidFile := os.Getenv("KILL_PID_FILE")
	killable := func(forward gapless.ProcessFunc) gapless.ProcessFunc {
		return func(ctx context.Context, r gapless.Record) error {
			if bytes.Contains(r.Data, []byte(`"kill":true`)) {
				if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
					return err
				}
				select {} // until SIGKILL
			}
			return forward(ctx, r)
		}
	}
	gapless.StartConsumer(nil, gapless.WithProcessWrapper(killable))
}
