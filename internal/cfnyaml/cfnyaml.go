// Package cfnyaml reads CloudFormation/SAM templates as YAML node trees: mapping lookups and
// the intrinsic functions in both forms. Short-form intrinsics (!Ref, !GetAtt, !If, !Sub, …)
// are YAML tags on the nodes; long forms ({Ref: X}, {Fn::GetAtt: …}) are one-key mappings.
// gapless doctor and the template tests (deploy/) read template.yaml through it.
package cfnyaml

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// Get follows mapping keys from n; nil when any key is missing or a node is not a mapping.
func Get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// Keys lists the keys of mapping n in order.
func Keys(n *yaml.Node) []string {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var ks []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		ks = append(ks, n.Content[i].Value)
	}
	return ks
}

// Scalar is the value of a plain scalar node ("" for nil, intrinsics and collections).
func Scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || IsIntrinsicTag(n.Tag) {
		return ""
	}
	return n.Value
}

// IsIntrinsicTag reports whether a YAML tag is a CloudFormation short-form intrinsic (!Ref, …).
func IsIntrinsicTag(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

// Intrinsic reports the function a node calls ("Ref", "Fn::GetAtt", "Fn::If", "Condition", …)
// and its argument node, for both the short (!Ref X) and the long ({Ref: X}) form.
func Intrinsic(n *yaml.Node) (fn string, arg *yaml.Node) {
	if n == nil {
		return "", nil
	}
	if IsIntrinsicTag(n.Tag) {
		name := strings.TrimPrefix(n.Tag, "!")
		if name != "Ref" && name != "Condition" {
			name = "Fn::" + name
		}
		bare := *n
		bare.Tag = ""
		return name, &bare
	}
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 {
		k := n.Content[0].Value
		if k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::") {
			return k, n.Content[1]
		}
	}
	return "", nil
}

// Ref is X for !Ref X, "" otherwise.
func Ref(n *yaml.Node) string {
	if fn, arg := Intrinsic(n); fn == "Ref" && arg.Kind == yaml.ScalarNode {
		return arg.Value
	}
	return ""
}

// GetAtt is "X.Attr" for !GetAtt X.Attr or !GetAtt [X, Attr], "" otherwise.
func GetAtt(n *yaml.Node) string {
	fn, arg := Intrinsic(n)
	if fn != "Fn::GetAtt" {
		return ""
	}
	switch arg.Kind {
	case yaml.ScalarNode:
		return arg.Value
	case yaml.SequenceNode:
		if len(arg.Content) == 2 {
			return arg.Content[0].Value + "." + arg.Content[1].Value
		}
	}
	return ""
}
