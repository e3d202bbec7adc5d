// Command idempotent is the benchmark's bootstrap for baseline (b): the Powertools-style
// record-level idempotency recipe over the table named by IDEMPOTENCY_TABLE. Built and run
// under aws-lambda-rie by `gapless bench` for binary size and cold start; not deployed.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/bench/checksum"
)

func main() {
	table := os.Getenv("IDEMPOTENCY_TABLE")
	if table == "" {
		fmt.Fprintln(os.Stderr, "IDEMPOTENCY_TABLE is required")
		os.Exit(1)
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "load AWS config:", err)
		os.Exit(1)
	}
	h := baseline.Idempotent(dynamodb.NewFromConfig(cfg), table, checksum.Process,
		baseline.WithConcurrency(16), baseline.WithFunctionName(os.Getenv("AWS_LAMBDA_FUNCTION_NAME")))
	lambda.Start(h)
}
