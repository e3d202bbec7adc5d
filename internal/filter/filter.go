// Package filter parses and evaluates the record filter: the JSON pattern syntax Lambda uses in
// an event-source mapping's FilterCriteria for Kinesis, whose only filterable key is `data`
// (the record's payload, decoded). One definition is used in three places so that they agree on
// every record: the mapping (template.yaml puts it in FilterCriteria; the local mapping applies
// it), the consumer (which never processes a record the filter drops) and the reconciler (which
// counts such a record as accounted for instead of taking it for a gap).
//
// Syntax and semantics follow the AWS pages "Control which events Lambda sends to your
// function" (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html,
// "Filter rule syntax") and "Using event filtering with a Kinesis event source"
// (https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis-filtering.html). Supported:
//
//   - nested keys: {"data": {"order": {"type": ["buy"]}}}; keys of one object are ANDed;
//   - a leaf is an array of rules, ORed: strings and numbers (exact), null, true/false, "" (empty);
//   - {"prefix": "s"}, {"suffix": "s"}, {"equals-ignore-case": "s"};
//   - {"anything-but": v} with v a string, a number or an array of them, or {"prefix": "s"};
//   - {"numeric": ["=", n]} and ranges such as {"numeric": [">", 0, "<=", 5]};
//   - {"exists": true|false};
//   - several patterns (FilterCriteria.Filters): a record is kept when any of them matches.
//
// A record is matched as event-ruler (the open-source matcher behind EventBridge patterns)
// matches it: its data is flattened into leaf values by path; when a value is an array, each
// element (an object too) is a value of the field, and a leaf matches when any value does;
// {"exists": false} matches a field with no leaf value (missing, an object, an empty array).
// Where AWS is silent or ambiguous, Keep keeps the record (match.go, "Where AWS is silent");
// TestAWSExamples holds every worked example of the AWS pages. A record whose data is not valid
// JSON matches no pattern (it is dropped): the Kinesis page says both the data and the filter
// must be valid JSON to filter properly, and Lambda drops the record otherwise. An aggregated
// (KPL) record is not JSON: Lambda filters the user records inside an aggregate only with
// enhanced fan-out (the Kinesis page, "Filtering Kinesis aggregated records"). Which bytes Keep
// is given is the caller's choice: the local mapping (a standard iterator) gives it each Kinesis
// record's data, the consumer and the reconciler each user record's (docs/deploy.md, "Record
// filter").
// Not supported (Parse rejects them): "$or", "wildcard", "cidr", "anything-but" with suffix or
// equals-ignore-case, and keys other than data at the top.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrPattern is wrapped by Parse for a pattern it cannot use.
var ErrPattern = errors.New("filter: invalid pattern")

// Filter is a parsed set of patterns (ORed). A nil or empty Filter keeps every record. It is
// immutable and safe for concurrent use.
type Filter struct {
	raw      []string
	patterns []paths
}

// node is one level of a pattern: either an object (children, ANDed) or a leaf (rules, ORed).
type node struct {
	children map[string]*node
	rules    []rule
}

type ruleKind int

const (
	ruleEqual ruleKind = iota // str, num, boolean or null
	rulePrefix
	ruleSuffix
	ruleIgnoreCase
	ruleAnythingBut       // values
	ruleAnythingButPrefix // str
	ruleNumeric
	ruleExists
)

type rule struct {
	kind   ruleKind
	value  any // ruleEqual: string, num, bool or nil
	str    string
	values []any // ruleAnythingBut: strings and nums
	ranges []bound
	exists bool
}

type bound struct {
	op string
	n  num
}

// Parse parses patterns, each one a FilterCriteria Pattern (a JSON object whose only top-level
// key is "data"). Blank patterns are ignored; no pattern at all gives a Filter that keeps every
// record.
func Parse(patterns ...string) (*Filter, error) {
	f := &Filter{}
	for _, p := range patterns {
		if strings.TrimSpace(p) == "" {
			continue
		}
		n, err := parsePattern(p)
		if err != nil {
			return nil, err
		}
		ps := paths{}
		if err := n.flatten("", ps); err != nil {
			return nil, err
		}
		f.raw = append(f.raw, p)
		f.patterns = append(f.patterns, ps)
	}
	return f, nil
}

// MustParse is Parse for patterns known to be valid (tests, constants); it panics on an error.
func MustParse(patterns ...string) *Filter {
	f, err := Parse(patterns...)
	if err != nil {
		panic(err)
	}
	return f
}

// Active reports whether the filter drops anything at all (it has at least one pattern).
func (f *Filter) Active() bool { return f != nil && len(f.patterns) > 0 }

// Patterns returns the patterns as given, for FilterCriteria.
func (f *Filter) Patterns() []string {
	if f == nil {
		return nil
	}
	return append([]string(nil), f.raw...)
}

// Keep reports whether a record whose payload is data passes the filter (Lambda would send it to
// the function). A nil or empty Filter keeps everything.
func (f *Filter) Keep(data []byte) bool {
	if !f.Active() {
		return true
	}
	ev, err := flattenRecord(data)
	if err != nil {
		return false // not JSON: Lambda drops it
	}
	for _, p := range f.patterns {
		if p.match(ev) {
			return true
		}
	}
	return false
}

func parsePattern(s string) (*node, error) {
	v, err := decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPattern, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: must be a JSON object", ErrPattern)
	}
	if len(obj) == 0 {
		return nil, fmt.Errorf("%w: empty pattern", ErrPattern)
	}
	for k := range obj {
		if k != "data" {
			// "Kinesis event source mappings only support filtering on the data key."
			return nil, fmt.Errorf("%w: top-level key %q: Kinesis filters only on \"data\"", ErrPattern, k)
		}
	}
	return parseNode(obj, "")
}

// decode parses one JSON document (numbers kept as json.Number).
func decode(b []byte) (any, error) {
	if !json.Valid(b) {
		return nil, errors.New("not one valid JSON document")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func parseNode(obj map[string]any, path string) (*node, error) {
	n := &node{children: make(map[string]*node, len(obj))}
	for k, v := range obj {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if strings.HasPrefix(k, "$") {
			return nil, fmt.Errorf("%w: %s: operator %q is not supported", ErrPattern, p, k)
		}
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: %s: empty object", ErrPattern, p)
			}
			c, err := parseNode(v, p)
			if err != nil {
				return nil, err
			}
			n.children[k] = c
		case []any:
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: %s: empty rule list", ErrPattern, p)
			}
			leaf := &node{}
			for _, r := range v {
				rl, err := parseRule(r, p)
				if err != nil {
					return nil, err
				}
				leaf.rules = append(leaf.rules, rl)
			}
			n.children[k] = leaf
		default:
			return nil, fmt.Errorf("%w: %s: a value must be an object or an array of rules", ErrPattern, p)
		}
	}
	return n, nil
}

func parseRule(r any, path string) (rule, error) {
	switch r := r.(type) {
	case nil:
		return rule{kind: ruleEqual, value: nil}, nil
	case bool:
		return rule{kind: ruleEqual, value: r}, nil
	case string:
		return rule{kind: ruleEqual, value: r}, nil
	case json.Number:
		n, err := number(r)
		if err != nil {
			return rule{}, fmt.Errorf("%w: %s: %v", ErrPattern, path, err)
		}
		return rule{kind: ruleEqual, value: n}, nil
	case map[string]any:
		if len(r) != 1 {
			return rule{}, fmt.Errorf("%w: %s: a rule object has exactly one operator", ErrPattern, path)
		}
		for op, arg := range r {
			return parseOperator(op, arg, path)
		}
	}
	return rule{}, fmt.Errorf("%w: %s: unsupported rule %v", ErrPattern, path, r)
}

func parseOperator(op string, arg any, path string) (rule, error) {
	bad := func(why string) (rule, error) {
		return rule{}, fmt.Errorf("%w: %s: %q %s", ErrPattern, path, op, why)
	}
	switch op {
	case "prefix", "suffix", "equals-ignore-case":
		s, ok := arg.(string)
		if !ok {
			return bad("takes a string")
		}
		kind := map[string]ruleKind{"prefix": rulePrefix, "suffix": ruleSuffix, "equals-ignore-case": ruleIgnoreCase}[op]
		return rule{kind: kind, str: s}, nil
	case "exists":
		b, ok := arg.(bool)
		if !ok {
			return bad("takes true or false")
		}
		return rule{kind: ruleExists, exists: b}, nil
	case "anything-but":
		switch a := arg.(type) {
		case map[string]any:
			p, ok := a["prefix"].(string)
			if len(a) != 1 || !ok {
				return bad(`supports only {"prefix": "..."} as an object`)
			}
			return rule{kind: ruleAnythingButPrefix, str: p}, nil
		case []any:
			var vals []any
			for _, x := range a {
				v, err := scalar(x)
				if err != nil {
					return bad(err.Error())
				}
				vals = append(vals, v)
			}
			if len(vals) == 0 {
				return bad("needs at least one value")
			}
			return rule{kind: ruleAnythingBut, values: vals}, nil
		default:
			v, err := scalar(a)
			if err != nil {
				return bad(err.Error())
			}
			return rule{kind: ruleAnythingBut, values: []any{v}}, nil
		}
	case "numeric":
		a, ok := arg.([]any)
		if !ok || len(a) == 0 || len(a)%2 != 0 || len(a) > 4 {
			return bad(`takes [op, n] or [op, n, op, n]`)
		}
		var rs []bound
		for i := 0; i < len(a); i += 2 {
			o, ok := a[i].(string)
			if !ok || (o != "=" && o != "<" && o != "<=" && o != ">" && o != ">=") {
				return bad(fmt.Sprintf("operator %v is not one of = < <= > >=", a[i]))
			}
			num, ok := a[i+1].(json.Number)
			if !ok {
				return bad(fmt.Sprintf("%v is not a number", a[i+1]))
			}
			n, err := number(num)
			if err != nil {
				return bad(err.Error())
			}
			rs = append(rs, bound{op: o, n: n})
		}
		return rule{kind: ruleNumeric, ranges: rs}, nil
	}
	return bad("is not supported")
}

func scalar(x any) (any, error) {
	switch x := x.(type) {
	case string:
		return x, nil
	case json.Number:
		return number(x)
	}
	return nil, fmt.Errorf("takes strings or numbers, not %v", x)
}

func number(n json.Number) (num, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return num{}, fmt.Errorf("%s is not a usable number", n)
	}
	return num{text: string(n), f: f}, nil
}

func (r rule) matchScalar(v any) bool {
	switch r.kind {
	case ruleEqual:
		return equal(r.value, v)
	case rulePrefix:
		s, ok := v.(string)
		return ok && strings.HasPrefix(s, r.str)
	case ruleSuffix:
		s, ok := v.(string)
		return ok && strings.HasSuffix(s, r.str)
	case ruleIgnoreCase:
		s, ok := v.(string)
		return ok && ignoreCase(r.str, s)
	case ruleAnythingBut:
		for _, x := range r.values {
			if excluded(x, v) {
				return false
			}
		}
		return true
	case ruleAnythingButPrefix:
		s, ok := v.(string)
		return !ok || !strings.HasPrefix(s, r.str)
	case ruleNumeric:
		jn, ok := v.(json.Number)
		if !ok {
			return false
		}
		n, err := number(jn)
		if err != nil {
			return false
		}
		return inRange(n, r.ranges)
	}
	return false
}
