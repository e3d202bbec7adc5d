package filter

import (
	"errors"
	"testing"
)

// The cases come from the AWS pages the package follows: the Kinesis record and pattern of
// "Using event filtering with a Kinesis event source" and the rows of the "Filter rule syntax"
// table of "Control which events Lambda sends to your function", each put under "data".
func TestKeep(t *testing.T) {
	const order = `{"record": 12345, "order": {"type": "buy", "stock": "ANYCO", "quantity": 1000}}`
	tests := []struct {
		name    string
		pattern string
		data    string
		want    bool
	}{
		// Kinesis page: only records whose order type is "buy".
		{"kinesis example buy", `{"data": {"order": {"type": ["buy"]}}}`, order, true},
		{"kinesis example sell", `{"data": {"order": {"type": ["buy"]}}}`, `{"record": 1, "order": {"type": "sell"}}`, false},
		{"kinesis example missing key", `{"data": {"order": {"type": ["buy"]}}}`, `{"record": 1}`, false},
		{"kinesis example not json", `{"data": {"order": {"type": ["buy"]}}}`, `buy`, false},
		{"kinesis example json not an object", `{"data": {"order": {"type": ["buy"]}}}`, `["buy"]`, false},
		{"trailing garbage is not json", `{"data": {"order": {"type": ["buy"]}}}`, order + ` x`, false},
		// Filter rule syntax table.
		{"null", `{"data": {"UserID": [null]}}`, `{"UserID": null}`, true},
		{"null not missing", `{"data": {"UserID": [null]}}`, `{}`, false},
		{"null not empty", `{"data": {"UserID": [null]}}`, `{"UserID": ""}`, false},
		{"empty", `{"data": {"LastName": [""]}}`, `{"LastName": ""}`, true},
		{"empty not null", `{"data": {"LastName": [""]}}`, `{"LastName": null}`, false},
		{"equals", `{"data": {"Name": ["Alice"]}}`, `{"Name": "Alice"}`, true},
		{"equals is case sensitive", `{"data": {"Name": ["Alice"]}}`, `{"Name": "alice"}`, false},
		{"equals ignore case", `{"data": {"Name": [{"equals-ignore-case": "alice"}]}}`, `{"Name": "ALICE"}`, true},
		{"and both", `{"data": {"Location": ["New York"], "Day": ["Monday"]}}`, `{"Location": "New York", "Day": "Monday"}`, true},
		{"and one", `{"data": {"Location": ["New York"], "Day": ["Monday"]}}`, `{"Location": "New York", "Day": "Sunday"}`, false},
		{"or first", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Credit"}`, true},
		{"or second", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Debit"}`, true},
		{"or neither", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Cash"}`, false},
		{"not", `{"data": {"Weather": [{"anything-but": ["Raining"]}]}}`, `{"Weather": "Sunny"}`, true},
		{"not excluded", `{"data": {"Weather": [{"anything-but": ["Raining"]}]}}`, `{"Weather": "Raining"}`, false},
		{"not needs the key", `{"data": {"Weather": [{"anything-but": ["Raining"]}]}}`, `{}`, false},
		{"not scalar", `{"data": {"Weather": [{"anything-but": "Raining"}]}}`, `{"Weather": "Raining"}`, false},
		{"not number", `{"data": {"n": [{"anything-but": [0, 1]}]}}`, `{"n": 2}`, true},
		{"not number excluded", `{"data": {"n": [{"anything-but": [0, 1]}]}}`, `{"n": 1}`, false},
		// 1.0 is not 1 by text (Lambda's note: numbers compare by their string form): kept, the
		// choice that cannot lose a record (match.go).
		{"not number other text kept", `{"data": {"n": [{"anything-but": [0, 1]}]}}`, `{"n": 1.0}`, true},
		{"not prefix", `{"data": {"Region": [{"anything-but": {"prefix": "us-"}}]}}`, `{"Region": "eu-west-1"}`, true},
		{"not prefix excluded", `{"data": {"Region": [{"anything-but": {"prefix": "us-"}}]}}`, `{"Region": "us-east-1"}`, false},
		{"numeric equals", `{"data": {"Price": [{"numeric": ["=", 100]}]}}`, `{"Price": 100}`, true},
		{"numeric equals float", `{"data": {"Price": [{"numeric": ["=", 100]}]}}`, `{"Price": 100.0}`, true},
		{"numeric not a string", `{"data": {"Price": [{"numeric": ["=", 100]}]}}`, `{"Price": "100"}`, false},
		{"numeric range in", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 20}`, true},
		{"numeric range low edge", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 10}`, false},
		{"numeric range above", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 20.5}`, false},
		{"numeric ge lt", `{"data": {"n": [{"numeric": [">=", 0, "<", 5]}]}}`, `{"n": 0}`, true},
		{"exists", `{"data": {"ProductName": [{"exists": true}]}}`, `{"ProductName": "x"}`, true},
		{"exists null value", `{"data": {"ProductName": [{"exists": true}]}}`, `{"ProductName": null}`, true},
		{"exists missing", `{"data": {"ProductName": [{"exists": true}]}}`, `{}`, false},
		{"does not exist", `{"data": {"ProductName": [{"exists": false}]}}`, `{}`, true},
		{"does not exist present", `{"data": {"ProductName": [{"exists": false}]}}`, `{"ProductName": "x"}`, false},
		{"does not exist parent missing", `{"data": {"a": {"b": [{"exists": false}]}}}`, `{}`, true},
		{"begins with", `{"data": {"Region": [{"prefix": "us-"}]}}`, `{"Region": "us-east-1"}`, true},
		{"begins with no", `{"data": {"Region": [{"prefix": "us-"}]}}`, `{"Region": "eu-west-1"}`, false},
		{"ends with", `{"data": {"FileName": [{"suffix": ".png"}]}}`, `{"FileName": "a.png"}`, true},
		{"ends with no", `{"data": {"FileName": [{"suffix": ".png"}]}}`, `{"FileName": "a.jpg"}`, false},
		{"bool", `{"data": {"ok": [true]}}`, `{"ok": true}`, true},
		{"bool not string", `{"data": {"ok": [true]}}`, `{"ok": "true"}`, false},
		{"array value any element", `{"data": {"tags": ["red"]}}`, `{"tags": ["blue", "red"]}`, true},
		{"array value no element", `{"data": {"tags": ["red"]}}`, `{"tags": ["blue"]}`, false},
		{"leaf on data itself", `{"data": ["ping"]}`, `"ping"`, true},
		{"mixed rules ored", `{"data": {"n": [{"numeric": ["<", 0]}, {"prefix": "x"}]}}`, `{"n": "xy"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.pattern)
			if err != nil {
				t.Fatalf("Parse(%s): %v", tt.pattern, err)
			}
			if got := f.Keep([]byte(tt.data)); got != tt.want {
				t.Fatalf("Keep(%s) with %s = %v, want %v", tt.data, tt.pattern, got, tt.want)
			}
		})
	}
}

// Several patterns (FilterCriteria.Filters) are ORed: "If a record from your event source
// satisfies one or more of your filters, Lambda includes the record".
func TestKeepAnyPattern(t *testing.T) {
	f := MustParse(`{"data": {"kind": ["a"]}}`, ``, `{"data": {"kind": ["b"]}}`)
	if got := f.Patterns(); len(got) != 2 {
		t.Fatalf("Patterns() = %q, want the two non-blank patterns", got)
	}
	for data, want := range map[string]bool{`{"kind":"a"}`: true, `{"kind":"b"}`: true, `{"kind":"c"}`: false} {
		if got := f.Keep([]byte(data)); got != want {
			t.Errorf("Keep(%s) = %v, want %v", data, got, want)
		}
	}
}

func TestNoPatternKeepsEverything(t *testing.T) {
	for _, f := range []*Filter{nil, MustParse(), MustParse("  ")} {
		if f.Active() {
			t.Errorf("%v: Active() = true, want false", f)
		}
		if !f.Keep([]byte("not json")) {
			t.Errorf("%v: Keep(not json) = false, want true", f)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, p := range []string{
		`not json`,
		`["data"]`,
		`{}`,
		`{"data": {"a": ["x"]}} {}`,
		`{"partitionKey": ["1"]}`,
		`{"data": {"a": "x"}}`,
		`{"data": {"a": []}}`,
		`{"data": {"a": {}}}`,
		`{"data": {"$or": [{"a": ["x"]}]}}`,
		`{"data": {"a": [{"wildcard": "*x"}]}}`,
		`{"data": {"a": [{"prefix": 1}]}}`,
		`{"data": {"a": [{"exists": "yes"}]}}`,
		`{"data": {"a": [{"numeric": [">", "1"]}]}}`,
		`{"data": {"a": [{"numeric": ["!=", 1]}]}}`,
		`{"data": {"a": [{"numeric": [">", 1, "<"]}]}}`,
		`{"data": {"a": [{"anything-but": {"suffix": "x"}}]}}`,
		`{"data": {"a": [{"anything-but": []}]}}`,
		`{"data": {"a": [{"prefix": "x", "suffix": "y"}]}}`,
		`{"data": {"a": [["nested"]]}}`,
		`{"data": {"a.b": ["x"], "a": {"b": ["y"]}}}`,
	} {
		if _, err := Parse(p); !errors.Is(err, ErrPattern) {
			t.Errorf("Parse(%s) error = %v, want ErrPattern", p, err)
		}
	}
}

func FuzzKeep(f *testing.F) {
	flt := MustParse(`{"data": {"order": {"type": ["buy", {"prefix": "b"}], "n": [{"numeric": [">", 1]}], "x": [{"exists": false}]}}}`)
	f.Add([]byte(`{"order": {"type": "buy", "n": 2}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = flt.Keep(data) // never panics
	})
}
