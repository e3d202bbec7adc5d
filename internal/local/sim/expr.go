package sim

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The expression subset gapless writes: condition and filter expressions built from
// comparisons (=, <>, <, <=, >, >=), BETWEEN, AND, OR, NOT, parentheses, attribute_exists,
// attribute_not_exists, begins_with and contains; update expressions with SET (operand, operand + operand,
// operand - operand, if_not_exists, list_append), ADD (numbers and sets) and REMOVE. Paths are
// top-level attribute names (#name or a bare name). Semantics follow the DynamoDB developer
// guide, "Comparison operator and function reference": a comparison with a missing operand or
// operands of different types is false; strings compare by UTF-8 bytes, numbers numerically.

type token struct {
	kind byte // 'i' identifier, '#' name, ':' value, 'p' punctuation
	s    string
}

var lexCache sync.Map // expression -> []token

func lex(s string) ([]token, error) {
	if v, ok := lexCache.Load(s); ok {
		return v.([]token), nil
	}
	toks, err := lexRaw(s)
	if err == nil {
		lexCache.Store(s, toks)
	}
	return toks, err
}

func lexRaw(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#' || c == ':' || unicode.IsLetter(c) || c == '_':
			j := i + 1
			for j < len(s) && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])) || s[j] == '_') {
				j++
			}
			k := byte('i')
			if c == '#' || c == ':' {
				k = byte(c)
			}
			out = append(out, token{k, s[i:j]})
			i = j
		case strings.HasPrefix(s[i:], "<=") || strings.HasPrefix(s[i:], ">=") || strings.HasPrefix(s[i:], "<>"):
			out = append(out, token{'p', s[i : i+2]})
			i += 2
		case strings.ContainsRune("()=<>,+-", c):
			out = append(out, token{'p', s[i : i+1]})
			i++
		default:
			return nil, fmt.Errorf("expression %q: unexpected %q", s, c)
		}
	}
	return out, nil
}

type exprCtx struct {
	names  map[string]string
	values map[string]types.AttributeValue
	item   map[string]types.AttributeValue
	toks   []token
	pos    int
}

func (e *exprCtx) peek() token {
	if e.pos < len(e.toks) {
		return e.toks[e.pos]
	}
	return token{}
}

func (e *exprCtx) next() token { t := e.peek(); e.pos++; return t }

func (e *exprCtx) keyword(w string) bool {
	t := e.peek()
	if t.kind == 'i' && strings.EqualFold(t.s, w) {
		e.pos++
		return true
	}
	return false
}

func (e *exprCtx) punct(p string) bool {
	t := e.peek()
	if t.kind == 'p' && t.s == p {
		e.pos++
		return true
	}
	return false
}

func (e *exprCtx) expect(p string) error {
	if !e.punct(p) {
		return fmt.Errorf("expected %q at token %d (%q)", p, e.pos, e.peek().s)
	}
	return nil
}

// attrName resolves a path token.
func (e *exprCtx) attrName(t token) (string, error) {
	switch t.kind {
	case '#':
		n, ok := e.names[t.s]
		if !ok {
			return "", fmt.Errorf("%w: undefined name %s", errValidation, t.s)
		}
		return n, nil
	case 'i':
		return t.s, nil
	}
	return "", fmt.Errorf("%w: %q is not a path", errValidation, t.s)
}

// operand evaluates a path, value or function call; nil when the path is absent.
func (e *exprCtx) operand() (types.AttributeValue, error) {
	t := e.next()
	switch t.kind {
	case ':':
		v, ok := e.values[t.s]
		if !ok {
			return nil, fmt.Errorf("%w: undefined value %s", errValidation, t.s)
		}
		return v, nil
	case '#':
		n, err := e.attrName(t)
		if err != nil {
			return nil, err
		}
		return e.item[n], nil
	case 'i':
		switch strings.ToLower(t.s) {
		case "if_not_exists":
			if err := e.expect("("); err != nil {
				return nil, err
			}
			n, err := e.attrName(e.next())
			if err != nil {
				return nil, err
			}
			if err := e.expect(","); err != nil {
				return nil, err
			}
			def, err := e.value()
			if err != nil {
				return nil, err
			}
			if err := e.expect(")"); err != nil {
				return nil, err
			}
			if v, ok := e.item[n]; ok {
				return v, nil
			}
			return def, nil
		case "list_append":
			if err := e.expect("("); err != nil {
				return nil, err
			}
			a, err := e.value()
			if err != nil {
				return nil, err
			}
			if err := e.expect(","); err != nil {
				return nil, err
			}
			b, err := e.value()
			if err != nil {
				return nil, err
			}
			if err := e.expect(")"); err != nil {
				return nil, err
			}
			la, ok1 := a.(*types.AttributeValueMemberL)
			lb, ok2 := b.(*types.AttributeValueMemberL)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: list_append of a non-list", errValidation)
			}
			return &types.AttributeValueMemberL{Value: slices.Concat(la.Value, lb.Value)}, nil
		}
		return e.item[t.s], nil
	}
	return nil, fmt.Errorf("%w: unexpected %q", errValidation, t.s)
}

// value is an update-expression value: operand [(+|-) operand].
func (e *exprCtx) value() (types.AttributeValue, error) {
	a, err := e.operand()
	if err != nil {
		return nil, err
	}
	for _, op := range []string{"+", "-"} {
		if e.punct(op) {
			b, err := e.operand()
			if err != nil {
				return nil, err
			}
			x, ok1 := num(a)
			y, ok2 := num(b)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: arithmetic on a non-number", errValidation)
			}
			if op == "+" {
				x.Add(x, y)
			} else {
				x.Sub(x, y)
			}
			return &types.AttributeValueMemberN{Value: x.RatString()}, nil
		}
	}
	return a, nil
}

func num(v types.AttributeValue) (*big.Rat, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(n.Value)
	return r, ok
}

// compare returns -1, 0, 1, or ok false when a and b are not comparable.
func compare(a, b types.AttributeValue) (int, bool) {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		if !ok {
			return 0, false
		}
		return strings.Compare(x.Value, y.Value), true
	case *types.AttributeValueMemberN:
		p, ok1 := num(a)
		q, ok2 := num(b)
		if !ok1 || !ok2 {
			return 0, false
		}
		return p.Cmp(q), true
	case *types.AttributeValueMemberB:
		y, ok := b.(*types.AttributeValueMemberB)
		if !ok {
			return 0, false
		}
		return bytes.Compare(x.Value, y.Value), true
	case *types.AttributeValueMemberBOOL:
		y, ok := b.(*types.AttributeValueMemberBOOL)
		if !ok || x.Value != y.Value {
			return 1, ok
		}
		return 0, true
	}
	return 0, false
}

func (e *exprCtx) cond() (bool, error) {
	v, err := e.and()
	if err != nil {
		return false, err
	}
	for e.keyword("OR") {
		w, err := e.and()
		if err != nil {
			return false, err
		}
		v = v || w
	}
	return v, nil
}

func (e *exprCtx) and() (bool, error) {
	v, err := e.not()
	if err != nil {
		return false, err
	}
	for e.keyword("AND") {
		w, err := e.not()
		if err != nil {
			return false, err
		}
		v = v && w
	}
	return v, nil
}

func (e *exprCtx) not() (bool, error) {
	if e.keyword("NOT") {
		v, err := e.not()
		return !v, err
	}
	return e.primary()
}

func (e *exprCtx) primary() (bool, error) {
	if e.punct("(") {
		v, err := e.cond()
		if err != nil {
			return false, err
		}
		return v, e.expect(")")
	}
	if t := e.peek(); t.kind == 'i' {
		switch strings.ToLower(t.s) {
		case "attribute_exists", "attribute_not_exists":
			e.pos++
			if err := e.expect("("); err != nil {
				return false, err
			}
			n, err := e.attrName(e.next())
			if err != nil {
				return false, err
			}
			_, has := e.item[n]
			if strings.EqualFold(t.s, "attribute_not_exists") {
				has = !has
			}
			return has, e.expect(")")
		case "contains":
			// contains(path, operand): a substring of a string, a member of a string set, or
			// an element of a list (DynamoDB Developer Guide, "Condition and filter
			// expressions", Functions: contains). An absent attribute contains nothing.
			e.pos++
			if err := e.expect("("); err != nil {
				return false, err
			}
			a, err := e.operand()
			if err != nil {
				return false, err
			}
			if err := e.expect(","); err != nil {
				return false, err
			}
			b, err := e.operand()
			if err != nil {
				return false, err
			}
			return contains(a, b), e.expect(")")
		case "begins_with":
			e.pos++
			if err := e.expect("("); err != nil {
				return false, err
			}
			a, err := e.operand()
			if err != nil {
				return false, err
			}
			if err := e.expect(","); err != nil {
				return false, err
			}
			b, err := e.operand()
			if err != nil {
				return false, err
			}
			x, ok1 := a.(*types.AttributeValueMemberS)
			y, ok2 := b.(*types.AttributeValueMemberS)
			return ok1 && ok2 && strings.HasPrefix(x.Value, y.Value), e.expect(")")
		}
	}
	a, err := e.operand()
	if err != nil {
		return false, err
	}
	if e.keyword("BETWEEN") {
		lo, err := e.operand()
		if err != nil {
			return false, err
		}
		if !e.keyword("AND") {
			return false, fmt.Errorf("%w: BETWEEN without AND", errValidation)
		}
		hi, err := e.operand()
		if err != nil {
			return false, err
		}
		if a == nil || lo == nil || hi == nil {
			return false, nil
		}
		c1, ok1 := compare(a, lo)
		c2, ok2 := compare(a, hi)
		return ok1 && ok2 && c1 >= 0 && c2 <= 0, nil
	}
	op := e.next()
	if op.kind != 'p' {
		return false, fmt.Errorf("%w: expected a comparator, got %q", errValidation, op.s)
	}
	b, err := e.operand()
	if err != nil {
		return false, err
	}
	if a == nil || b == nil {
		return op.s == "<>" && (a == nil) != (b == nil), nil
	}
	c, ok := compare(a, b)
	if !ok {
		return op.s == "<>", nil
	}
	switch op.s {
	case "=":
		return c == 0, nil
	case "<>":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, fmt.Errorf("%w: comparator %q", errValidation, op.s)
}

// evalCond evaluates a condition or filter expression on item ("" is true).
func evalCond(expr string, names map[string]string, values map[string]types.AttributeValue, item map[string]types.AttributeValue) (bool, error) {
	if expr == "" {
		return true, nil
	}
	toks, err := lex(expr)
	if err != nil {
		return false, fmt.Errorf("%w: %v", errValidation, err)
	}
	e := &exprCtx{names: names, values: values, item: item, toks: toks}
	v, err := e.cond()
	if err != nil {
		return false, err
	}
	if e.pos != len(toks) {
		return false, fmt.Errorf("%w: trailing tokens in %q", errValidation, expr)
	}
	return v, nil
}

// applyUpdate returns item with the update expression applied (item is not modified). Every
// operand reads the item as it was before the update, as DynamoDB evaluates them.
func applyUpdate(expr string, names map[string]string, values map[string]types.AttributeValue, item map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errValidation, err)
	}
	out := clone(item)
	e := &exprCtx{names: names, values: values, item: item, toks: toks}
	clause := ""
	for e.pos < len(toks) {
		if t := e.peek(); t.kind == 'i' {
			switch strings.ToUpper(t.s) {
			case "SET", "ADD", "REMOVE", "DELETE":
				clause = strings.ToUpper(t.s)
				e.pos++
				continue
			}
		}
		if e.punct(",") {
			continue
		}
		n, err := e.attrName(e.next())
		if err != nil {
			return nil, err
		}
		switch clause {
		case "SET":
			if err := e.expect("="); err != nil {
				return nil, err
			}
			v, err := e.value()
			if err != nil {
				return nil, err
			}
			if v == nil {
				return nil, fmt.Errorf("%w: SET %s to an absent attribute", errValidation, n)
			}
			out[n] = v
		case "REMOVE":
			delete(out, n)
		case "ADD":
			v, err := e.operand()
			if err != nil {
				return nil, err
			}
			switch x := v.(type) {
			case *types.AttributeValueMemberN:
				sum, _ := num(x)
				if old, ok := item[n]; ok {
					o, ok := num(old)
					if !ok {
						return nil, fmt.Errorf("%w: ADD a number to a non-number %s", errValidation, n)
					}
					sum.Add(sum, o)
				}
				out[n] = &types.AttributeValueMemberN{Value: sum.RatString()}
			case *types.AttributeValueMemberSS:
				set := []string{}
				if old, ok := item[n].(*types.AttributeValueMemberSS); ok {
					set = append(set, old.Value...)
				} else if item[n] != nil {
					return nil, fmt.Errorf("%w: ADD a string set to a non-set %s", errValidation, n)
				}
				for _, s := range x.Value {
					if !slices.Contains(set, s) {
						set = append(set, s)
					}
				}
				out[n] = &types.AttributeValueMemberSS{Value: set}
			default:
				return nil, fmt.Errorf("%w: ADD of %T", errValidation, v)
			}
		default:
			return nil, fmt.Errorf("%w: unsupported clause %q in %q", errValidation, clause, expr)
		}
	}
	return out, nil
}

// project keeps the attributes a projection expression names ("" keeps all).
func project(expr string, names map[string]string, item map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	if expr == "" || item == nil {
		return item, nil
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	e := &exprCtx{names: names}
	out := map[string]types.AttributeValue{}
	for _, t := range toks {
		if t.kind == 'p' {
			continue
		}
		n, err := e.attrName(t)
		if err != nil {
			return nil, err
		}
		if v, ok := item[n]; ok {
			out[n] = v
		}
	}
	return out, nil
}

func clone(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = v
	}
	return out
}

// contains is DynamoDB's contains(a, b) for the types gapless stores: a string holding b, a string
// set with the member b, a list with an element equal to b.
func contains(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && strings.Contains(x.Value, y.Value)
	case *types.AttributeValueMemberSS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && slices.Contains(x.Value, y.Value)
	case *types.AttributeValueMemberL:
		for _, v := range x.Value {
			if c, ok := compare(v, b); ok && c == 0 {
				return true
			}
		}
	}
	return false
}
