package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/doctor"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

// Redrive and replay run in the reconciler function, where the service's Process lives: the CLI
// sends it a command event (reconcile.Command) and prints the answers. On AWS it invokes the
// deployed function (lambda:InvokeFunction, RequestResponse); on the local stack it builds the
// service's own reconciler main and invokes it under the Lambda runtime interface emulator, with
// the function's variables of the env file and the stack's endpoints.

// reconcilerOptions are the flags that say which reconciler function runs a command.
type reconcilerOptions struct {
	function    string        // deployed function name or ARN (stack output ReconcilerFunctionName)
	functionDir string        // local: the reconciler's main package
	envFile     string        // local: sam local invoke --env-vars file
	sets        []string      // local: KEY=VALUE overrides of the function's variables
	timeout     time.Duration // local: the function timeout
}

func reconcilerFlags(fs *flag.FlagSet) *reconcilerOptions {
	r := &reconcilerOptions{}
	fs.StringVar(&r.function, "reconciler-function", os.Getenv(envReconcilerFunction),
		"the deployed reconciler function to invoke, name or ARN (stack output ReconcilerFunctionName; default $"+envReconcilerFunction+"); without it the local reconciler runs")
	fs.StringVar(&r.functionDir, "function-dir", "", "local: the reconciler's main package to build (default functions/reconciler of the Go module holding the current directory)")
	fs.StringVar(&r.envFile, "env", "", "local: the function's variables, sam local invoke --env-vars format, section ReconcilerFunction (default events/env.json of that module, when it exists)")
	fs.Func("set", "local: set one of the function's variables, KEY=VALUE (repeatable; after --env and the flags above): how a configuration fix is tried locally", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", s)
		}
		r.sets = append(r.sets, s)
		return nil
	})
	fs.DurationVar(&r.timeout, "timeout", 300*time.Second, "local: the function timeout (template.yaml's 300s): one invocation's time")
	return r
}

// localOnlyFlags configure the local reconciler only.
var localOnlyFlags = map[string]bool{
	"checkpoint-table": true, "dedupe-table": true, "parked-queue": true, "target-queue": true, "payload-bucket": true,
	"max-attempts": true, "dedupe-key": true, "ledger-ttl": true, "function-dir": true, "env": true, "set": true, "timeout": true,
}

// envReconcilerFunction names the deployed reconciler function for redrive and replay.
const envReconcilerFunction = "GAPLESS_RECONCILER_FUNCTION"

// commandInvoker sends one command event and returns the function's answer.
type commandInvoker = Invoker

// Invoker sends one event to a function and returns its answer: the deployed reconciler, or
// the developer tool's local one.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
	// Where names the function in messages.
	Where() string
	Close()
}

// ErrFunction is wrapped by the error of an invocation that answered with a function error.
var ErrFunction = errFunction

// LocalHarness is what the developer tool adds to the operator commands: a local reconciler
// under the Lambda runtime interface emulator and the emulated mapping's control plane. The
// operator binary has none: its redrive and replay invoke the deployed function.
type LocalHarness struct {
	// StartReconciler builds the reconciler's main package in dir and starts it with env.
	StartReconciler func(ctx context.Context, dir string, env map[string]string, timeout time.Duration, stderr io.Writer) (Invoker, error)
	// ControlPlane is what the emulated mapping configured from the template says for Lambda,
	// EventBridge and CloudWatch.
	ControlPlane func(template string) (doctor.ControlPlane, error)
}

// Local is set by the developer tool.
var Local *LocalHarness

// localFailure is the error of a local function's function error (the harness's Failure).
type localFailure interface {
	error
	FailureType() string
	FailureBody() []byte
	FunctionLog() string
}

// localReconciler prints a local function's failure with its log, escaped.
type localReconciler struct{ Invoker }

func (l localReconciler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	resp, err := l.Invoker.Invoke(ctx, payload)
	var f localFailure
	if errors.As(err, &f) {
		return nil, fmt.Errorf("%w (%s): %s\nthe function's log:\n%s", errFunction, f.FailureType(),
			printable(functionErrorMessage(f.FailureBody()), false), printable(lastChars(f.FunctionLog(), 4000), true))
	}
	return resp, err
}

// errFunction is wrapped by the error of an invocation that answered with a function error (a
// refused command, a cold start that failed).
var errFunction = errors.New("the reconciler function failed")

// lambdaInvoker invokes a deployed function.
type lambdaInvoker struct {
	client *lambda.Client
	name   string
}

func (l lambdaInvoker) Where() string { return "function " + l.name }
func (l lambdaInvoker) Close()        {}

func (l lambdaInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	out, err := l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(l.name),
		InvocationType: lambdatypes.InvocationTypeRequestResponse, Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", l.name, err)
	}
	if out.FunctionError != nil {
		return nil, fmt.Errorf("%w (%s): %s", errFunction, aws.ToString(out.FunctionError), printable(functionErrorMessage(out.Payload), false))
	}
	return out.Payload, nil
}

// functionErrorMessage is the errorMessage of a function error's body, or the body.
func functionErrorMessage(body []byte) string {
	var fe struct {
		Message string `json:"errorMessage"`
	}
	if json.Unmarshal(body, &fe) == nil && fe.Message != "" {
		return fe.Message
	}
	return strings.TrimSpace(string(body))
}

// reconcilerInvoker picks the function: --reconciler-function on AWS, else the local reconciler.
func reconcilerInvoker(ctx context.Context, o *opsOptions, r *reconcilerOptions, fs *flag.FlagSet, stderr io.Writer) (commandInvoker, error) {
	if r.function != "" {
		// The deployed function has its own configuration: a flag that would only change the
		// local function's is refused rather than silently ignored.
		var local []string
		fs.Visit(func(f *flag.Flag) {
			if localOnlyFlags[f.Name] {
				local = append(local, "--"+f.Name)
			}
		})
		if len(local) > 0 {
			return nil, usagef("%s set the local reconciler's configuration; the deployed function %s uses its own (change it with a deploy)",
				strings.Join(local, ", "), r.function)
		}
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("load AWS configuration: %w", err)
		}
		// One attempt per invocation: an SDK retry of an Invoke whose answer was lost would run a
		// second redrive session beside the first.
		return lambdaInvoker{client: lambda.NewFromConfig(cfg, func(o *lambda.Options) { o.RetryMaxAttempts = 1 }), name: r.function}, nil
	}
	if o.useAWS {
		return nil, usagef("--aws needs --reconciler-function (or $%s): the deployed reconciler function, stack output ReconcilerFunctionName", envReconcilerFunction)
	}
	if Local == nil {
		return nil, usagef("no --reconciler-function (or $%s): the deployed reconciler function to invoke, stack output ReconcilerFunctionName (the local reconciler runs under %s-dev)", envReconcilerFunction, Program)
	}
	return startLocalReconciler(ctx, o, r, fs, stderr)
}

// startLocalReconciler builds the reconciler's main (as `gapless-dev invoke` builds it) and starts
// it under the emulator with its variables: the env file's ReconcilerFunction section, then the
// shared flags given on the command line (or, for a variable the file lacks, their $VAR
// defaults), then --set, then the stack's endpoints.
func startLocalReconciler(ctx context.Context, o *opsOptions, r *reconcilerOptions, fs *flag.FlagSet, stderr io.Writer) (commandInvoker, error) {
	dir := r.functionDir
	if dir == "" {
		mod, err := moduleRoot()
		if err != nil {
			return nil, fmt.Errorf("no --reconciler-function, and no local reconciler to build: %w (give --function-dir, or --reconciler-function for AWS)", err)
		}
		dir = filepath.Join(mod, "functions", "reconciler")
		if r.envFile == "" {
			if _, err := os.Stat(filepath.Join(mod, "events", "env.json")); err == nil {
				r.envFile = filepath.Join(mod, "events", "env.json")
			}
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
		return nil, fmt.Errorf("local reconciler: %s holds no main.go (--function-dir)", dir)
	}
	env := map[string]string{}
	if r.envFile != "" {
		if env, err = readEnvSection(r.envFile, "ReconcilerFunction"); err != nil {
			return nil, err
		}
	}
	given, fromFlags := map[string]bool{}, map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, v := range []struct{ flag, env, val string }{
		{"group", config.EnvGroup, o.group}, {"stream", config.EnvStreamName, o.stream},
		{"checkpoint-table", config.EnvCheckpointTable, o.checkpointTable}, {"dedupe-table", config.EnvDedupeTable, o.dedupeTable},
		{"parked-queue", config.EnvParkedQueueURL, o.parkedQueue}, {"target-queue", config.EnvTargetQueueURL, o.targetQueue},
		{"payload-bucket", config.EnvPayloadBucket, o.payloadBucket}, {"max-attempts", config.EnvMaxRecordAttempts, strconv.Itoa(o.maxAttempts)},
		{"dedupe-key", config.EnvDedupeKey, o.dedupeKey}, {"ledger-ttl", config.EnvLedgerTTL, o.ledgerTTL.String()},
	} {
		if _, inFile := env[v.env]; given[v.flag] || (!inFile && v.val != "" && v.val != "0" && v.val != "0s") {
			env[v.env] = v.val
			fromFlags[v.env] = true
		}
	}
	for _, s := range r.sets {
		k, v, _ := strings.Cut(s, "=")
		env[k] = v
	}
	// The command names the group and stream the local function gets.
	o.group, o.stream = env[config.EnvGroup], env[config.EnvStreamName]
	c, err := loadClients(ctx, o, stderr)
	if err != nil {
		return nil, err
	}
	if c.local { // the stack's endpoints and credentials (otherwise the emulator passes ours on)
		stackEnv, err := readStackEnv(filepath.Join(stackDir(o), "stack.env"))
		if err != nil {
			return nil, err
		}
		for k, v := range stackEnv {
			if strings.HasPrefix(k, "AWS_") {
				env[k] = v
			}
		}
	}
	// env.json's queue URLs assume the default port: the stack names its queues' URLs. URLs
	// given as flags (or their variables) are used as they are.
	for _, k := range []string{config.EnvParkedQueueURL, config.EnvTargetQueueURL} {
		if env[k] == "" || fromFlags[k] {
			continue
		}
		out, err := c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(path.Base(env[k]))})
		if err != nil {
			return nil, fmt.Errorf("%s: queue %s on the local stack: %w", k, path.Base(env[k]), err)
		}
		env[k] = aws.ToString(out.QueueUrl)
	}
	env["AWS_LAMBDA_FUNCTION_NAME"] = "ReconcilerFunction"

	inv, err := Local.StartReconciler(ctx, dir, env, r.timeout, stderr)
	if err != nil {
		return nil, err
	}
	return localReconciler{inv}, nil
}

// stackDir is the directory of the local stack's stack.env, as loadClients finds it.
func stackDir(o *opsOptions) string {
	if o.state != "" {
		return o.state
	}
	if root, err := findRoot(); err == nil {
		return filepath.Join(root, ".local")
	}
	return ".local"
}

// moduleRoot is the directory of the go.mod above the current directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the current directory")
		}
		dir = parent
	}
}

// sendCommand invokes the function with c and decodes its answer.
func sendCommand(ctx context.Context, inv commandInvoker, c reconcile.Command) (reconcile.CommandResult, error) {
	c.Version = reconcile.CommandVersion
	payload, err := json.Marshal(reconcile.CommandEvent{Gapless: &c})
	if err != nil {
		return reconcile.CommandResult{}, err
	}
	raw, err := inv.Invoke(ctx, payload)
	if err != nil {
		return reconcile.CommandResult{}, err
	}
	var resp reconcile.CommandResponse
	if err := json.Unmarshal(raw, &resp); err != nil || resp.Gapless.Command != c.Command {
		return reconcile.CommandResult{}, fmt.Errorf("%s did not answer the %s command (is it a gapless reconciler of this release?): %s",
			inv.Where(), c.Command, lastChars(printable(string(raw), false), 500))
	}
	if resp.Gapless.Version != reconcile.CommandVersion {
		return reconcile.CommandResult{}, fmt.Errorf("%s answered version %d, this CLI reads version %d", inv.Where(), resp.Gapless.Version, reconcile.CommandVersion)
	}
	return resp.Gapless, nil
}

// printable escapes control characters, format characters and invalid UTF-8 of text that
// comes from message data or a function, so nothing reaches the terminal as an escape sequence
// or a line of its own. keepNewlines keeps line breaks (a function's log).
func printable(s string, keepNewlines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteRune(r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\uFFFE' || r == '\uFFFF':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// lastChars is the end of s, at most n bytes.
func lastChars(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
