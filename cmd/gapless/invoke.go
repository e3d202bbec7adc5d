package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/rie"
	"github.com/gapless-dev/gapless/internal/schema"
)

func init() {
	commands["invoke"] = command{
		summary: "build a function and invoke it once under the Lambda runtime emulator (local `sam local invoke`)",
		run:     runInvoke,
	}
}

// invokeFunctions maps the template's logical ids to their packages.
var invokeFunctions = map[string]string{
	"ConsumerFunction":   "functions/consumer",
	"ReconcilerFunction": "functions/reconciler",
}

// invokeOptions are the parsed arguments of `gapless invoke`.
type invokeOptions struct {
	function string
	event    string
	envFile  string
	state    string
	timeout  time.Duration
}

func parseInvokeFlags(args []string, stderr io.Writer) (invokeOptions, error) {
	var o invokeOptions
	fs := flag.NewFlagSet("gapless invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.event, "e", "", "event file to invoke with (e.g. events/kinesis-clean.json); required")
	fs.StringVar(&o.envFile, "env", "events/env.json", "env-vars file (sam local invoke --env-vars format, one section per function)")
	fs.StringVar(&o.state, "state", "", "local stack state directory holding stack.env (default <repo>/.local, written by gapless up)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "function timeout (the template's Timeout)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gapless invoke <ConsumerFunction|ReconcilerFunction> -e <event.json> [--env events/env.json] [--state dir] [--timeout 60s]")
		fs.PrintDefaults()
	}
	// The function may come before or after the flags.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.function, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.function == "" && fs.NArg() > 0 {
		o.function = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if _, ok := invokeFunctions[o.function]; !ok || o.event == "" {
		fs.Usage()
		return o, errUsage
	}
	return o, nil
}

// runInvoke builds the function for the host (CGO_ENABLED=0, -tags lambda.norpc) into
// .local/build/<Fn>/bootstrap, makes sure the tables and queues its env.json section names exist
// on the local stack (internal/schema), starts it under aws-lambda-rie (internal/rie) with that
// environment plus the stack's AWS_ENDPOINT_URL_* (from stack.env), invokes it once with the
// event, and prints the response JSON on stdout; the function's logs go to stderr.
func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseInvokeFlags(args, stderr)
	if err != nil {
		return err
	}
	root, err := findRootForInvoke()
	if err != nil {
		return err
	}
	pkgDir := invokeFunctions[o.function]
	if _, err := os.Stat(filepath.Join(root, pkgDir, "main.go")); err != nil {
		return fmt.Errorf("%s: %s does not exist yet in this checkout (no main.go): nothing to build", o.function, pkgDir)
	}
	payload, err := os.ReadFile(o.event)
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	if !json.Valid(payload) {
		return fmt.Errorf("event %s is not JSON", o.event)
	}
	fnEnv, err := readEnvSection(o.envFile, o.function)
	if err != nil {
		return err
	}
	stateDir := o.state
	if stateDir == "" {
		stateDir = filepath.Join(root, ".local")
	}
	stackEnv, err := readStackEnv(filepath.Join(stateDir, "stack.env"))
	if err != nil {
		return err
	}

	bootstrap := filepath.Join(root, ".local", "build", o.function, "bootstrap")
	fmt.Fprintf(stderr, "building %s (./%s) into %s\n", o.function, pkgDir, bootstrap)
	if err := buildFunction(ctx, root, pkgDir, bootstrap, stderr); err != nil {
		return err
	}
	if err := ensureResources(ctx, stackEnv, fnEnv, stderr); err != nil {
		return err
	}
	env := map[string]string{}
	for k, v := range fnEnv {
		env[k] = v
	}
	for k, v := range stackEnv { // endpoints, region and local credentials of the stack
		env[k] = v
	}
	env["AWS_LAMBDA_FUNCTION_NAME"] = o.function

	inst, err := rie.Start(ctx, rie.Options{Bootstrap: bootstrap, Env: env, Timeout: o.timeout, LogWriter: stderr})
	if err != nil {
		return err
	}
	defer inst.Close()
	resp, err := inst.Invoke(ctx, payload)
	var fe *rie.FunctionError
	if errors.As(err, &fe) {
		stdout.Write(fe.Body)
		fmt.Fprintln(stdout)
		return err
	}
	if err != nil {
		return err
	}
	stdout.Write(resp)
	fmt.Fprintln(stdout)
	return nil
}

// findRootForInvoke is the module root: event and env paths are relative to the caller's
// directory, the build to the module.
func findRootForInvoke() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/gapless-dev/gapless") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run gapless invoke inside the gapless repository (no go.mod of github.com/gapless-dev/gapless above)")
		}
		dir = parent
	}
}

func buildFunction(ctx context.Context, root, pkgDir, out string, stderr io.Writer) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go tool is needed to build %s: %w", pkgDir, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, "./"+pkgDir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkgDir, err)
	}
	return nil
}

// readEnvSection reads one function's variables from a `sam local invoke --env-vars` file.
func readEnvSection(file, function string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	var all map[string]map[string]string
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("env file %s: %w", file, err)
	}
	sec, ok := all[function]
	if !ok {
		return nil, fmt.Errorf("env file %s has no %s section", file, function)
	}
	return sec, nil
}

// readStackEnv reads the `export K=V` lines `gapless up` writes to stack.env.
func readStackEnv(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no local stack: %s does not exist (start one with `gapless up`, or pass --state)", file)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" || env["AWS_ENDPOINT_URL_SQS"] == "" {
		return nil, fmt.Errorf("%s names no DynamoDB or SQS endpoint", file)
	}
	return env, nil
}

// ensureResources creates what the function's variables name on the local stack when it is
// missing: the two tables, the parked and target queues (their URLs in fnEnv are replaced by
// the stack's, so env.json's default port does not have to match) and, for the reconciler,
// the stream (one shard) and the payload bucket.
func ensureResources(ctx context.Context, stackEnv, fnEnv map[string]string, stderr io.Writer) error {
	region := stackEnv["AWS_REGION"]
	if region == "" {
		region = "us-east-1"
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: stackEnv["AWS_ACCESS_KEY_ID"], SecretAccessKey: stackEnv["AWS_SECRET_ACCESS_KEY"], Source: "stack.env"}, nil
	})
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region), awsconfig.WithCredentialsProvider(creds))
	if err != nil {
		return err
	}
	var tables []schema.Table
	if n := fnEnv[config.EnvCheckpointTable]; n != "" {
		tables = append(tables, schema.CheckpointTable(n))
	}
	if n := fnEnv[config.EnvDedupeTable]; n != "" {
		tables = append(tables, schema.LedgerTable(n))
	}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(stackEnv["AWS_ENDPOINT_URL_DYNAMODB"]) })
	if err := schema.EnsureTables(ctx, ddb, tables...); err != nil {
		return err
	}
	sqsClient := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(stackEnv["AWS_ENDPOINT_URL_SQS"]) })
	for _, v := range []string{config.EnvParkedQueueURL, config.EnvTargetQueueURL} {
		u := fnEnv[v]
		if u == "" {
			continue
		}
		q := schema.Queue{Name: path.Base(u), FIFO: strings.HasSuffix(u, ".fifo")}
		if v == config.EnvParkedQueueURL {
			q.RetentionSeconds = schema.ParkedRetentionSeconds
		}
		url, err := schema.EnsureQueue(ctx, sqsClient, q)
		if err != nil {
			return err
		}
		fnEnv[v] = url
	}
	if name := fnEnv[config.EnvPayloadBucket]; name != "" {
		endpoint := stackEnv["AWS_ENDPOINT_URL_S3"]
		if endpoint == "" {
			endpoint = stackEnv["AWS_ENDPOINT_URL_SQS"] // fauxqs and moto serve S3 on the SQS port
		}
		s3Client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(endpoint), true })
		if err := schema.EnsureBucket(ctx, s3Client, name); err != nil {
			return err
		}
	}
	if name := fnEnv[config.EnvStreamName]; name != "" {
		if stackEnv["AWS_ENDPOINT_URL_KINESIS"] == "" {
			return fmt.Errorf("%s=%s needs Kinesis, and the local stack has no Kinesis endpoint", config.EnvStreamName, name)
		}
		kc := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(stackEnv["AWS_ENDPOINT_URL_KINESIS"]) })
		if _, err := schema.EnsureStream(ctx, kc, name, 1); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(tables))
	for _, t := range tables {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	fmt.Fprintf(stderr, "local stack ready: tables %s; queues %s %s\n", strings.Join(names, ", "),
		fnEnv[config.EnvParkedQueueURL], fnEnv[config.EnvTargetQueueURL])
	return nil
}
