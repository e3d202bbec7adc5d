// Command bare is the benchmark's bootstrap for baseline (a): the stateless recipe with the
// benchmark's Process. Built and run under aws-lambda-rie by `gapless bench` for binary size
// and cold start; not deployed.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/bench/checksum"
)

func main() {
	lambda.Start(baseline.Bare(checksum.Process, baseline.WithConcurrency(16)))
}
