package dedupe

import (
	"os"
	"testing"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.DynamoDB)) }
