package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"unicode"
	"unicode/utf8"
)

// How a record is matched. Lambda "supports the same set of syntax and rules as Amazon
// EventBridge" (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html,
// "Filter rule syntax"), whose matcher is the open-source aws/event-ruler. Like event-ruler, a
// record is flattened into leaf values by path ("data.order.type"), and a pattern into rules by
// the same paths:
//
//   - an array is crushed: its elements (objects, arrays or scalars) are all values of the field
//     that holds it (event-ruler README, "JSON Array Matching": {"employees": {"firstName":
//     ["Anna"]}} matches {"employees": [{"firstName": "Anna"}, ...]});
//   - exists matches leaves only ("Exists matching only works on leaf nodes", EventBridge
//     "Content filtering", "Exists matching"): {"exists": false} matches a field whose value is
//     an object, an empty object or an empty array, as well as a missing one;
//   - keys are joined with "." (event-ruler README, "Compiled rules and JSON keys with dots"), so
//     {"a.b": [...]} and {"a": {"b": [...]}} name the same field.
//
// Where AWS is silent or ambiguous the evaluator keeps the record whenever Lambda might deliver
// it. The reason is the asymmetry of the two mistakes: a record kept here that Lambda dropped is
// a gap to the reconciler, which replays it (a filtered record processed, late, once); a record
// dropped here that Lambda delivered is acknowledged unprocessed by the consumer and counted as
// filtered by the reconciler: lost without a trace. The choices (TestAWSExamples, "chosen"):
//
//   - fields of different elements of one array may match together (event-ruler's older
//     rulesForEvent does; its rulesForJSONEvent does not; Lambda does not say which it runs);
//   - {"exists": true} also matches a field whose value is an object or an array, empty or not;
//   - a key given twice in the record gives the field both values (a streaming reader such as
//     event-ruler's sees both; encoding/json into a map would keep the last);
//   - a bare number in a pattern matches a record number with the same text, the same float64
//     value, or the same value in micro-units: Lambda's note says "300, 300.0, and 3.0e2 are not
//     considered equal", event-ruler matches a pattern number both as text and numerically, and
//     EventBridge documented six digits right of the decimal point (event-ruler truncated to
//     micro-units before 2024);
//   - {"numeric": ...} holds if every bound holds in float64 or every bound holds in micro-units
//     (values within ±5e9, the range of that older comparison);
//   - {"anything-but": n} excludes a record number only when its text is n's text (3.0e2 is
//     kept by anything-but 300: under the note's string comparison they differ).
//   - a pattern string that is an IP address matches the same address spelled another way
//     (sameIP);
//   - {"equals-ignore-case": s} matches what Go's case folding matches and what event-ruler's
//     per-character lower/upper forms match (ignoreCase: "straße" keeps "STRASSE").

// paths is one pattern flattened: the rules of each leaf field by path, ANDed.
type paths map[string][]rule

// flatten adds the rules of n's leaves to ps, by path. Two leaves that name the same path (a
// dotted key and the nested keys it spells) are rejected: event-ruler refuses a path "allowed
// multiple times", and AWS does not say whether Lambda ANDs or overrides them.
func (n *node) flatten(path string, ps paths) error {
	if n.rules != nil {
		if _, dup := ps[path]; dup {
			return fmt.Errorf("%w: %s: the field is named twice (a dotted key and nested keys)",
				ErrPattern, path)
		}
		ps[path] = n.rules
		return nil
	}
	for k, c := range n.children {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if err := c.flatten(p, ps); err != nil {
			return err
		}
	}
	return nil
}

// record is a record's data flattened: its leaf values (string, json.Number, bool or nil) by
// path, and the paths whose value is an object or an array.
type record struct {
	leaves map[string][]any
	inner  map[string]bool
}

// flattenRecord reads data (one JSON document) as the value of the field "data".
func flattenRecord(data []byte) (*record, error) {
	if !json.Valid(data) {
		return nil, errors.New("not one valid JSON document")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := &record{leaves: map[string][]any{}, inner: map[string]bool{}}
	return r, r.read(dec, "data")
}

func (r *record) read(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		r.leaves[path] = append(r.leaves[path], tok)
		return nil
	}
	r.inner[path] = true
	for dec.More() {
		p := path // an array's elements are values of the field holding it
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			p = path + "." + k.(string)
		}
		if err := r.read(dec, p); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// match reports whether the record has every field of ps with a value one of its rules matches.
func (ps paths) match(r *record) bool {
	for path, rules := range ps {
		if !matchField(rules, r.leaves[path], r.inner[path]) {
			return false
		}
	}
	return true
}

func matchField(rules []rule, leaves []any, inner bool) bool {
	for _, rl := range rules {
		if rl.kind == ruleExists {
			if rl.exists && (len(leaves) > 0 || inner) || !rl.exists && len(leaves) == 0 {
				return true
			}
			continue
		}
		for _, v := range leaves {
			if rl.matchScalar(v) {
				return true
			}
		}
	}
	return false
}

// num is a number of a pattern or a record: its JSON text and its float64 value.
type num struct {
	text string
	f    float64
}

// micro is event-ruler's number comparison before 2024 (ComparableNumber.generate: the value in
// micro-units, offset by five billion, truncated); ok is false outside its range.
func (n num) micro() (key int64, ok bool) {
	const fiveBillion = 5e9
	if n.f < -fiveBillion || n.f > fiveBillion {
		return 0, false
	}
	return int64(1e6 * (fiveBillion + n.f)), true
}

// inRange reports whether n satisfies every bound, in float64 or (all of them) in micro-units.
func inRange(n num, bounds []bound) bool {
	all := true
	for _, b := range bounds {
		if !compare(n.f, b.op, b.n.f) {
			all = false
			break
		}
	}
	if all {
		return true
	}
	k, ok := n.micro()
	if !ok {
		return false
	}
	for _, b := range bounds {
		bk, ok := b.n.micro()
		if !ok || !compare(float64(k), b.op, float64(bk)) {
			return false
		}
	}
	return true
}

func compare(a float64, op string, b float64) bool {
	switch op {
	case "=":
		return a == b
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	}
	return a >= b // ">="
}

// equal compares a pattern value (string, num, bool, nil) with a record value.
func equal(want, got any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case string:
		s, ok := got.(string)
		return ok && (s == w || sameIP(w, s))
	case bool:
		b, ok := got.(bool)
		return ok && b == w
	case num:
		jn, ok := got.(json.Number)
		if !ok {
			return false
		}
		if string(jn) == w.text {
			return true
		}
		n, err := number(jn)
		return err == nil && inRange(n, []bound{{op: "=", n: w}})
	}
	return false
}

// excluded reports whether anything-but's value x excludes the record value v: the same string,
// or a number with the same text (see "Where AWS is silent" above).
func excluded(x, v any) bool {
	switch x := x.(type) {
	case string:
		s, ok := v.(string)
		return ok && s == x
	case num:
		jn, ok := v.(json.Number)
		return ok && string(jn) == x.text
	}
	return false
}

// sameIP reports whether the strings are one IP address written two ways: event-ruler compiles a
// pattern string that is an IP address literal into the address's range
// (JsonRuleCompiler.writeRules, CIDR.ipToRangeIfPossible), so "2001:db8::1" matches
// "2001:0db8:0:0:0:0:0:1". Lambda does not say so; kept, as the choice that cannot lose a record.
func sameIP(a, b string) bool {
	ia := net.ParseIP(a)
	return ia != nil && ia.Equal(net.ParseIP(b))
}

// ignoreCase reports whether s equals pattern ignoring case, as Go folds case or as event-ruler
// does: each character of the pattern matches its lower-case or its upper-case form, as Java
// writes them (EqualsIgnoreCaseParser: toLowerCase/toUpperCase(Locale.ROOT), which map some
// characters to several, "ß" to "SS"). Go's simple mappings stand in for Java's, with the full
// mappings of fullUpper and fullLower.
func ignoreCase(pattern, s string) bool {
	return strings.EqualFold(s, pattern) || rulerFold(pattern, s)
}

// The unconditional multi-character case mappings of Unicode's SpecialCasing.txt for the Latin
// letters and ligatures (Java applies all of them; these are the ones a JSON filter plausibly
// names).
var (
	fullUpper = map[rune]string{
		'ß': "SS", 'ﬀ': "FF", 'ﬁ': "FI", 'ﬂ': "FL", 'ﬃ': "FFI", 'ﬄ': "FFL", 'ﬅ': "ST", 'ﬆ': "ST",
		'ŉ': "ʼN", 'ǰ': "J̌",
	}
	fullLower = map[rune]string{'İ': "i̇"}
)

func rulerFold(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	c, n := utf8.DecodeRuneInString(pattern)
	lower, upper := string(unicode.ToLower(c)), string(unicode.ToUpper(c))
	if f, ok := fullLower[c]; ok {
		lower = f
	}
	if f, ok := fullUpper[c]; ok {
		upper = f
	}
	for _, form := range []string{lower, upper} {
		if strings.HasPrefix(s, form) && rulerFold(pattern[n:], s[len(form):]) {
			return true
		}
	}
	return false
}
