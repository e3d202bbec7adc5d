// Package deploy holds the tests that tie the SAM application (template.yaml, samconfig.toml,
// mk/sam.mk) to the code: environment variable names, table keys, defaults, IAM scope and the
// build targets. It has no non-test code.
package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/cfnyaml"
)

// repoRoot is the module root (this package lives one level below it).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

// cfn is a CloudFormation template held as YAML nodes. Short-form intrinsics (!Ref, !GetAtt, !If,
// !Sub, …) stay on the nodes as their Tag; long forms ({Ref: X}, {Fn::GetAtt: …}) are read too.
type cfn struct {
	t    *testing.T
	root *yaml.Node
}

func loadCFN(t *testing.T, path string) *cfn {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("%s: not a YAML mapping document", path)
	}
	return &cfn{t: t, root: doc.Content[0]}
}

func loadTemplate(t *testing.T) *cfn {
	t.Helper()
	return loadCFN(t, filepath.Join(repoRoot(t), "template.yaml"))
}

// The YAML node helpers are internal/cfnyaml's, the ones gapless doctor reads the template with.
var (
	get  = cfnyaml.Get
	keys = cfnyaml.Keys
)

// resource returns the resource's mapping (Type, Properties, …), failing the test when absent.
func (c *cfn) resource(id string) *yaml.Node {
	c.t.Helper()
	r := get(c.root, "Resources", id)
	if r == nil {
		c.t.Fatalf("template.yaml: resource %s missing", id)
	}
	return r
}

// prop is resource id's Properties.<path>, nil when absent.
func (c *cfn) prop(id string, path ...string) *yaml.Node {
	c.t.Helper()
	return get(c.resource(id), append([]string{"Properties"}, path...)...)
}

// resourcesOfType lists the logical ids of the resources with the given Type, in file order.
func (c *cfn) resourcesOfType(typ string) []string {
	res := get(c.root, "Resources")
	var ids []string
	for _, id := range keys(res) {
		if scalar(get(res, id, "Type")) == typ {
			ids = append(ids, id)
		}
	}
	return ids
}

// param returns parameter name's declaration, failing the test when absent.
func (c *cfn) param(name string) *yaml.Node {
	c.t.Helper()
	p := get(c.root, "Parameters", name)
	if p == nil {
		c.t.Fatalf("template.yaml: parameter %s missing", name)
	}
	return p
}

// paramDefault is parameter name's Default as a string ("" when it has none).
func (c *cfn) paramDefault(name string) string {
	c.t.Helper()
	return scalar(get(c.param(name), "Default"))
}

// paramDefaultInt is a Number parameter's default.
func (c *cfn) paramDefaultInt(name string) int {
	c.t.Helper()
	n, err := strconv.Atoi(c.paramDefault(name))
	if err != nil {
		c.t.Fatalf("parameter %s: default %q is not an integer", name, c.paramDefault(name))
	}
	return n
}

var (
	scalar    = cfnyaml.Scalar
	intrinsic = cfnyaml.Intrinsic
	ref       = cfnyaml.Ref
	getAtt    = cfnyaml.GetAtt
)

// ifArgs returns the condition name and both branches of !If [cond, a, b].
func ifArgs(n *yaml.Node) (cond string, a, b *yaml.Node, ok bool) {
	fn, arg := intrinsic(n)
	if fn != "Fn::If" || arg.Kind != yaml.SequenceNode || len(arg.Content) != 3 {
		return "", nil, nil, false
	}
	return arg.Content[0].Value, arg.Content[1], arg.Content[2], true
}

// alternatives expands !If into the values it can take, dropping !Ref AWS::NoValue; any other
// node is its only alternative.
func alternatives(n *yaml.Node) []*yaml.Node {
	if ref(n) == "AWS::NoValue" {
		return nil
	}
	if _, a, b, ok := ifArgs(n); ok {
		return append(alternatives(a), alternatives(b)...)
	}
	return []*yaml.Node{n}
}

// targets names what a value can refer to, across !If branches: "X" for !Ref X, "X.Attr" for
// !GetAtt, the referenced names for !Select/!Split/!Join, "sub:<text>" for !Sub and "=<text>"
// for a literal. A list yields the targets of its items.
// failureBucketARN is the failure bucket's ARN by its fixed name, gapless-fail-<stack id>, as
// the template writes it in a Fn::Sub with Id the stack id's last part.
const failureBucketARN = "arn:${AWS::Partition}:s3:::gapless-fail-${Id}"

func targets(n *yaml.Node) []string {
	var out []string
	for _, v := range alternatives(n) {
		switch fn, arg := intrinsic(v); {
		case fn == "Ref":
			out = append(out, arg.Value)
		case fn == "Fn::GetAtt":
			out = append(out, getAtt(v))
		case fn == "Fn::Sub" && arg.Kind == yaml.SequenceNode && len(arg.Content) == 2 &&
			strings.HasPrefix(arg.Content[0].Value, failureBucketARN):
			// The failure bucket named by its fixed name (the roles cannot reference it: the
			// bucket waits for the failure queue's policy, which names the roles).
			// TestFailureBucket holds the bucket's BucketName to the same name.
			if rest := strings.TrimPrefix(arg.Content[0].Value, failureBucketARN); rest == "" {
				out = append(out, "FailureBucket.Arn")
			} else {
				out = append(out, "sub:${FailureBucket.Arn}"+rest)
			}
		case fn == "Fn::Sub":
			out = append(out, "sub:"+arg.Value)
		case fn == "Fn::Select" && arg.Kind == yaml.SequenceNode && len(arg.Content) == 2:
			out = append(out, targets(arg.Content[1])...)
		case (fn == "Fn::Split" || fn == "Fn::Join") && arg.Kind == yaml.SequenceNode && len(arg.Content) == 2:
			out = append(out, targets(arg.Content[1])...)
		case fn != "":
			out = append(out, "fn:"+fn)
		case v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				out = append(out, targets(item)...)
			}
		case v.Kind == yaml.ScalarNode:
			out = append(out, "="+v.Value)
		default:
			out = append(out, "?"+v.ShortTag())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// stringList returns a scalar or a sequence of scalars as a list.
func stringList(n *yaml.Node) []string {
	switch {
	case n == nil:
		return nil
	case n.Kind == yaml.ScalarNode:
		return []string{n.Value}
	case n.Kind == yaml.SequenceNode:
		var out []string
		for _, c := range n.Content {
			out = append(out, c.Value)
		}
		return out
	}
	return nil
}

// conditionParam returns P when condition name is !Equals [!Ref P, "true"] — the way a "true"/
// "false" String parameter becomes a Boolean property through !If [cond, true, false].
func (c *cfn) conditionParam(name string) string {
	fn, arg := intrinsic(get(c.root, "Conditions", name))
	if fn != "Fn::Equals" || arg.Kind != yaml.SequenceNode || len(arg.Content) != 2 {
		return ""
	}
	if p := ref(arg.Content[0]); p != "" && scalar(arg.Content[1]) == "true" {
		return p
	}
	return ""
}

// paramOf names the parameter a property takes its value from: !Ref P, or
// !If [C, true, false] with C = !Equals [!Ref P, "true"]. "" otherwise.
func (c *cfn) paramOf(n *yaml.Node) string {
	if p := ref(n); p != "" && get(c.root, "Parameters", p) != nil {
		return p
	}
	if cond, a, b, ok := ifArgs(n); ok && scalar(a) == "true" && scalar(b) == "false" {
		return c.conditionParam(cond)
	}
	return ""
}

// mentions reports whether any scalar under n has the value name (e.g. a parameter referenced
// somewhere inside a condition).
func mentions(n *yaml.Node, name string) bool {
	if n == nil {
		return false
	}
	if n.Kind == yaml.ScalarNode && n.Value == name {
		return true
	}
	for _, c := range n.Content {
		if mentions(c, name) {
			return true
		}
	}
	return false
}

// samTemplates finds every SAM application of the repository: each template.yaml or
// template.yml under the root that declares the Serverless transform, outside dependency and
// build trees (node_modules, .aws-sam, .git) and test fixtures (testdata, which the go tool
// ignores too). Paths are relative to the root, in walk order; template.yaml comes first.
func samTemplates(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".aws-sam", ".git", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if ok, _ := filepath.Match("template.y*ml", d.Name()); !ok {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "AWS::Serverless-2016-10-31") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	if len(out) < 2 || out[0] != "template.yaml" {
		t.Fatalf("SAM templates found: %v; want template.yaml and the examples'", out)
	}
	return out
}

// forEachTemplate runs f as a subtest for every SAM template of the repository and the one of
// a service `gapless-dev new` writes (scaffoldTemplate); path is the template's name there
// (templatePath is where it is).
func forEachTemplate(t *testing.T, f func(t *testing.T, path string, c *cfn)) {
	t.Helper()
	for _, rel := range append(samTemplates(t), scaffoldTemplate) {
		t.Run(rel, func(t *testing.T) {
			f(t, rel, loadCFN(t, templatePath(t, rel)))
		})
	}
}

// functionStatements returns every policy statement that applies to function fn, !If branches
// expanded: those of its Role (!GetAtt R.Arn, an AWS::IAM::Role of the template) and the
// Statement lists of its SAM Policies. A SAM policy template or managed policy name cannot be
// read here and fails the test.
func (c *cfn) functionStatements(fn string) []*yaml.Node {
	c.t.Helper()
	var out []*yaml.Node
	if role := getAtt(c.prop(fn, "Role")); role != "" {
		out = append(out, c.statements(strings.TrimSuffix(role, ".Arn"))...)
	}
	if pols := c.prop(fn, "Policies"); pols != nil {
		for _, p := range alternatives(pols) {
			for _, pol := range p.Content {
				st := get(pol, "Statement")
				if st == nil {
					c.t.Errorf("%s: Policies entry is not a {Statement: [...]} document; its grants cannot be checked", fn)
					continue
				}
				for _, s := range st.Content {
					out = append(out, alternatives(s)...)
				}
			}
		}
	}
	return out
}

// granted is what the statements allow: action -> resource targets (see targets).
func granted(statements []*yaml.Node) grants {
	g := grants{}
	for _, s := range statements {
		if scalar(get(s, "Effect")) == "Allow" {
			g.add(stringList(get(s, "Action")), targets(get(s, "Resource"))...)
		}
	}
	return g
}
