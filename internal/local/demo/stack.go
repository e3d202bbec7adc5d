package demo

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// Endpoints are the local stack's base URLs (http://127.0.0.1:port).
type Endpoints struct {
	Kinesis, DynamoDB, SQS string
}

func (e Endpoints) complete() bool { return e.Kinesis != "" && e.DynamoDB != "" && e.SQS != "" }

// startStack starts the emulators the demo needs on free loopback ports (installing them first
// when tools/node_modules is missing), with logs under dir. The returned stop ends them.
func startStack(ctx context.Context, root, dir, backend string) (Endpoints, []*localstack.Process, error) {
	services := []localstack.Service{localstack.Kinesis}
	if backend == BackendMoto {
		services = append(services, localstack.Moto)
	} else {
		services = append(services, localstack.DynamoDB, localstack.SQS)
	}
	procs, err := localstack.Start(ctx, localstack.Options{Root: root, StateDir: dir, Timeout: 2 * time.Minute}, services...)
	if err != nil {
		return Endpoints{}, nil, fmt.Errorf("demo: start the local stack: %w", err)
	}
	env := localstack.Env(procs)
	return Endpoints{
		Kinesis:  env["AWS_ENDPOINT_URL_KINESIS"],
		DynamoDB: env["AWS_ENDPOINT_URL_DYNAMODB"],
		SQS:      env["AWS_ENDPOINT_URL_SQS"],
	}, procs, nil
}

// clients are SDK clients of one aws.Config pointed at explicit endpoints.
type clients struct {
	cfg aws.Config
	kin *kinesis.Client
	ddb *dynamodb.Client
	sqs *sqs.Client
}

// newClients builds clients for the given endpoints; an empty endpoint keeps the config's.
// quickRetry shortens the retryer's backoff (the demo's own bookkeeping clients); the function
// clients keep the SDK's standard retryer, as a function would.
func newClients(cfg aws.Config, kin, ddb, sq string, quickRetry bool) clients {
	if quickRetry {
		cfg = cfg.Copy()
		cfg.Retryer = func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = 200 * time.Millisecond })
		}
	}
	return clients{
		cfg: cfg,
		kin: kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { setEndpoint(&o.BaseEndpoint, kin) }),
		ddb: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { setEndpoint(&o.BaseEndpoint, ddb) }),
		sqs: sqs.NewFromConfig(cfg, func(o *sqs.Options) { setEndpoint(&o.BaseEndpoint, sq) }),
	}
}

// s3 is an S3 client of the stack (path-style) at url, the SQS emulator's port, which serves S3
// (the S3 on-failure destination's objects).
func (c clients) s3(url string) *s3.Client {
	return s3.NewFromConfig(c.cfg, func(o *s3.Options) { setEndpoint(&o.BaseEndpoint, url); o.UsePathStyle = true })
}

func setEndpoint(dst **string, url string) {
	if url != "" {
		*dst = aws.String(url)
	}
}

// sdkLogger sends the SDK's own log lines (retries, checksum warnings) to a slog logger instead
// of stderr, where the progress display is.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "source", "aws-sdk")
}

// withSDKLog returns cfg with its SDK log going to log.
func withSDKLog(cfg aws.Config, log *slog.Logger) aws.Config {
	cfg = cfg.Copy()
	cfg.Logger = sdkLogger{log}
	return cfg
}
