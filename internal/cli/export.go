package cli

import (
	"flag"
	"io"
	"time"
)

// The helpers every command shares, for the developer tool's commands: one help format, one
// usage-error path, flags that follow the functions' rules.

// Usagef is a mistake in the command line: exit 2 with a pointer to the command's -h.
func Usagef(format string, a ...any) error { return usagef(format, a...) }

// SetHelp gives fs the help format of every command.
func SetHelp(fs *flag.FlagSet, synopsis, about string) { setHelp(fs, synopsis, about) }

// ParseFlags parses args and refuses positional arguments; -h prints the help on stdout.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	return parseFlags(fs, args, stdout)
}

// ParseArgs parses args with flags and positional arguments interleaved.
func ParseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	return parseArgs(fs, args, stdout)
}

// DurationFlag defines a duration flag whose values rule refuses with its message.
func DurationFlag(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string, rule func(time.Duration) string) {
	durationFlag(fs, p, name, def, usage, rule)
}

// FunctionTimeout is the rule of a Lambda function timeout.
func FunctionTimeout(d time.Duration) string { return functionTimeout(d) }

// ReadEnvSection reads one function's variables from a `sam local invoke --env-vars` file.
func ReadEnvSection(file, function string) (map[string]string, error) {
	return readEnvSection(file, function)
}

// ReadStackEnv reads the `export K=V` lines of a local stack's stack.env.
func ReadStackEnv(file string) (map[string]string, error) { return readStackEnv(file) }

// FileExists reports whether path exists.
func FileExists(path string) bool { return fileExists(path) }

// RelToWD is path relative to the working directory when it lies under it, else path.
func RelToWD(path string) string { return relToWD(path) }

// Printable escapes control characters, format characters and invalid UTF-8 of text that comes
// from message data or a function; keepNewlines keeps line breaks (a function's log).
func Printable(s string, keepNewlines bool) string { return printable(s, keepNewlines) }

// FunctionErrorMessage is the errorMessage of a function error's body, or the body.
func FunctionErrorMessage(body []byte) string { return functionErrorMessage(body) }

// LastChars is the end of s, at most n bytes.
func LastChars(s string, n int) string { return lastChars(s, n) }

// Nearest is the candidate closest to s when it is close enough to be a misspelling of it, else
// "": what the unknown-command and unknown-flag errors suggest.
func Nearest(s string, candidates []string) string { return nearest(s, candidates) }
