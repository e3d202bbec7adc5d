package doctor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/cfnyaml"
)

// ErrTemplate is wrapped by every error reading a template or samconfig.toml.
var ErrTemplate = errors.New("doctor: template")

// Template is a CloudFormation/SAM template held as YAML nodes, with the parameter values of
// one deployment. Short-form intrinsics (!Ref, !GetAtt, !If, !Sub, …) stay on the nodes as
// their tag; long forms ({Ref: X}, {Fn::GetAtt: …}) are read too.
type Template struct {
	root   *yaml.Node
	params map[string]string // effective parameter values: defaults, then overrides
}

// ParseTemplate reads a template from YAML bytes with every parameter at its default.
func ParseTemplate(b []byte) (*Template, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: parse: %v", ErrTemplate, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: not a YAML mapping document", ErrTemplate)
	}
	t := &Template{root: doc.Content[0], params: map[string]string{}}
	ps := get(t.root, "Parameters")
	for _, name := range keys(ps) {
		t.params[name] = scalar(get(ps, name, "Default"))
	}
	return t, nil
}

// LoadTemplate reads the template at path.
func LoadTemplate(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	return ParseTemplate(b)
}

// Override sets parameter values (sam deploy --parameter-overrides); an unknown parameter is
// an error, as it is for CloudFormation.
func (t *Template) Override(values map[string]string) error {
	for k, v := range values {
		if get(t.root, "Parameters", k) == nil {
			return fmt.Errorf("%w: override of unknown parameter %s", ErrTemplate, k)
		}
		t.params[k] = v
	}
	return nil
}

// Param is a parameter's effective value.
func (t *Template) Param(name string) string { return t.params[name] }

// Resources lists the logical ids of the resources of the given Type, in file order.
func (t *Template) Resources(typ string) []string {
	res := get(t.root, "Resources")
	var ids []string
	for _, id := range keys(res) {
		if scalar(get(res, id, "Type")) == typ {
			ids = append(ids, id)
		}
	}
	return ids
}

// Type is a resource's Type ("" when absent).
func (t *Template) Type(id string) string { return scalar(get(t.root, "Resources", id, "Type")) }

// Prop is resource id's Properties.<path> node, nil when absent.
func (t *Template) Prop(id string, path ...string) *yaml.Node {
	return get(get(t.root, "Resources", id), append([]string{"Properties"}, path...)...)
}

// Events returns a function's events of the given Type (their Properties), in file order.
func (t *Template) Events(fn, typ string) []*yaml.Node {
	evs := t.Prop(fn, "Events")
	var out []*yaml.Node
	for _, k := range keys(evs) {
		if scalar(get(evs, k, "Type")) == typ {
			out = append(out, get(evs, k, "Properties"))
		}
	}
	return out
}

// Value resolves a node for this deployment: a literal is itself; !Ref P of a parameter is its
// value; !Ref R of a resource is "R"; !GetAtt R.A is "R.A"; !If picks the branch its condition
// selects; !Ref AWS::NoValue and a missing node are absent (ok false). Anything else (Sub,
// Select, …) is its function name in brackets, e.g. "[Fn::Sub]".
func (t *Template) Value(n *yaml.Node) (string, bool) {
	if n == nil {
		return "", false
	}
	fn, arg := intrinsic(n)
	switch fn {
	case "":
		if n.Kind == yaml.ScalarNode {
			return n.Value, true
		}
		return "", false
	case "Ref":
		if arg.Value == "AWS::NoValue" {
			return "", false
		}
		if v, ok := t.params[arg.Value]; ok {
			return v, true
		}
		return arg.Value, true
	case "Fn::GetAtt":
		return getAtt(n), true
	case "Fn::If":
		if arg.Kind != yaml.SequenceNode || len(arg.Content) != 3 {
			return "", false
		}
		if t.Condition(arg.Content[0].Value) {
			return t.Value(arg.Content[1])
		}
		return t.Value(arg.Content[2])
	}
	return "[" + fn + "]", true
}

// chosen follows the !If choices (by the template's conditions) from n to the node they pick;
// nested !If at most 32 deep.
func (t *Template) chosen(n *yaml.Node) *yaml.Node {
	for depth := 0; depth < 32; depth++ {
		fn, arg := intrinsic(n)
		if fn != "Fn::If" || arg.Kind != yaml.SequenceNode || len(arg.Content) != 3 {
			break
		}
		if t.Condition(arg.Content[0].Value) {
			n = arg.Content[1]
		} else {
			n = arg.Content[2]
		}
	}
	return n
}

// List resolves a node that is a list (or an !If choosing one) to its resolved items.
func (t *Template) List(n *yaml.Node) []string {
	n = t.chosen(n)
	if n == nil || ref(n) == "AWS::NoValue" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		if v, ok := t.Value(n); ok {
			return []string{v}
		}
		return nil
	}
	var out []string
	for _, item := range n.Content {
		if v, ok := t.Value(item); ok {
			out = append(out, v)
		}
	}
	return out
}

// Condition evaluates a named condition (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition) for
// this deployment's parameters. An unknown condition is false.
func (t *Template) Condition(name string) bool {
	return t.evalCond(get(t.root, "Conditions", name), 0)
}

func (t *Template) evalCond(n *yaml.Node, depth int) bool {
	if n == nil || depth > 32 {
		return false
	}
	fn, arg := intrinsic(n)
	switch fn {
	case "Condition":
		return t.evalCond(get(t.root, "Conditions", arg.Value), depth+1)
	case "Fn::Equals":
		if arg.Kind != yaml.SequenceNode || len(arg.Content) != 2 {
			return false
		}
		a, _ := t.Value(arg.Content[0])
		b, _ := t.Value(arg.Content[1])
		return a == b
	case "Fn::Not":
		if arg.Kind != yaml.SequenceNode || len(arg.Content) != 1 {
			return false
		}
		return !t.evalCond(arg.Content[0], depth+1)
	case "Fn::And", "Fn::Or":
		if arg.Kind != yaml.SequenceNode {
			return false
		}
		and := fn == "Fn::And"
		for _, c := range arg.Content {
			if t.evalCond(c, depth+1) != and {
				return !and
			}
		}
		return and
	}
	return false
}

// Exists reports whether resource id exists in this deployment (its Condition, if any, holds).
func (t *Template) Exists(id string) bool {
	r := get(t.root, "Resources", id)
	if r == nil {
		return false
	}
	if c := scalar(get(r, "Condition")); c != "" {
		return t.Condition(c)
	}
	return true
}

// The YAML node helpers of internal/cfnyaml, under short names.
var (
	get       = cfnyaml.Get
	keys      = cfnyaml.Keys
	scalar    = cfnyaml.Scalar
	intrinsic = cfnyaml.Intrinsic
	ref       = cfnyaml.Ref
	getAtt    = cfnyaml.GetAtt
)

// atoi is strconv.Atoi with ok.
func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n, err == nil
}
