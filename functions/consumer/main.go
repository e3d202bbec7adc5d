// Command consumer is the Lambda function behind the Kinesis event-source mapping
// (FunctionResponseTypes: ReportBatchItemFailures), built on the public package
// github.com/gapless-dev/gapless alone, as a user's own service would be, with the default
// Process: every record forwarded to TARGET_QUEUE_URL.
package main

import (
	"fmt"
	"os"

	"github.com/gapless-dev/gapless"
)

func main() {
	faults, err := faultOptions(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gapless consumer: cold start failed: %v\n", err)
		os.Exit(1)
	}
	gapless.StartConsumer(nil, faults...)
}
