// Package samtemplate reads what the developer tool needs from a SAM template: its functions
// (code location, build method, timeout, environment variables) and the streams, tables,
// queues and buckets it declares, so that gapless-dev can build, run and provision a service
// of any layout on the local stack.
package samtemplate

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/cfnyaml"
	"github.com/gapless-dev/gapless/internal/schema"
)

// FunctionType is the resource type of the functions the developer tool runs.
const FunctionType = "AWS::Serverless::Function"

// ErrUnknownFunction is returned for a logical id that is not a function of the template.
var ErrUnknownFunction = errors.New("not a function of the template")

// ErrUnsetVariable is returned when a function variable's template value is an intrinsic
// (!Ref, !GetAtt, !Sub, …) the env-vars file does not set.
var ErrUnsetVariable = errors.New("template variables with intrinsic values are not set")

// Template is a parsed SAM template.
type Template struct {
	Path      string               // as given to Read
	Dir       string               // the directory holding it: CodeUri is relative to it
	Functions map[string]*Function // by logical id
	Resources []Resource           // streams, tables, queues and buckets, in document order
}

// Function is one AWS::Serverless::Function, Globals.Function merged in.
type Function struct {
	LogicalID   string
	CodeDir     string        // CodeUri resolved against the template's directory
	BuildMethod string        // Metadata.BuildMethod: "makefile", "go1.x", or ""
	Timeout     time.Duration // Timeout in seconds; 0 when neither the function nor Globals set one
	Vars        []Var         // Environment.Variables: Globals' first, the function's overriding them
}

// Var is one environment variable of a function.
type Var struct {
	Name      string
	Value     string   // the literal value; "" when Intrinsic is set
	Intrinsic string   // the intrinsic function its value calls ("Ref", "Fn::GetAtt", …); "" for a literal
	Refs      []string // the logical ids it !Ref's, directly or in a branch of !If
}

// Kind is the kind of a resource the local stack can hold.
type Kind string

// The kinds of resources the local stack creates.
const (
	Stream Kind = "AWS::Kinesis::Stream"
	Table  Kind = "AWS::DynamoDB::Table"
	Queue  Kind = "AWS::SQS::Queue"
	Bucket Kind = "AWS::S3::Bucket"
)

// nameProperty is the property that names a resource of each kind.
var nameProperty = map[Kind]string{Stream: "Name", Table: "TableName", Queue: "QueueName", Bucket: "BucketName"}

// Resource is a stream, table, queue or bucket of the template.
type Resource struct {
	LogicalID    string
	Kind         Kind
	Name         string       // the name property when it is a literal, else ""
	Shards       int32        // a stream's ShardCount (a parameter's default for !Ref); 1 when unset
	Keys         []schema.Key // a table's KeySchema with the AttributeDefinitions' types
	TTLAttribute string       // a table's enabled TimeToLiveSpecification attribute
	FIFO         bool         // a queue's FifoQueue: true
}

// Read parses the template at file.
func Read(file string) (*Template, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("template %s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("template %s is empty", file)
	}
	root := doc.Content[0]
	res := cfnyaml.Get(root, "Resources")
	if res == nil {
		return nil, fmt.Errorf("template %s has no Resources", file)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	t := &Template{Path: file, Dir: filepath.Dir(abs), Functions: map[string]*Function{}}
	params := map[string]string{}
	pn := cfnyaml.Get(root, "Parameters")
	for _, p := range cfnyaml.Keys(pn) {
		params[p] = cfnyaml.Scalar(cfnyaml.Get(pn, p, "Default"))
	}
	globals := cfnyaml.Get(root, "Globals", "Function")
	for _, id := range cfnyaml.Keys(res) {
		r := cfnyaml.Get(res, id)
		props := cfnyaml.Get(r, "Properties")
		kind := cfnyaml.Scalar(cfnyaml.Get(r, "Type"))
		if kind == FunctionType {
			f, err := readFunction(t.Dir, id, r, globals, params)
			if err != nil {
				return nil, fmt.Errorf("template %s: %w", file, err)
			}
			t.Functions[id] = f
			continue
		}
		k := Kind(kind)
		if _, ok := nameProperty[k]; !ok {
			continue
		}
		rr := Resource{LogicalID: id, Kind: k, Name: cfnyaml.Scalar(cfnyaml.Get(props, nameProperty[k]))}
		switch k {
		case Stream:
			rr.Shards = 1
			if n, ok := number(cfnyaml.Get(props, "ShardCount"), params); ok && n > 0 {
				rr.Shards = int32(n)
			}
		case Table:
			if rr.Keys, err = tableKeys(props); err != nil {
				return nil, fmt.Errorf("template %s: table %s: %w", file, id, err)
			}
			if cfnyaml.Scalar(cfnyaml.Get(props, "TimeToLiveSpecification", "Enabled")) == "true" {
				rr.TTLAttribute = cfnyaml.Scalar(cfnyaml.Get(props, "TimeToLiveSpecification", "AttributeName"))
			}
		case Queue:
			rr.FIFO = cfnyaml.Scalar(cfnyaml.Get(props, "FifoQueue")) == "true"
		}
		t.Resources = append(t.Resources, rr)
	}
	return t, nil
}

func readFunction(dir, id string, r, globals *yaml.Node, params map[string]string) (*Function, error) {
	props := cfnyaml.Get(r, "Properties")
	f := &Function{LogicalID: id, BuildMethod: cfnyaml.Scalar(cfnyaml.Get(r, "Metadata", "BuildMethod"))}
	code := cfnyaml.Get(props, "CodeUri")
	if code == nil {
		code = cfnyaml.Get(globals, "CodeUri")
	}
	uri := cfnyaml.Scalar(code)
	if uri == "" {
		return nil, fmt.Errorf("function %s: CodeUri is not a local directory (a literal path is needed to build it)", id)
	}
	if strings.HasPrefix(uri, "s3://") {
		return nil, fmt.Errorf("function %s: CodeUri %s is in S3, not a local directory", id, uri)
	}
	f.CodeDir = filepath.Join(dir, filepath.FromSlash(uri))
	for _, n := range []*yaml.Node{cfnyaml.Get(props, "Timeout"), cfnyaml.Get(globals, "Timeout")} {
		if n == nil {
			continue
		}
		s, ok := number(n, params)
		if !ok || s <= 0 {
			return nil, fmt.Errorf("function %s: Timeout is not a number of seconds (or a !Ref to a parameter with a numeric Default)", id)
		}
		f.Timeout = time.Duration(s) * time.Second
		break
	}
	for _, vars := range []*yaml.Node{cfnyaml.Get(globals, "Environment", "Variables"), cfnyaml.Get(props, "Environment", "Variables")} {
		for _, name := range cfnyaml.Keys(vars) {
			n := cfnyaml.Get(vars, name)
			v := Var{Name: name, Refs: refs(n)}
			if fn, _ := cfnyaml.Intrinsic(n); fn != "" {
				v.Intrinsic = fn
			} else {
				v.Value = n.Value
			}
			if i := slices.IndexFunc(f.Vars, func(o Var) bool { return o.Name == name }); i >= 0 {
				f.Vars[i] = v
			} else {
				f.Vars = append(f.Vars, v)
			}
		}
	}
	return f, nil
}

// number is an integer literal, or the numeric Default of the parameter a !Ref names.
func number(n *yaml.Node, params map[string]string) (int, bool) {
	s := cfnyaml.Scalar(n)
	if ref := cfnyaml.Ref(n); ref != "" {
		s = params[ref]
	}
	v, err := strconv.Atoi(s)
	return v, err == nil
}

// refs are the logical ids n !Ref's, itself or in the branches of an !If.
func refs(n *yaml.Node) []string {
	if r := cfnyaml.Ref(n); r != "" {
		return []string{r}
	}
	fn, arg := cfnyaml.Intrinsic(n)
	if fn != "Fn::If" || arg == nil || arg.Kind != yaml.SequenceNode || len(arg.Content) != 3 {
		return nil
	}
	return append(refs(arg.Content[1]), refs(arg.Content[2])...)
}

func tableKeys(props *yaml.Node) ([]schema.Key, error) {
	types := map[string]string{}
	defs := cfnyaml.Get(props, "AttributeDefinitions")
	if defs != nil {
		for _, d := range defs.Content {
			types[cfnyaml.Scalar(cfnyaml.Get(d, "AttributeName"))] = cfnyaml.Scalar(cfnyaml.Get(d, "AttributeType"))
		}
	}
	ks := cfnyaml.Get(props, "KeySchema")
	if ks == nil || ks.Kind != yaml.SequenceNode || len(ks.Content) == 0 {
		return nil, errors.New("KeySchema is not a literal list")
	}
	var keys []schema.Key
	for _, k := range ks.Content {
		name, kt := cfnyaml.Scalar(cfnyaml.Get(k, "AttributeName")), cfnyaml.Scalar(cfnyaml.Get(k, "KeyType"))
		if name == "" || (kt != "HASH" && kt != "RANGE") {
			return nil, errors.New("a KeySchema element lacks a literal AttributeName or KeyType (HASH or RANGE)")
		}
		if types[name] == "" {
			return nil, fmt.Errorf("key %s has no AttributeDefinitions entry", name)
		}
		keys = append(keys, schema.Key{Name: name, AttributeType: types[name], KeyType: kt})
	}
	return keys, nil
}

// FunctionNames are the logical ids of the template's functions, sorted.
func (t *Template) FunctionNames() []string {
	names := make([]string, 0, len(t.Functions))
	for n := range t.Functions {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// EnvFile is a `sam local invoke --env-vars` file: one object of variables per function logical
// id, and "Parameters" for variables every function gets.
type EnvFile struct {
	Path     string
	Sections map[string]map[string]string
}

// ParametersSection is the env-vars file's section that applies to every function.
const ParametersSection = "Parameters"

// section is what the file sets for the function: Parameters, overridden by its own section.
func (e EnvFile) section(function string) map[string]string {
	out := map[string]string{}
	for k, v := range e.Sections[ParametersSection] {
		out[k] = v
	}
	for k, v := range e.Sections[function] {
		out[k] = v
	}
	return out
}

// Env is the function's environment: the template's literal values, overridden by the env-vars
// file's sections (Parameters, then the function's; variables the template does not declare
// are passed too). A variable whose template value is an intrinsic that the file does not set
// is an error wrapping ErrUnsetVariable naming each such variable and where to set it.
func (f *Function) Env(env EnvFile) (map[string]string, error) {
	set := env.section(f.LogicalID)
	out := map[string]string{}
	var unset []string
	for _, v := range f.Vars {
		if v.Intrinsic == "" {
			out[v.Name] = v.Value
		} else if _, ok := set[v.Name]; !ok {
			unset = append(unset, v.Name+" ("+shortTag(v.Intrinsic)+")")
		}
	}
	if len(unset) > 0 {
		where := fmt.Sprintf("in the %q section of %s", f.LogicalID, env.Path)
		if env.Path == "" {
			where = fmt.Sprintf("in an env-vars file (events/env.json next to the template, or --env file.json) with a %q section", f.LogicalID)
		}
		return nil, fmt.Errorf("%s: %w: %s; only CloudFormation resolves those: set them %s",
			f.LogicalID, ErrUnsetVariable, strings.Join(unset, ", "), where)
	}
	for k, v := range set {
		out[k] = v
	}
	return out, nil
}

func shortTag(fn string) string { return "!" + strings.TrimPrefix(fn, "Fn::") }

// ResourceName is the name a resource gets on the local stack: its name property when it is a
// literal; else the value the env-vars file gives a function variable that !Ref's it (the last
// path element of a queue URL); else its logical id (lower-cased for a bucket, with .fifo for a
// FIFO queue, as S3 and SQS require).
func (t *Template) ResourceName(r Resource, env EnvFile) string {
	if r.Name != "" {
		return r.Name
	}
	for _, fn := range t.FunctionNames() {
		set := env.section(fn)
		for _, v := range t.Functions[fn].Vars {
			if !slices.Contains(v.Refs, r.LogicalID) {
				continue
			}
			if val := strings.TrimSpace(set[v.Name]); val != "" {
				if r.Kind == Queue && strings.Contains(val, "/") {
					return path.Base(val)
				}
				return val
			}
		}
	}
	switch {
	case r.Kind == Bucket:
		return strings.ToLower(r.LogicalID)
	case r.Kind == Queue && r.FIFO:
		return r.LogicalID + ".fifo"
	}
	return r.LogicalID
}

// VarsReferring are the names of the variables of any function that !Ref the resource.
func (t *Template) VarsReferring(logicalID string) []string {
	var out []string
	for _, fn := range t.FunctionNames() {
		for _, v := range t.Functions[fn].Vars {
			if slices.Contains(v.Refs, logicalID) && !slices.Contains(out, v.Name) {
				out = append(out, v.Name)
			}
		}
	}
	return out
}
