package devcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/rie"
)

func init() {
	register("invoke", "build a function and invoke it once under the Lambda runtime emulator (local `sam local invoke`)", runInvoke)
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

func parseInvokeFlags(args []string, stdout io.Writer) (invokeOptions, error) {
	var o invokeOptions
	fs := flag.NewFlagSet("gapless-dev invoke", flag.ContinueOnError)
	fs.StringVar(&o.event, "e", "", "event file to invoke with (e.g. events/kinesis-clean.json); required")
	fs.StringVar(&o.envFile, "env", "events/env.json", "env-vars file (sam local invoke --env-vars format, one section per function)")
	fs.StringVar(&o.state, "state", "", "local stack state directory holding stack.env (default <repo>/.local, written by gapless up)")
	durationFlag(fs, &o.timeout, "timeout", 60*time.Second, "function timeout (the template's Timeout)", functionTimeout)
	setHelp(fs, "invoke <ConsumerFunction|ReconcilerFunction> -e <event.json> [flags]",
		"Builds the function for this machine, makes sure the local stack (gapless up) has the tables,\n"+
			"queues and stream its env.json section names, runs it once under the Lambda runtime\n"+
			"interface emulator with that environment plus the stack's endpoints, and prints the response\n"+
			"on stdout (the function's JSON logs go to stderr): `sam local invoke` without Docker.\n"+
			"events/env.json sets GAPLESS_CHAOS=poison=true: payloads marked \"poison\": true fail on every\n"+
			"attempt (events/README.md).")
	// The function may come before or after the flags.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.function, args = args[0], args[1:]
	}
	if err := parseArgs(fs, args, stdout); err != nil {
		return o, err
	}
	if o.function == "" && fs.NArg() > 0 {
		o.function = fs.Arg(0)
		if fs.NArg() > 1 {
			return o, usagef("unexpected argument %q", fs.Arg(1))
		}
	} else if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q", fs.Arg(0))
	}
	if o.function == "" {
		return o, usagef("which function? ConsumerFunction or ReconcilerFunction")
	}
	if _, ok := invokeFunctions[o.function]; !ok {
		return o, usagef("unknown function %q: ConsumerFunction or ReconcilerFunction", o.function)
	}
	if o.event == "" {
		return o, usagef("-e <event.json> is required")
	}
	return o, nil
}

// runInvoke builds the function for the host (CGO_ENABLED=0, -tags lambda.norpc) into
// .local/build/<Fn>/bootstrap, makes sure the tables and queues its env.json section names exist
// on the local stack (internal/schema), starts it under aws-lambda-rie (internal/local/rie) with that
// environment plus the stack's AWS_ENDPOINT_URL_* (from stack.env), invokes it once with the
// event, and prints the response JSON on stdout; the function's logs go to stderr.
func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseInvokeFlags(args, stdout)
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
	if err := ensureResources(ctx, o.function, stackEnv, fnEnv, stderr); err != nil {
		return err
	}
	env := map[string]string{}
	for k, v := range fnEnv {
		env[k] = v
	}
	for k, v := range stackEnv { // endpoints, region and local credentials of the stack
		if strings.HasPrefix(k, "AWS_") { // not its GAPLESS_GROUP etc.: env.json decides those
			env[k] = v
		}
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
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc,"+chaos.BuildTag, "-trimpath", "-o", out, "./"+pkgDir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %w", pkgDir, err)
	}
	return nil
}

// ensureResources creates what the function's variables name on the local stack when it is
// missing (localstack.Ensure: the tables, the parked and target queues, the payload bucket and, for the reconciler,
// which reads it, the stream), and replaces the queue URLs in fnEnv by the stack's, so env.json's
// do not have to match the stack's port or backend.
func ensureResources(ctx context.Context, function string, stackEnv, fnEnv map[string]string, stderr io.Writer) error {
	res := localstack.ResourcesFromEnv(fnEnv)
	if function != "ReconcilerFunction" {
		res.Stream = "" // the consumer gets its records in the event; its STREAM_NAME only names them
	}
	ready, err := localstack.Ensure(ctx, stackEnv, res)
	if err != nil {
		return err
	}
	if ready.ParkedQueueURL != "" {
		fnEnv[config.EnvParkedQueueURL] = ready.ParkedQueueURL
	}
	if ready.TargetQueueURL != "" {
		fnEnv[config.EnvTargetQueueURL] = ready.TargetQueueURL
	}
	fmt.Fprintf(stderr, "local stack ready: tables %s %s; queues %s %s\n", ready.CheckpointTable, ready.LedgerTable,
		ready.ParkedQueueURL, ready.TargetQueueURL)
	return nil
}
