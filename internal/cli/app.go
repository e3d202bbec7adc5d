// Package cli is gapless's command line: the operator commands (status, doctor, replay,
// redrive, version), which talk to AWS unless told --local, and what every command shares
// (flags that follow the functions' rules, help, usage errors, suggestions). The operator binary
// (cmd/gapless) is this package; the developer tool adds its commands (up, down, invoke, demo,
// bench) with Register and the local stack's harness through Local, so the operator binary links
// nothing of the harness.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// RunFunc runs one subcommand with the arguments after its name.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// command is one subcommand: run gets the arguments after the subcommand name.
type command struct {
	summary string
	run     RunFunc
}

// commands is filled by the init functions of the subcommand files, and by Register.
var commands = map[string]command{}

// Register adds a subcommand (the developer tool's).
func Register(name, summary string, run RunFunc) {
	commands[name] = command{summary: summary, run: run}
}

// Program is the binary's name in usage and error lines.
var Program = "gapless"

// errUsage marks an error already explained by a usage message.
var errUsage = errors.New("usage")

// ErrUsage is errUsage for the developer tool's commands: an error wrapping it exits 2 with a
// pointer to the command's -h.
var ErrUsage = errUsage

// Run runs the command line args (without the program name) and returns the exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "help": // gapless help <command> is gapless <command> -h
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		args = []string{args[1], "-h"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		if s := nearest(args[0], names); s != "" {
			fmt.Fprintf(stderr, "%s: unknown command %q (did you mean %q?)\n\n", Program, args[0], s)
		} else {
			fmt.Fprintf(stderr, "%s: unknown command %q\n\n", Program, args[0])
		}
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		if err != errUsage { // a bare errUsage was explained by the command already
			fmt.Fprintf(stderr, "%s %s: %v\n", Program, args[0], err)
		}
		fmt.Fprintf(stderr, "run '%s %s -h' for its flags\n", Program, args[0])
		return 2
	default:
		// An error of the package behind the command may start with the command's own name
		// ("doctor: template: ..."): said once.
		fmt.Fprintf(stderr, "%s %s: %s\n", Program, args[0], strings.TrimPrefix(err.Error(), args[0]+": "))
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", Program)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0 // the summaries line up after the longest name
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nrun '%[1]s <command> -h' (or '%[1]s help <command>') for its flags\n", Program)
}
