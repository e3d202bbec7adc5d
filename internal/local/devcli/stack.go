package devcli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/samtemplate"
)

func init() {
	register("up", "start the local AWS stack on 127.0.0.1 with the streams, tables, queues and buckets of your template and env file", runUp)
	register("down", "stop the local AWS stack started by up", runDown)
}

func stackFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("gapless-dev "+name, flag.ContinueOnError)
	state := fs.String("state", "", "directory for PID file, endpoints (stack.env) and logs (default .local next to ./template.yaml; in a gapless checkout, <checkout>/.local)")
	return fs, state
}

func resolveState(state string) (string, error) {
	if state != "" {
		return filepath.Abs(state)
	}
	if file, ok, err := templateFile(""); err == nil && ok {
		return filepath.Abs(filepath.Join(filepath.Dir(file), ".local"))
	}
	root, err := localstack.FindRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".local"), nil
}

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, state := stackFlags("up")
	backend := fs.String("backend", "dynalite", "DynamoDB and SQS backend: dynalite (dynalite + fauxqs) or moto (moto_server)")
	freePorts := fs.Bool("free-ports", false, "pick free ports instead of the defaults and GAPLESS_PORT_* (for test runs beside a developer's stack)")
	template := fs.String("template", "", "SAM template whose streams, tables, queues and buckets to create (default ./template.yaml; in a gapless checkout, its root template.yaml; none when there is none)")
	envFile := fs.String("env", "", "create the stream, tables and queues this env-vars file names (default events/env.json next to the template, when it exists)")
	bare := fs.Bool("bare", false, "start the emulators only, without the stream, tables and queues (test runs create their own)")
	setHelp(fs, "up [flags]",
		"Starts Kinesis (kinesis-local), DynamoDB and SQS (dynalite and fauxqs, or moto_server) on\n"+
			"127.0.0.1, installing the emulators first when they are missing, and creates:\n"+
			"  - the stream, tables, queues and bucket the env-vars file's gapless variables name\n"+
			"    (STREAM_NAME, CHECKPOINT_TABLE, DEDUPE_TABLE, PARKED_QUEUE_URL, TARGET_QUEUE_URL,\n"+
			"    PAYLOAD_BUCKET; definitions from internal/schema, the stream with 8 shards);\n"+
			"  - the AWS::Kinesis::Stream (ShardCount), AWS::DynamoDB::Table (KeySchema), AWS::SQS::Queue\n"+
			"    (FifoQueue) and AWS::S3::Bucket resources the template declares, each named by its\n"+
			"    name property when that is a literal, else by the env-vars file's value of a function\n"+
			"    variable that !Ref's it, else by its logical id (lower-cased for a bucket).\n"+
			"Writes <state>/stack.env: `. .local/stack.env` points the AWS SDKs and CLI at the stack and\n"+
			"sets the functions' gapless variables. A stack that is already up is kept, data included,\n"+
			"and given what is missing; `gapless-dev down` stops it. Ports: 4567 Kinesis, 4569 DynamoDB,\n"+
			"4566 SQS, 4570 moto_server, each overridden by GAPLESS_PORT_KINESIS, _DYNAMODB, _SQS, _MOTO.\n"+
			"Outside a gapless checkout the emulators come from the checkout the gapless-dev binary is\n"+
			"in, or the one $GAPLESS_ROOT names.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	var tmpl *samtemplate.Template
	if file, ok, err := templateFile(*template); err != nil {
		return err
	} else if ok && !*bare {
		if tmpl, err = samtemplate.Read(file); err != nil {
			return err
		}
	}
	if *state == "" && tmpl != nil {
		*state = filepath.Join(tmpl.Dir, ".local")
	}
	dir, err := resolveState(*state)
	if err != nil {
		return err
	}
	services := []localstack.Service{localstack.Kinesis}
	switch *backend {
	case "dynalite":
		services = append(services, localstack.DynamoDB, localstack.SQS)
	case "moto":
		services = append(services, localstack.Moto)
	default:
		return usagef("--backend %q: want dynalite or moto", *backend)
	}
	if *envFile == "" && tmpl != nil {
		*envFile = defaultEnvFile(tmpl)
	}
	var res localstack.Resources
	if !*bare && *envFile != "" {
		if res, err = localstack.ResourcesFromEnvFile(*envFile); err != nil {
			return err
		}
	}
	if tmpl != nil {
		env, err := readEnvFile(*envFile)
		if err != nil {
			return err
		}
		res = addDeclared(res, tmpl, env, nil)
	}
	ports := map[localstack.Service]int{}
	if !*freePorts {
		if ports, err = localstack.PortsFromEnv(); err != nil {
			return err
		}
	}

	// A stack that is up is kept: `up` twice must not throw away what the first one holds.
	if rec, ok, err := localstack.ReadState(dir); err != nil {
		return err
	} else if ok {
		dead := rec.Running(ctx)
		if len(dead) == 0 {
			have, want := slices.Sorted(slices.Values(rec.Services())), slices.Sorted(slices.Values(services))
			if !slices.Equal(have, want) {
				return fmt.Errorf("a local stack with %s is already up (%s); to start one with --backend %s: gapless down%s, then gapless up again",
					joinServices(rec.Services()), filepath.Join(dir, "stack.env"), *backend, stateArg(*state))
			}
			procs := rec.Procs
			for _, p := range procs {
				p.Endpoint = endpointOf(p.Service, rec.Env)
			}
			ready, err := localstack.Ensure(ctx, rec.Env, res)
			if err != nil {
				return err
			}
			if err := localstack.WriteStateWith(dir, procs, ready.Vars()); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "a local stack is already up: kept it and its data (to start an empty one: gapless down%s, then gapless up)\n", stateArg(*state))
			printStack(stderr, dir, procs, ready)
			return nil
		}
		stopped, err := localstack.StopFromState(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "the stack recorded in %s is not running (%s): starting a new one\n", filepath.Join(dir, "stack.env"), strings.Join(dead, ", "))
		if len(stopped) > 0 {
			fmt.Fprintf(stderr, "stopped what was left of it: %s\n", strings.Join(stopped, ", "))
		}
	}
	procs, err := localstack.Start(ctx, localstack.Options{StateDir: dir, Ports: ports, Detach: true}, services...)
	if err != nil {
		return err
	}
	ready, err := localstack.Ensure(ctx, localstack.Env(procs), res)
	if err == nil {
		err = localstack.WriteStateWith(dir, procs, ready.Vars())
	}
	if err != nil {
		localstack.Stop(procs)
		return err
	}
	printStack(stderr, dir, procs, ready)
	return nil
}

// printStack says what runs where and what exists on it.
func printStack(w io.Writer, dir string, procs []*localstack.Process, r localstack.Ready) {
	for _, p := range procs {
		fmt.Fprintf(w, "%-9s %s  pid %d  log %s\n", p.Service, p.Endpoint, p.PID, p.LogPath)
	}
	if r.Stream != "" {
		fmt.Fprintf(w, "stream    %s (%d shards)\n", r.Stream, localstack.StreamShards)
	}
	if r.CheckpointTable != "" || r.LedgerTable != "" {
		fmt.Fprintf(w, "tables    %s\n", strings.TrimSpace(r.CheckpointTable+" "+r.LedgerTable))
	}
	for _, s := range r.Streams {
		fmt.Fprintf(w, "stream    %s (%d shards)\n", s.Name, s.Shards)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(w, "table     %s\n", t.Name)
	}
	for _, u := range []string{r.ParkedQueueURL, r.TargetQueueURL} {
		if u != "" {
			fmt.Fprintf(w, "queue     %s\n", u)
		}
	}
	for _, q := range r.Queues {
		fmt.Fprintf(w, "queue     %s\n", r.QueueURLs[q.Name])
	}
	for _, b := range append([]string{r.PayloadBucket}, r.Buckets...) {
		if b != "" {
			fmt.Fprintf(w, "bucket    %s\n", b)
		}
	}
	fmt.Fprintf(w, "endpoints and names: . %s\n", filepath.Join(dir, "stack.env"))
}

// endpointOf is the endpoint a recorded process serves, from the stack's variables.
func endpointOf(s localstack.Service, env map[string]string) string {
	switch s {
	case localstack.Kinesis:
		return env["AWS_ENDPOINT_URL_KINESIS"]
	case localstack.SQS:
		return env["AWS_ENDPOINT_URL_SQS"]
	default: // dynalite, moto
		return env["AWS_ENDPOINT_URL_DYNAMODB"]
	}
}

func joinServices(ss []localstack.Service) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

func stateArg(state string) string {
	if state == "" {
		return ""
	}
	return " --state " + state
}

func runDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, state := stackFlags("down")
	setHelp(fs, "down [flags]", "Stops the local stack that `gapless-dev up` recorded in <state>/stack.env (by PID) and removes\nthat file. Its data goes with it.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	dir, err := resolveState(*state)
	if err != nil {
		return err
	}
	stopped, err := localstack.StopFromState(dir)
	if err != nil {
		return err
	}
	if len(stopped) == 0 {
		fmt.Fprintln(stderr, "no local stack recorded in", dir)
		return nil
	}
	fmt.Fprintf(stderr, "stopped %s\n", strings.Join(stopped, ", "))
	// Said to a person at a terminal; scripts (scripts/with-stack.sh) run in no shell that sourced it.
	if unset := filepath.Join(dir, localstack.UnsetFile); fileExists(unset) && isTerminal(stderr) {
		fmt.Fprintf(stderr, "a shell that sourced stack.env still points the AWS SDKs and CLI at 127.0.0.1: leave it with . %s\n", relToWD(unset))
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
