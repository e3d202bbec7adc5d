package devcli

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"

	module "github.com/gapless-dev/gapless"
)

func init() {
	register("new", "write a new service of your own, in its own Go module, to start from: Process, both functions, SAM template, tests", runNew)
}

// scaffoldFS holds the new service's files: each is a text/template whose name, less ".tmpl",
// is the path it is written to (gitignore.tmpl is written as .gitignore).
//
//go:embed scaffold
var scaffoldFS embed.FS

// ScaffoldOptions are what a new service's files are rendered with.
type ScaffoldOptions struct {
	Module         string // the service's module path (go.mod's module line)
	Name           string // the service's name: stack, consumer group, log groups, resources
	GaplessVersion string // the gapless release go.mod requires
	GaplessDir     string // absolute path of a gapless checkout go.mod replaces the release with; "" for none
}

// scaffoldData is the templates' view of ScaffoldOptions.
type scaffoldData struct {
	ScaffoldOptions
	Package string // the service's Go package name
}

// Sentinel errors of `gapless-dev new`, wrapped with the input they name.
var (
	ErrTargetNotEmpty = errors.New("target directory is not empty")
	ErrModulePath     = errors.New("invalid module path")
	ErrServiceName    = errors.New("invalid service name")
)

// gaplessModule is the module path of gapless, which the new service requires.
const gaplessModule = "github.com/gapless-dev/gapless"

// moduleElem is one element of a module path as `go mod init` accepts it.
var moduleElem = regexp.MustCompile(`^[A-Za-z0-9_~+-]+(?:\.[A-Za-z0-9_~+-]+)*$`)

// checkModulePath returns nil when p is a module path `go mod init` accepts and the new
// service may use: not gapless's own, nor under it.
func checkModulePath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: --module is required (e.g. --module example.com/orders)", ErrModulePath)
	}
	if p == gaplessModule || strings.HasPrefix(p, gaplessModule+"/") {
		return fmt.Errorf("%w %q: it is gapless's own; the service needs a module path of its own", ErrModulePath, p)
	}
	for _, e := range strings.Split(p, "/") {
		if !moduleElem.MatchString(e) {
			return fmt.Errorf("%w %q: element %q; want slash-separated elements of letters, digits and -._~+, "+
				"none empty or starting or ending with a dot (e.g. example.com/orders)", ErrModulePath, p, e)
		}
	}
	return nil
}

// serviceName is what --name must match: it is the stack name, the consumer group and a prefix
// of log group and local resource names, valid in each.
var serviceName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// defaultName is the service name a module path suggests: its last element (before a /vN
// major-version suffix), lower-cased.
func defaultName(modulePath string) string {
	elems := strings.Split(modulePath, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && regexp.MustCompile(`^v[0-9]+$`).MatchString(last) {
		last = elems[len(elems)-2]
	}
	return strings.ToLower(last)
}

// packageName is the Go package name of the service's root package: the name without dashes,
// suffixed when that is a Go keyword.
func packageName(name string) string {
	p := strings.ReplaceAll(name, "-", "")
	if token.IsKeyword(p) {
		p += "svc"
	}
	return p
}

// WriteScaffold renders the new service's files into dir, which must not exist or be empty.
// It writes no go.sum: `go mod tidy` in dir does.
func WriteScaffold(dir string, o ScaffoldOptions) error {
	if err := checkModulePath(o.Module); err != nil {
		return err
	}
	if !serviceName.MatchString(o.Name) {
		return fmt.Errorf("%w %q: want a lower-case letter, then up to 39 lower-case letters, digits or dashes (it names the stack and the consumer group)", ErrServiceName, o.Name)
	}
	if err := checkEmptyTarget(dir); err != nil {
		return err
	}
	data := scaffoldData{ScaffoldOptions: o, Package: packageName(o.Name)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fs.WalkDir(scaffoldFS, "scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, "scaffold/"), ".tmpl")
		if rel == "gitignore" {
			rel = ".gitignore"
		}
		src, err := scaffoldFS.ReadFile(p)
		if err != nil {
			return err
		}
		tmpl, err := template.New(rel).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return fmt.Errorf("scaffold %s: %w", rel, err)
		}
		var out bytes.Buffer
		if err := tmpl.Execute(&out, data); err != nil {
			return fmt.Errorf("scaffold %s: %w", rel, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, out.Bytes(), 0o644)
	})
}

// checkEmptyTarget refuses a dir that exists and holds anything, or is not a directory.
func checkEmptyTarget(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return fmt.Errorf("%w: %s is a file", ErrTargetNotEmpty, dir)
		}
		return err
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		more := ""
		if len(entries) > 3 {
			more = fmt.Sprintf(" and %d more", len(entries)-3)
		}
		return fmt.Errorf("%w: %s holds %s%s; name a new or empty directory", ErrTargetNotEmpty, dir, strings.Join(names, ", "), more)
	}
	return nil
}

// newOptions are the parsed arguments of `gapless-dev new`.
type newOptions struct {
	dir string
	ScaffoldOptions
}

func parseNewFlags(args []string, stdout io.Writer) (newOptions, error) {
	var o newOptions
	fs := flag.NewFlagSet("gapless-dev new", flag.ContinueOnError)
	fs.StringVar(&o.Module, "module", "", "the new service's Go module path (e.g. example.com/orders); required")
	fs.StringVar(&o.Name, "name", "", "the service's name: stack, consumer group, log groups (default: the module path's last element)")
	fs.StringVar(&o.GaplessDir, "gapless-dir", "", "a gapless checkout to build against instead of the release (go.mod gets a replace with its absolute path)")
	setHelp(fs, "new <dir> --module <module path> [--name <service name>] [--gapless-dir <checkout>]",
		"Writes a gapless service of your own into <dir> (new or empty): a Go module that requires\n"+
			"github.com/gapless-dev/gapless "+module.Version+" (this release) and holds\n"+
			"  process.go            your Process (it starts as a conditional PutItem to OUTPUT_TABLE)\n"+
			"  functions/consumer    main: the Kinesis consumer around the Process\n"+
			"  functions/reconciler  main: the reconciler around the same Process\n"+
			"  template.yaml         SAM application: stream, gapless's tables, queues, bucket, least-privilege roles, alarms\n"+
			"  samconfig.toml, Makefile  sam build (make build-<LogicalId>) && sam deploy --guided\n"+
			"  events/               a Kinesis event, its payloads, a schedule event and an env-vars file for local invokes\n"+
			"  process_test.go       a unit test of the Process and both functions against the local stack\n"+
			"then runs `go mod tidy` there to resolve the dependencies and write go.sum.")
	// <dir> may come before, between or after the flags.
	var pos []string
	for {
		if err := parseArgs(fs, args, stdout); err != nil {
			return o, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) == 0:
		return o, usagef("the target directory is required: new <dir> --module <module path>")
	case len(pos) > 1:
		return o, usagef("one target directory, not %d: %q", len(pos), pos)
	}
	o.dir = pos[0]
	if o.Module == "" {
		return o, usagef("--module is required: the new service's Go module path (e.g. --module example.com/orders)")
	}
	if err := checkModulePath(o.Module); err != nil {
		return o, usagef("--module: %v", err)
	}
	if o.Name == "" {
		o.Name = defaultName(o.Module)
		if !serviceName.MatchString(o.Name) {
			return o, usagef("--module %q suggests the service name %q, which is not valid (%s): pass --name", o.Module, o.Name, serviceName)
		}
	} else if !serviceName.MatchString(o.Name) {
		return o, usagef("--name %q: want a lower-case letter, then up to 39 lower-case letters, digits or dashes", o.Name)
	}
	if o.GaplessDir != "" {
		abs, err := filepath.Abs(o.GaplessDir)
		if err != nil {
			return o, err
		}
		if !fileExists(filepath.Join(abs, "go.mod")) || !fileExists(filepath.Join(abs, "gapless.go")) {
			return o, usagef("--gapless-dir %s: not a gapless checkout (no go.mod and gapless.go there)", o.GaplessDir)
		}
		o.GaplessDir = abs
	}
	o.GaplessVersion = module.Version
	return o, nil
}

// tidyTimeout bounds `go mod tidy` in the new service (it may download the dependencies).
const tidyTimeout = 5 * time.Minute

func runNew(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseNewFlags(args, stdout)
	if err != nil {
		return err
	}
	if err := checkEmptyTarget(o.dir); err != nil {
		return usagef("%v", err)
	}
	if err := WriteScaffold(o.dir, o.ScaffoldOptions); err != nil {
		return err
	}
	against := "github.com/gapless-dev/gapless " + o.GaplessVersion
	if o.GaplessDir != "" {
		against += " (replaced by " + o.GaplessDir + ")"
	}
	fmt.Fprintf(stdout, "wrote %s: module %s, service %s, requiring %s\n", o.dir, o.Module, o.Name, against)
	tidy := "go mod tidy"
	if _, err := exec.LookPath("go"); err != nil {
		fmt.Fprintf(stdout, "go is not on PATH: install Go, then run `%s` in %s to resolve the dependencies and write go.sum\n", tidy, o.dir)
	} else {
		fmt.Fprintf(stdout, "running `%s` in %s (resolves the dependencies, writes go.sum)\n", tidy, o.dir)
		tctx, cancel := context.WithTimeout(ctx, tidyTimeout)
		defer cancel()
		cmd := exec.CommandContext(tctx, "go", "mod", "tidy")
		cmd.Dir, cmd.Stdout, cmd.Stderr = o.dir, stderr, stderr
		if err := cmd.Run(); err != nil {
			hint := "check that the module proxy is reachable, then run it again"
			if o.GaplessDir == "" {
				hint = "if " + o.GaplessVersion + " is not published yet, build against a checkout: remove " + o.dir +
					" and run gapless-dev new again with --gapless-dir <checkout>"
			}
			return fmt.Errorf("the files are written, but `%s` in %s failed: %w; %s", tidy, o.dir, err, hint)
		}
	}
	fmt.Fprintf(stdout, `
Next (gapless-dev is bin/gapless-dev of a gapless checkout, after make gapless):
  cd %s
  make lint test        # gofmt, go vet, the tests; the one against the local stack skips without it
  gapless-dev up        # a local stack with what template.yaml declares; .local/stack.env here
  . .local/stack.env && make test
  gapless-dev invoke ConsumerFunction -e events/kinesis.json
  gapless-dev down && . .local/unset.env
  sam build && sam deploy --guided
Then make process.go's Process yours (idempotent by r.ID()) and grant what it calls in
template.yaml (the roles' WriteOutput statements). README.md says what each file is for.
`, o.dir)
	return nil
}
