package devcli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gapless-dev/gapless/internal/cli"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/samtemplate"
	"github.com/gapless-dev/gapless/internal/schema"
)

// templateFile is the --template flag's file: the flag's value, else template.yaml in the
// working directory, else, inside a gapless checkout, the checkout's root template.yaml. ok is
// false when there is none and the flag was not given.
func templateFile(flagValue string) (file string, ok bool, err error) {
	if flagValue != "" {
		if !fileExists(flagValue) {
			return "", false, fmt.Errorf("--template %s: no such file", flagValue)
		}
		return flagValue, true, nil
	}
	if fileExists("template.yaml") {
		return "template.yaml", true, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", false, err
	}
	for {
		if localstack.IsRoot(dir) {
			return filepath.Join(dir, "template.yaml"), true, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false, nil
		}
		dir = parent
	}
}

// readTemplate reads the --template flag's template; it is an error when there is none.
func readTemplate(flagValue string) (*samtemplate.Template, error) {
	file, ok, err := templateFile(flagValue)
	if err != nil {
		return nil, err
	}
	if !ok {
		wd, _ := os.Getwd()
		return nil, usagef("no template.yaml in %s: run in the directory of your SAM template or pass --template <file>", wd)
	}
	return samtemplate.Read(file)
}

// lookupFunction is the template's function id, or a usage error listing the template's
// functions and suggesting the nearest name.
func lookupFunction(t *samtemplate.Template, id string) (*samtemplate.Function, error) {
	if f, ok := t.Functions[id]; ok {
		return f, nil
	}
	names := t.FunctionNames()
	list := "it has none"
	if len(names) > 0 {
		list = "its functions: " + strings.Join(names, ", ")
	}
	if id == "" {
		return nil, usagef("which function? give the logical id of an %s of %s (%s)", samtemplate.FunctionType, t.Path, list)
	}
	hint := ""
	if s := cli.Nearest(id, names); s != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
	}
	return nil, fmt.Errorf("%w: unknown function %q%s: %s has no %s of that logical id; %s",
		errUsage, id, hint, t.Path, samtemplate.FunctionType, list)
}

// readEnvFile reads the env-vars file, or is an empty one for "".
func readEnvFile(file string) (samtemplate.EnvFile, error) {
	env := samtemplate.EnvFile{Path: file}
	if file == "" {
		return env, nil
	}
	all, err := localstack.ReadEnvFile(file)
	if err != nil {
		return env, err
	}
	env.Sections = all
	return env, nil
}

// defaultEnvFile is events/env.json next to the template when it exists, else "".
func defaultEnvFile(t *samtemplate.Template) string {
	if f := filepath.Join(t.Dir, "events", "env.json"); fileExists(f) {
		return relToWD(f)
	}
	return ""
}

// gaplessVar maps the variables gapless reads to the Resources field of what they name.
func gaplessVar(r *localstack.Resources, name string, kind samtemplate.Kind) *string {
	switch {
	case name == config.EnvStreamName && kind == samtemplate.Stream:
		return &r.Stream
	case name == config.EnvCheckpointTable && kind == samtemplate.Table:
		return &r.CheckpointTable
	case name == config.EnvDedupeTable && kind == samtemplate.Table:
		return &r.LedgerTable
	case name == config.EnvParkedQueueURL && kind == samtemplate.Queue:
		return &r.ParkedQueue
	case name == config.EnvTargetQueueURL && kind == samtemplate.Queue:
		return &r.TargetQueue
	case name == config.EnvPayloadBucket && kind == samtemplate.Bucket:
		return &r.PayloadBucket
	}
	return nil
}

// addDeclared adds to res the streams, tables, queues and buckets of the template for which
// keep is true and that res does not name yet (samtemplate.Template.ResourceName). One that a
// gapless variable names (CHECKPOINT_TABLE: !Ref CheckpointTable) gets internal/schema's
// definition and its variable in stack.env; the others their template definitions.
func addDeclared(res localstack.Resources, t *samtemplate.Template, env samtemplate.EnvFile, keep func(samtemplate.Resource) bool) localstack.Resources {
	for _, r := range t.Resources {
		if keep != nil && !keep(r) {
			continue
		}
		name := t.ResourceName(r, env)
		if slices.Contains(res.Names(), name) {
			continue
		}
		placed := false
		for _, v := range t.VarsReferring(r.LogicalID) {
			if f := gaplessVar(&res, v, r.Kind); f != nil && *f == "" {
				*f, placed = name, true
				break
			}
		}
		if placed {
			continue
		}
		switch r.Kind {
		case samtemplate.Stream:
			res.Streams = append(res.Streams, localstack.StreamDef{Name: name, Shards: r.Shards})
		case samtemplate.Table:
			res.Tables = append(res.Tables, schema.Table{Name: name, Keys: r.Keys, TTLAttribute: r.TTLAttribute})
		case samtemplate.Queue:
			res.Queues = append(res.Queues, schema.Queue{Name: name, FIFO: r.FIFO || strings.HasSuffix(name, ".fifo")})
		case samtemplate.Bucket:
			res.Buckets = append(res.Buckets, name)
		}
	}
	return res
}

// errNoBootstrap is returned when a build leaves no executable bootstrap.
var errNoBootstrap = errors.New("the build left no executable bootstrap")
