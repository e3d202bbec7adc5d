// Command reconciler is the Lambda function that proves nothing behind the checkpoint was
// skipped: an EventBridge schedule starts a pass over every shard, and the event-source
// mapping's on-failure SQS queue (FunctionResponseTypes: ReportBatchItemFailures) names ranges
// to replay. It is built on the public package github.com/gapless-dev/gapless alone, with the
// consumer's Process (the default one: forward to TARGET_QUEUE_URL), so replays do what the
// consumer would have done.
package main

import (
	"fmt"
	"os"

	"github.com/gapless-dev/gapless"
)

func main() {
	faults, err := faultOptions(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless reconciler: cold start failed: %v\n", err)
		os.Exit(1)
	}
	gapless.StartReconciler(nil, faults...)
}
