// Command consumer is a tiny Kinesis Lambda for the esm tests under the runtime interface
// emulator. It acts on each record's data: "fail-once:…" is reported in batchItemFailures the
// first time this process sees it, "error-once:…" makes the invocation fail the first time,
// "crash:…" exits the runtime process on every attempt, "hang:…" blocks past any timeout,
// ignoring the context, on every attempt (killer records); anything else succeeds.
package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

var seen = map[string]bool{}

func handle(_ context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	var resp events.KinesisEventResponse
	for _, r := range ev.Records {
		data := string(r.Kinesis.Data)
		first := !seen[r.EventID]
		seen[r.EventID] = true
		switch {
		case strings.HasPrefix(data, "crash:"):
			os.Exit(86)
		case strings.HasPrefix(data, "hang:"):
			time.Sleep(time.Hour)
		case strings.HasPrefix(data, "error-once:") && first:
			return resp, errors.New("injected error for " + r.EventID)
		case strings.HasPrefix(data, "fail-once:") && first:
			resp.BatchItemFailures = append(resp.BatchItemFailures,
				events.KinesisBatchItemFailure{ItemIdentifier: r.Kinesis.SequenceNumber})
		}
	}
	return resp, nil
}

func main() { lambda.Start(handle) }
