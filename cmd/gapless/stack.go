package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gapless-dev/gapless/internal/localstack"
)

func init() {
	commands["up"] = command{summary: "start the local AWS stack on 127.0.0.1 (installs the emulators first)", run: runUp}
	commands["down"] = command{summary: "stop the local AWS stack started by up", run: runDown}
}

func stackFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("gapless "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := fs.String("state", "", "directory for PID file, endpoints (stack.env) and logs (default <repo>/.local)")
	return fs, state
}

func resolveState(state string) (string, error) {
	if state != "" {
		return filepath.Abs(state)
	}
	root, err := localstack.FindRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".local"), nil
}

func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, state := stackFlags("up", stderr)
	backend := fs.String("backend", "dynalite", "DynamoDB and SQS backend: dynalite (dynalite + fauxqs) or moto (moto_server)")
	freePorts := fs.Bool("free-ports", false, "pick free ports instead of the defaults (for test runs beside a developer's stack)")
	if err := fs.Parse(args); err != nil {
		return err
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
		return fmt.Errorf("--backend %q: want dynalite or moto", *backend)
	}
	ports := map[localstack.Service]int{}
	if !*freePorts {
		if ports, err = localstack.PortsFromEnv(); err != nil {
			return err
		}
	}
	if stopped, err := localstack.StopFromState(dir); err != nil {
		return err
	} else if len(stopped) > 0 {
		fmt.Fprintf(stderr, "stopped a previous stack: %s\n", strings.Join(stopped, ", "))
	}
	procs, err := localstack.Start(ctx, localstack.Options{StateDir: dir, Ports: ports, Detach: true}, services...)
	if err != nil {
		return err
	}
	if err := localstack.WriteState(dir, procs); err != nil {
		localstack.Stop(procs)
		return err
	}
	for _, p := range procs {
		fmt.Fprintf(stderr, "%-9s %s  pid %d  log %s\n", p.Service, p.Endpoint, p.PID, p.LogPath)
	}
	fmt.Fprintf(stderr, "endpoints: . %s\n", filepath.Join(dir, "stack.env"))
	return nil
}

func runDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, state := stackFlags("down", stderr)
	if err := fs.Parse(args); err != nil {
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
	return nil
}
