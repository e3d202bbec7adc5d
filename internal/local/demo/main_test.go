package demo

import (
	"os"
	"testing"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

// stackEndpoints are the endpoints stacktest exported.
func stackEndpoints() Endpoints {
	return Endpoints{
		Kinesis:  os.Getenv("AWS_ENDPOINT_URL_KINESIS"),
		DynamoDB: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"),
		SQS:      os.Getenv("AWS_ENDPOINT_URL_SQS"),
	}
}
