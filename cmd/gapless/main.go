// Command gapless is the operator CLI: local stack (up, down) and, as they land, status,
// replay, redrive, invoke and demo. Each subcommand lives in its own file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand: run gets the arguments after the subcommand name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by the init functions of the subcommand files.
var commands = map[string]command{}

// errUsage marks an error already explained by a usage message.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
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
			fmt.Fprintf(stderr, "gapless: unknown command %q (did you mean %q?)\n\n", args[0], s)
		} else {
			fmt.Fprintf(stderr, "gapless: unknown command %q\n\n", args[0])
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
			fmt.Fprintf(stderr, "gapless %s: %v\n", args[0], err)
		}
		fmt.Fprintf(stderr, "run 'gapless %s -h' for its flags\n", args[0])
		return 2
	default:
		// An error of the package behind the command may start with the command's own name
		// ("doctor: template: ..."): said once.
		fmt.Fprintf(stderr, "gapless %s: %s\n", args[0], strings.TrimPrefix(err.Error(), args[0]+": "))
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gapless <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nrun 'gapless <command> -h' (or 'gapless help <command>') for its flags")
}
