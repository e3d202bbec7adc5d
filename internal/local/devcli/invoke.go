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
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/local/samtemplate"
)

func init() {
	register("invoke", "build a function and invoke it once under the Lambda runtime emulator (local `sam local invoke`)", runInvoke)
}

// chaosFunctions are this repository's own functions and their packages: in its checkout they
// are built with the chaos build tag (internal/local/chaos), which events/env.json's
// GAPLESS_CHAOS needs, instead of by their template's makefile.
var chaosFunctions = map[string]string{
	"ConsumerFunction":   "functions/consumer",
	"ReconcilerFunction": "functions/reconciler",
}

// defaultInvokeTimeout is the timeout of a function whose template sets none.
const defaultInvokeTimeout = 60 * time.Second

// invokeOptions are the parsed arguments of `gapless-dev invoke`.
type invokeOptions struct {
	function   string
	event      string
	template   string
	envFile    string
	state      string
	timeout    time.Duration
	timeoutSet bool
}

func parseInvokeFlags(args []string, stdout io.Writer) (invokeOptions, error) {
	var o invokeOptions
	fs := flag.NewFlagSet("gapless-dev invoke", flag.ContinueOnError)
	fs.StringVar(&o.event, "e", "", "event file to invoke with (e.g. one gapless-dev generate-event kinesis printed); required")
	fs.StringVar(&o.template, "template", "", "SAM template declaring the function (default ./template.yaml; in a gapless checkout, its root template.yaml)")
	fs.StringVar(&o.envFile, "env", "", "env-vars file (sam local invoke --env-vars format: one section per function, and \"Parameters\" for all) (default events/env.json next to the template, when it exists)")
	fs.StringVar(&o.state, "state", "", "local stack state directory holding stack.env, and the builds (default .local next to the template, written by gapless-dev up)")
	durationFlag(fs, &o.timeout, "timeout", defaultInvokeTimeout, "function timeout (default the template's Timeout, or Globals.Function.Timeout, else 60s)", functionTimeout)
	setHelp(fs, "invoke <LogicalId> -e <event.json> [flags]",
		"Builds a function of your SAM template for this machine, makes sure the local stack\n"+
			"(gapless-dev up) has what its variables name, runs it once under the Lambda runtime interface\n"+
			"emulator and prints the response on stdout (the function's logs go to stderr):\n"+
			"`sam local invoke` without Docker, for any service built on gapless.\n"+
			"\n"+
			"Build: CodeUri is relative to the template. With Metadata BuildMethod: makefile it runs\n"+
			"`make build-<LogicalId> ARTIFACTS_DIR=<state>/build/<LogicalId> GOARCH_LAMBDA=<this machine's\n"+
			"GOARCH>` in the CodeUri directory, with GOOS=linux and GOARCH set in the environment: the\n"+
			"target must build for GOARCH_LAMBDA or GOARCH (not a fixed arm64) and write an executable\n"+
			"bootstrap into ARTIFACTS_DIR. With BuildMethod go1.x or none it runs\n"+
			"`go build -tags lambda.norpc -o bootstrap .` (CGO_ENABLED=0) in the CodeUri directory.\n"+
			"In the gapless checkout its own two functions are built with the chaos build tag.\n"+
			"\n"+
			"Environment: the function's Environment.Variables (and Globals') with literal values,\n"+
			"overridden by the env-vars file's \"Parameters\" and <LogicalId> sections, whose other\n"+
			"variables are passed too. A variable whose value is an intrinsic (!Ref, !GetAtt, !Sub, ...)\n"+
			"must be set in the env-vars file: only CloudFormation resolves those. Then the stack's\n"+
			"endpoints and local credentials (AWS_* of <state>/stack.env). The gapless tables, queues,\n"+
			"bucket and (for ReconcilerFunction) stream the variables name, and the template's tables,\n"+
			"queues and buckets the function !Ref's, are created when missing; queue URLs are replaced by\n"+
			"the stack's.\n"+
			"\n"+
			"Outside a gapless checkout the emulators come from the checkout the gapless-dev binary is\n"+
			"in, or the one $GAPLESS_ROOT names. In this checkout events/env.json sets\n"+
			"GAPLESS_CHAOS=poison=true: payloads marked \"poison\": true fail on every attempt\n"+
			"(events/README.md).")
	// The function may come before or after the flags.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.function, args = args[0], args[1:]
	}
	if err := parseArgs(fs, args, stdout); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { o.timeoutSet = o.timeoutSet || f.Name == "timeout" })
	if o.function == "" && fs.NArg() > 0 {
		o.function = fs.Arg(0)
		if fs.NArg() > 1 {
			return o, usagef("unexpected argument %q", fs.Arg(1))
		}
	} else if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q", fs.Arg(0))
	}
	if o.event == "" && o.function != "" {
		return o, usagef("-e <event.json> is required")
	}
	return o, nil
}

// runInvoke builds the template's function for the host into <state>/build/<Fn>/bootstrap,
// makes sure what its variables name exists on the local stack, starts it under
// aws-lambda-rie (internal/local/rie) with its environment plus the stack's AWS_* (from
// stack.env), invokes it once with the event, and prints the response JSON on stdout; the
// function's logs go to stderr.
func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseInvokeFlags(args, stdout)
	if err != nil {
		return err
	}
	t, err := readTemplate(o.template)
	if err != nil {
		return err
	}
	fn, err := lookupFunction(t, o.function)
	if err != nil {
		return err
	}
	payload, err := os.ReadFile(o.event)
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	if !json.Valid(payload) {
		return fmt.Errorf("event %s is not JSON", o.event)
	}
	if o.envFile == "" {
		o.envFile = defaultEnvFile(t)
	}
	envFile, err := readEnvFile(o.envFile)
	if err != nil {
		return err
	}
	fnEnv, err := fn.Env(envFile)
	if err != nil {
		return err
	}
	if !o.timeoutSet && fn.Timeout > 0 {
		o.timeout = fn.Timeout
	}
	stateDir := o.state
	if stateDir == "" {
		stateDir = filepath.Join(t.Dir, ".local")
	}
	stackEnv, err := readStackEnv(filepath.Join(stateDir, "stack.env"))
	if err != nil {
		return err
	}

	bootstrap, err := filepath.Abs(filepath.Join(stateDir, "build", fn.LogicalID, "bootstrap"))
	if err != nil {
		return err
	}
	if err := build(ctx, t.Dir, fn, bootstrap, stderr); err != nil {
		return err
	}
	referred := func(r samtemplate.Resource) bool {
		if r.Kind == samtemplate.Stream && fn.LogicalID != "ReconcilerFunction" {
			return false // the consumer gets its records in the event
		}
		return slices.ContainsFunc(fn.Vars, func(v samtemplate.Var) bool { return slices.Contains(v.Refs, r.LogicalID) })
	}
	if err := ensureResources(ctx, fn.LogicalID, stackEnv, fnEnv, func(res localstack.Resources) localstack.Resources {
		return addDeclared(res, t, envFile, referred)
	}, stderr); err != nil {
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
	env["AWS_LAMBDA_FUNCTION_NAME"] = fn.LogicalID

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

// build builds fn for this machine into out (an executable named bootstrap).
func build(ctx context.Context, templateDir string, fn *samtemplate.Function, out string, stderr io.Writer) error {
	if pkg, ok := chaosFunctions[fn.LogicalID]; ok && localstack.IsRoot(templateDir) {
		if _, err := os.Stat(filepath.Join(templateDir, pkg, "main.go")); err != nil {
			return fmt.Errorf("%s: %s does not exist in this checkout (no main.go): nothing to build", fn.LogicalID, pkg)
		}
		fmt.Fprintf(stderr, "building %s (./%s, with the chaos build tag) into %s\n", fn.LogicalID, pkg, out)
		if err := buildFunction(ctx, templateDir, pkg, out, stderr); err != nil {
			return err
		}
		return checkBootstrap(fn.LogicalID, out)
	}
	if fi, err := os.Stat(fn.CodeDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: CodeUri %s is not a directory", fn.LogicalID, fn.CodeDir)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	os.Remove(out) // a stale bootstrap must not pass for this build's
	var cmd *exec.Cmd
	switch fn.BuildMethod {
	case "makefile":
		mk, err := exec.LookPath("make")
		if err != nil {
			return fmt.Errorf("%s has BuildMethod makefile: make is needed: %w", fn.LogicalID, err)
		}
		cmd = exec.CommandContext(ctx, mk, "build-"+fn.LogicalID, "ARTIFACTS_DIR="+filepath.Dir(out), "GOARCH_LAMBDA="+runtime.GOARCH)
		cmd.Env = append(os.Environ(), "ARTIFACTS_DIR="+filepath.Dir(out), "GOOS=linux", "GOARCH="+runtime.GOARCH)
	case "go1.x", "":
		goBin, err := exec.LookPath("go")
		if err != nil {
			return fmt.Errorf("the go tool is needed to build %s: %w", fn.LogicalID, err)
		}
		if gos, _ := filepath.Glob(filepath.Join(fn.CodeDir, "*.go")); len(gos) == 0 {
			return fmt.Errorf("%s: CodeUri %s holds no Go package, and the template sets no BuildMethod (makefile or go1.x)", fn.LogicalID, fn.CodeDir)
		}
		cmd = exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	default:
		return fmt.Errorf("%s: BuildMethod %q is not one gapless-dev builds (makefile or go1.x)", fn.LogicalID, fn.BuildMethod)
	}
	cmd.Dir = fn.CodeDir
	cmd.Stdout, cmd.Stderr = stderr, stderr
	shown := strings.Join(append([]string{filepath.Base(cmd.Path)}, cmd.Args[1:]...), " ")
	fmt.Fprintf(stderr, "building %s (%s in %s) into %s\n", fn.LogicalID, shown, relToWD(fn.CodeDir), out)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s (%s in %s): %w", fn.LogicalID, shown, fn.CodeDir, err)
	}
	return checkBootstrap(fn.LogicalID, out)
}

// checkBootstrap makes sure the build wrote an executable bootstrap at out.
func checkBootstrap(function, out string) error {
	fi, err := os.Stat(out)
	if err != nil {
		return fmt.Errorf("%s: %w at %s: a makefile's build-%s target must write it into $(ARTIFACTS_DIR)", function, errNoBootstrap, out, function)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: %w: %s is not an executable file", function, errNoBootstrap, out)
	}
	return nil
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
// missing (localstack.Ensure: the template's resources declared adds, the tables, the parked and target queues, the payload bucket and, for the reconciler,
// which reads it, the stream), and replaces the queue URLs in fnEnv by the stack's, so env.json's
// do not have to match the stack's port or backend.
func ensureResources(ctx context.Context, function string, stackEnv, fnEnv map[string]string, declared func(localstack.Resources) localstack.Resources, stderr io.Writer) error {
	res := localstack.ResourcesFromEnv(fnEnv)
	if function != "ReconcilerFunction" {
		res.Stream = "" // the consumer gets its records in the event; its STREAM_NAME only names them
	}
	res = declared(res)
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
	fmt.Fprintf(stderr, "local stack ready: %s\n", strings.Join(res.Names(), " "))
	return nil
}
