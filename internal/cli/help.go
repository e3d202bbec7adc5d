package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// usageError is a mistake in the command line: main prints it in one line with a pointer to the
// subcommand's -h and exits 2. errors.Is(err, errUsage) holds for it.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// usagef returns a usageError.
func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// setHelp gives fs the help text of every subcommand, one format for all:
//
//	usage: gapless <synopsis>
//
//	<about>
//
//	flags:
//	  --name type
//	        what it does (default X)
//
// A flag's default is shown once: from its usage text when that says "(default ...)" (defaults
// read from the functions' variables say which), else its zero-free default value. Flags whose
// usage starts with "internal:" are for the program itself and not shown.
func setHelp(fs *flag.FlagSet, synopsis, about string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s %s\n", Program, synopsis)
		if about != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimRight(about, "\n"))
		}
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		sort.Strings(names)
		fmt.Fprint(w, "\nflags:\n")
		writeFlags(w, fs, names...)
	}
}

// writeFlags writes the named flags of fs in the help format (see setHelp).
func writeFlags(w io.Writer, fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil || strings.HasPrefix(f.Usage, "internal:") {
			continue
		}
		typ, usage := flag.UnquoteUsage(f)
		if t, ok := f.Value.(interface{ typeName() string }); ok {
			typ = t.typeName()
		}
		if typ != "" {
			typ = " " + typ
		}
		def := ""
		switch f.DefValue {
		case "", "0", "0s", "false", "-1":
		default:
			if !strings.Contains(usage, "(default") {
				def = " (default " + shortDuration(f.DefValue) + ")"
			}
		}
		dash := "--"
		if len(n) == 1 {
			dash = "-" // -e, as sam local invoke spells it
		}
		fmt.Fprintf(w, "  %s%s%s\n        %s%s\n", dash, n, typ, usage, def)
	}
}

// parseFlags parses the arguments of a subcommand that takes flags only (parseArgs), and a
// positional argument is a usageError (noArgs).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseArgs(fs, args, stdout); err != nil {
		return err
	}
	return noArgs(fs)
}

// parseArgs parses a subcommand's arguments the same way for every subcommand: -h or --help
// prints the help on stdout and returns flag.ErrHelp (main exits 0); an unknown flag or a bad
// value is a usageError naming it. Positional arguments are left in fs.Args().
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	out := fs.Output()
	usage := fs.Usage
	fs.SetOutput(io.Discard) // the flag package's own messages: replaced by the error below
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(out)
		return flag.ErrHelp
	}
	if err != nil {
		return usageError{flagError(fs, err)}
	}
	return nil
}

// flagError rewrites the flag package's message in the help's spelling of flags (--name), and
// suggests the nearest flag for one that is not defined.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		msg = "unknown flag --" + name
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.HasPrefix(f.Usage, "internal:") {
				names = append(names, f.Name)
			}
		})
		if s := nearest(name, names); s != "" {
			msg += " (did you mean --" + s + "?)"
		}
		return msg
	}
	return strings.Replace(msg, " for flag -", " for flag --", 1)
}

// nearest returns the candidate closest to s by edit distance, when it is close enough to be
// a misspelling (at most 2 edits, and fewer than half of s), else "".
func nearest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD && d*2 < max(len(s), 2) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance of a and b (bytes): Levenshtein's
// insertions, deletions and substitutions, and a swap of two neighbouring bytes as one edit
// (the commonest typing slip: "dmeo" is one edit from "demo").
func editDistance(a, b string) int {
	rows := [3][]int{make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)}
	prev2, prev, cur := rows[0], rows[1], rows[2]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// noArgs is the error for positional arguments a subcommand does not take.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() == 0 {
		return nil
	}
	return usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
}

// shortDuration trims time.Duration.String's zero units: "2m0s" -> "2m", "192h0m0s" -> "192h".
func shortDuration(s string) string {
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
