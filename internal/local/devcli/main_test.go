package devcli

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

// TestMain gives the package's tests a local stack (invoke's tests use its DynamoDB and SQS).
func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

// gapless runs the developer tool in-process.
func gapless(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = run(ctx, args, &o, &e)
	return o.String(), e.String(), code
}
