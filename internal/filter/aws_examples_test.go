package filter

import "testing"

// The pages the rows below come from. Lambda's own pages come first; Lambda says "For filter
// rules, Lambda supports the same set of syntax and rules as Amazon EventBridge" (srcSyntax), so
// the EventBridge pages and the README of aws/event-ruler (the open-source matcher behind
// EventBridge patterns) follow. Kinesis filters only on "data", so every example pattern is put
// under "data" and its event (or the event's data part) is the record's payload.
const (
	srcSyntax     = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-syntax"
	srcExamples   = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-examples"
	srcDuplicate  = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-duplicate-keys"
	srcMultiLevel = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#multi-level-filtering"
	srcConsole    = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-console"
	srcStreams    = "https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-streams"
	srcKinesis    = "https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis-filtering.html#filtering-kinesis"
	srcEBPatterns = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns.html#eb-filtering-value-example"
	srcEBNull     = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-null-values.html"
	srcEBArrays   = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-arrays.html"
	srcEBContent  = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-event-patterns-content-based-filtering.html"
	srcRuler      = "https://github.com/aws/event-ruler/blob/main/README.md"
)

// The EventBridge and event-ruler sample event's detail (README "Ruler by Example").
const rulerDetail = `{"c-count": 5, "d-count": 3, "x-limit": 301.8, "source-ip": "10.0.0.33",
	"instance-id": "i-000000aaaaaa00000", "state": "running", "time": "2017-10-02T16:24:49Z"}`

// The Macie alert of "Value matching", trimmed to the fields the pattern names and one more.
const macieDetail = `{"notification-type": "ALERT_CREATED", "tags": ["Custom_Alert", "Insider"],
	"risk-score": 80, "trigger": {"alert-type": "basic", "risk": 8}}`

// The event-ruler README's "JSON Array Matching" events.
const (
	employees      = `{"employees": [{"firstName": "John", "lastName": "Doe"}, {"firstName": "Anna", "lastName": "Smith"}, {"firstName": "Peter", "lastName": "Jones"}]}`
	employeesNeste = `{"employees": [[{"firstName": "John", "lastName": "Doe"}, {"firstName": "Anna", "lastName": "Smith"}], [{"firstName": "Peter", "lastName": "Jones"}]]}`
)

// TestAWSExamples runs every worked example of the pages above: the pattern, a record, and
// whether Lambda sends the record to the function (the page says so, or the example's rule
// plainly implies it). Rows marked "chosen" are where AWS is silent or ambiguous: there the
// evaluator keeps the record whenever Lambda might deliver it (see the package comment, "Where
// AWS is silent"): a record kept here that Lambda dropped is replayed by the reconciler (a
// filtered record processed, late); a record dropped here that Lambda delivered would be
// acknowledged unprocessed by the consumer and counted filtered by the reconciler: lost.
func TestAWSExamples(t *testing.T) {
	tests := []struct {
		src, name, pattern, data string
		want                     bool
	}{
		// Lambda, "Filter rule syntax": one row per comparison operator of the table.
		{srcSyntax, "null", `{"data": {"UserID": [null]}}`, `{"UserID": null}`, true},
		{srcSyntax, "null is not empty", `{"data": {"UserID": [null]}}`, `{"UserID": ""}`, false},
		{srcSyntax, "null is not missing", `{"data": {"UserID": [null]}}`, `{}`, false},
		{srcSyntax, "empty", `{"data": {"LastName": [""]}}`, `{"LastName": ""}`, true},
		{srcSyntax, "equals", `{"data": {"Name": ["Alice"]}}`, `{"Name": "Alice"}`, true},
		{srcSyntax, "equals: no case folding (note)", `{"data": {"Name": ["Alice"]}}`, `{"Name": "alice"}`, false},
		{srcSyntax, "equals: no normalization (note)", `{"data": {"Name": ["Alice"]}}`, `{"Name": "Alice "}`, false},
		{srcSyntax, "equals (ignore case)", `{"data": {"Name": [{"equals-ignore-case": "alice"}]}}`, `{"Name": "Alice"}`, true},
		{srcSyntax, "and", `{"data": {"Location": ["New York"], "Day": ["Monday"]}}`, `{"Location": "New York", "Day": "Monday"}`, true},
		{srcSyntax, "and: one field differs", `{"data": {"Location": ["New York"], "Day": ["Monday"]}}`, `{"Location": "New York", "Day": "Tuesday"}`, false},
		{srcSyntax, "and: one field missing", `{"data": {"Location": ["New York"], "Day": ["Monday"]}}`, `{"Location": "New York"}`, false},
		{srcSyntax, "or: credit", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Credit"}`, true},
		{srcSyntax, "or: debit", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Debit"}`, true},
		{srcSyntax, "or: neither", `{"data": {"PaymentType": ["Credit", "Debit"]}}`, `{"PaymentType": "Cash"}`, false},
		{srcSyntax, "not", `{"data": {"Weather": [{"anything-but": ["Raining"]}]}}`, `{"Weather": "Sunny"}`, true},
		{srcSyntax, "not: the excluded value", `{"data": {"Weather": [{"anything-but": ["Raining"]}]}}`, `{"Weather": "Raining"}`, false},
		{srcSyntax, "numeric (equals)", `{"data": {"Price": [{"numeric": ["=", 100]}]}}`, `{"Price": 100}`, true},
		{srcSyntax, "numeric (equals): other value", `{"data": {"Price": [{"numeric": ["=", 100]}]}}`, `{"Price": 101}`, false},
		{srcSyntax, "numeric (range): inside", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 15}`, true},
		{srcSyntax, "numeric (range): upper bound", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 20}`, true},
		{srcSyntax, "numeric (range): lower bound", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 10}`, false},
		{srcSyntax, "numeric (range): above", `{"data": {"Price": [{"numeric": [">", 10, "<=", 20]}]}}`, `{"Price": 21}`, false},
		{srcSyntax, "exists", `{"data": {"ProductName": [{"exists": true}]}}`, `{"ProductName": "Widget"}`, true},
		{srcSyntax, "exists: missing", `{"data": {"ProductName": [{"exists": true}]}}`, `{"Price": 1}`, false},
		{srcSyntax, "does not exist", `{"data": {"ProductName": [{"exists": false}]}}`, `{"Price": 1}`, true},
		{srcSyntax, "does not exist: present", `{"data": {"ProductName": [{"exists": false}]}}`, `{"ProductName": "Widget"}`, false},
		{srcSyntax, "begins with", `{"data": {"Region": [{"prefix": "us-"}]}}`, `{"Region": "us-east-1"}`, true},
		{srcSyntax, "begins with: other region", `{"data": {"Region": [{"prefix": "us-"}]}}`, `{"Region": "eu-west-1"}`, false},
		{srcSyntax, "ends with", `{"data": {"FileName": [{"suffix": ".png"}]}}`, `{"FileName": "image.png"}`, true},
		{srcSyntax, "ends with: other extension", `{"data": {"FileName": [{"suffix": ".png"}]}}`, `{"FileName": "image.jpg"}`, false},

		// Lambda, "Filtering examples" (the Location example without its partitionKey: Kinesis
		// filters only on data) and the Kinesis record of "Event filtering basics".
		{srcExamples, "location", `{"data": {"Location": ["Los Angeles"]}}`, `{"Location": "Los Angeles", "Day": "Monday"}`, true},
		{srcExamples, "location: other city", `{"data": {"Location": ["Los Angeles"]}}`, `{"City": "Seattle", "Location": "Seattle"}`, false},
		{srcExamples, "temperature in (50, 60]", `{"data": {"Temperature": [{"numeric": [">", 50, "<=", 60]}]}}`, `{"Temperature": 55}`, true},
		{srcExamples, "temperature 50", `{"data": {"Temperature": [{"numeric": [">", 50, "<=", 60]}]}}`, `{"Temperature": 50}`, false},
		{srcExamples, "temperature as a string is not a number", `{"data": {"Temperature": [{"numeric": [">", 50, "<=", 60]}]}}`, `{"City": "Seattle", "State": "WA", "Temperature": "55", "Month": "December"}`, false},
		{srcDuplicate, "duplicate key: the last value counts", `{"data": {"duplicateKey": ["hello"], "uniqueKey": ["test123"], "duplicateKey": ["world"]}}`, `{"duplicateKey": "world", "uniqueKey": "test123"}`, true},
		{srcDuplicate, "duplicate key: the first value is ignored", `{"data": {"duplicateKey": ["hello"], "uniqueKey": ["test123"], "duplicateKey": ["world"]}}`, `{"duplicateKey": "hello", "uniqueKey": "test123"}`, false},
		{srcMultiLevel, "multi-level", `{"data": {"Keys": {"Id": {"N": ["101"]}}}}`, `{"Keys": {"Id": {"N": "101"}}, "NewImage": {"Message": {"S": "New item!"}}}`, true},
		{srcMultiLevel, "multi-level: other id", `{"data": {"Keys": {"Id": {"N": ["101"]}}}}`, `{"Keys": {"Id": {"N": "102"}}}`, false},
		{srcConsole, "a is 1 or 2: 1", `{"data": {"a": [1, 2]}}`, `{"a": 1}`, true},
		{srcConsole, "a is 1 or 2: 2", `{"data": {"a": [1, 2]}}`, `{"a": 2}`, true},
		{srcConsole, "a is 1 or 2: 3", `{"data": {"a": [1, 2]}}`, `{"a": 3}`, false},
		{srcConsole, "a is 1 or 2: the string", `{"data": {"a": [1, 2]}}`, `{"a": "1"}`, false},
		{srcStreams, "data not JSON, pattern JSON: dropped", `{"data": {"a": [1, 2]}}`, `a=1`, false},
		{srcKinesis, "order type buy", `{"data": {"order": {"type": ["buy"]}}}`, `{"record": 12345, "order": {"type": "buy", "stock": "ANYCO", "quantity": 1000}}`, true},
		{srcKinesis, "order type sell", `{"data": {"order": {"type": ["buy"]}}}`, `{"record": 12345, "order": {"type": "sell", "stock": "ANYCO", "quantity": 1000}}`, false},

		// EventBridge "Amazon EventBridge event patterns", "Matching null values and empty
		// strings", "Arrays".
		{srcEBPatterns, "value matching: nested numbers", `{"data": {"risk-score": [80], "trigger": {"risk": [8]}}}`, macieDetail, true},
		{srcEBPatterns, "value matching: a string is not the number", `{"data": {"risk-score": ["80"]}}`, macieDetail, false},
		{srcEBNull, "empty string", `{"data": {"eventVersion": [""]}}`, `{"eventVersion": "", "responseElements": null}`, true},
		{srcEBNull, "null", `{"data": {"responseElements": [null]}}`, `{"eventVersion": "", "responseElements": null}`, true},
		{srcEBNull, "empty does not match null", `{"data": {"responseElements": [""]}}`, `{"eventVersion": "", "responseElements": null}`, false},
		{srcEBNull, "null does not match empty", `{"data": {"eventVersion": [null]}}`, `{"eventVersion": "", "responseElements": null}`, false},
		{srcEBArrays, "event array intersects the pattern's", `{"data": {"resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f", "arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f"]}}`,
			`{"resources": ["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:eb56d16b", "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f"]}`, true},
		{srcEBArrays, "event array disjoint", `{"data": {"resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f"]}}`, `{"resources": ["arn:x", "arn:y"]}`, false},

		// EventBridge "Content filtering in Amazon EventBridge event patterns".
		{srcEBContent, "prefix", `{"data": {"time": [{"prefix": "2017-10-02"}]}}`, rulerDetail, true},
		{srcEBContent, "prefix on a number", `{"data": {"c-count": [{"prefix": "5"}]}}`, rulerDetail, false},
		{srcEBContent, "anything-but string", `{"data": {"state": [{"anything-but": "initializing"}]}}`, rulerDetail, true},
		{srcEBContent, "anything-but string: excluded", `{"data": {"state": [{"anything-but": "initializing"}]}}`, `{"state": "initializing"}`, false},
		{srcEBContent, "anything-but number", `{"data": {"x-limit": [{"anything-but": 123}]}}`, rulerDetail, true},
		{srcEBContent, "anything-but number: excluded", `{"data": {"x-limit": [{"anything-but": 123}]}}`, `{"x-limit": 123}`, false},
		{srcEBContent, "anything-but strings", `{"data": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}`, rulerDetail, true},
		{srcEBContent, "anything-but strings: excluded", `{"data": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}`, `{"state": "overloaded"}`, false},
		{srcEBContent, "anything-but numbers", `{"data": {"x-limit": [{"anything-but": [100, 200, 300]}]}}`, rulerDetail, true},
		{srcEBContent, "anything-but numbers: excluded", `{"data": {"x-limit": [{"anything-but": [100, 200, 300]}]}}`, `{"x-limit": 200}`, false},
		{srcEBContent, "anything-but prefix", `{"data": {"state": [{"anything-but": {"prefix": "init"}}]}}`, rulerDetail, true},
		{srcEBContent, "anything-but prefix: excluded", `{"data": {"state": [{"anything-but": {"prefix": "init"}}]}}`, `{"state": "initializing"}`, false},
		{srcEBContent, "numeric: all fields", `{"data": {"c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}], "x-limit": [{"numeric": ["=", 3.018e2]}]}}`, rulerDetail, true},
		{srcEBContent, "numeric: one field out", `{"data": {"c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 3]}]}}`, rulerDetail, false},
		{srcEBContent, "exists false: field absent", `{"data": {"detail": {"c-count": [{"exists": false}]}}}`, `{"detail": {"state": ["initializing", "running"]}}`, true},
		{srcEBContent, "exists false: field is not a leaf", `{"data": {"detail": {"c-count": [{"exists": false}]}}}`, `{"detail": {"state": ["initializing", "running"], "c-count": {"c1": 100}}}`, true},
		{srcEBContent, "exists false: leaf present", `{"data": {"detail": {"c-count": [{"exists": false}]}}}`, `{"detail": {"c-count": 100}}`, false},
		{srcEBContent, "complex example", `{"data": {"time": [{"prefix": "2017-10-02"}], "state": [{"anything-but": "initializing"}], "c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}], "x-limit": [{"anything-but": [100, 200, 300]}]}}`, rulerDetail, true},
		{srcEBContent, "complex example: one field fails", `{"data": {"time": [{"prefix": "2017-10-02"}], "state": [{"anything-but": "running"}], "c-count": [{"numeric": [">", 0, "<=", 5]}]}}`, rulerDetail, false},

		// event-ruler README: "JSON Array Matching" (arrays of objects are crushed: the objects
		// count as the value of the parent field) and "Exists matching".
		{srcRuler, "array of objects", `{"data": {"employees": {"firstName": ["Anna"]}}}`, employees, true},
		{srcRuler, "array of objects: no such element", `{"data": {"employees": {"firstName": ["Zoe"]}}}`, employees, false},
		{srcRuler, "array of arrays of objects", `{"data": {"employees": {"firstName": ["Anna"]}}}`, employeesNeste, true},
		{srcRuler, "array of objects: both fields in one element", `{"data": {"employees": {"firstName": ["Anna"], "lastName": ["Smith"]}}}`, employees, true},
		{srcRuler, "exists false on a non-leaf (README)", `{"data": {"detail": {"c-count": [{"exists": false}]}}}`, `{"detail": {"c-count": {"c1": 100}}}`, true},

		// Chosen where AWS is silent or ambiguous: keep (the record is replayed, never lost).
		// Numbers: Lambda's note says 300, 300.0 and 3.0e2 are "not considered equal", while
		// event-ruler matches a bare number in a pattern both as text and numerically.
		{srcSyntax, "chosen: 300 equals 300.0", `{"data": {"n": [300]}}`, `{"n": 300.0}`, true},
		{srcSyntax, "chosen: 300 equals 3.0e2", `{"data": {"n": [300]}}`, `{"n": 3.0e2}`, true},
		{srcSyntax, "chosen: anything-but 300 keeps 300.0", `{"data": {"n": [{"anything-but": [300]}]}}`, `{"n": 300.0}`, true},
		{srcSyntax, "anything-but 300 drops 300", `{"data": {"n": [{"anything-but": [300]}]}}`, `{"n": 300}`, false},
		// Array consistency: event-ruler's rulesForJSONEvent refuses fields of different elements
		// of one array, its older rulesForEvent matches them; Lambda does not say which it runs.
		{srcRuler, "chosen: fields from different array elements", `{"data": {"employees": {"firstName": ["Anna"], "lastName": ["Jones"]}}}`, employees, true},
		// Dots in keys: event-ruler joins keys with "." ("should not be relied upon").
		{srcRuler, "chosen: a dotted key matches the nested path", `{"data": {"detail": {"state.status": ["running"]}}}`, `{"detail": {"state": {"status": "running"}}}`, true},
		{srcRuler, "chosen: a nested key matches the dotted path", `{"data": {"detail": {"state": {"status": ["running"]}}}}`, `{"detail": {"state.status": "running"}}`, true},
		// Exists true on a field that is not a leaf (an object, an empty array): "does not work on
		// intermediate nodes" says nothing of what Lambda then does.
		{srcEBContent, "chosen: exists true on an object", `{"data": {"c-count": [{"exists": true}]}}`, `{"c-count": {"c1": 100}}`, true},
		{srcEBContent, "chosen: exists true on an empty array", `{"data": {"tags": [{"exists": true}]}}`, `{"tags": []}`, true},
		{srcEBContent, "chosen: exists false on an empty array", `{"data": {"tags": [{"exists": false}]}}`, `{"tags": []}`, true},
		// A key twice in the record: a streaming matcher (event-ruler reads events with a
		// streaming parser) sees both values.
		{srcDuplicate, "chosen: a record key given twice, first value", `{"data": {"a": [1]}}`, `{"a": 1, "a": 2}`, true},
		{srcDuplicate, "chosen: a record key given twice, last value", `{"data": {"a": [2]}}`, `{"a": 1, "a": 2}`, true},
		// An IP address literal in a pattern is compiled to the address (event-ruler's
		// JsonRuleCompiler.writeRules, CIDR.ipToRangeIfPossible): other spellings match.
		{srcRuler, "chosen: an IPv6 address spelled another way", `{"data": {"ip": ["2001:db8::1"]}}`, `{"ip": "2001:0db8:0:0:0:0:0:1"}`, true},
		{srcRuler, "another IP address", `{"data": {"ip": ["10.0.0.1"]}}`, `{"ip": "10.0.0.2"}`, false},
		// equals-ignore-case: event-ruler matches each pattern character's Java lower- or
		// upper-case form (EqualsIgnoreCaseParser), and Java upper-cases "ß" to "SS".
		{srcRuler, "chosen: ignore case, ß and SS", `{"data": {"street": [{"equals-ignore-case": "straße"}]}}`, `{"street": "STRASSE"}`, true},
		{srcRuler, "chosen: ignore case, mixed forms", `{"data": {"street": [{"equals-ignore-case": "straße"}]}}`, `{"street": "StraSSe"}`, true},
		{srcSyntax, "ignore case: other street", `{"data": {"street": [{"equals-ignore-case": "straße"}]}}`, `{"street": "STRASE"}`, false},
		// Numeric precision: EventBridge documented six digits right of the decimal point, and
		// event-ruler compared numbers truncated to micro-units before 2024 (ComparableNumber).
		{srcEBContent, "chosen: <= 1 keeps 1.0000001 (six decimals)", `{"data": {"n": [{"numeric": ["<=", 1]}]}}`, `{"n": 1.0000001}`, true},
		{srcEBContent, "chosen: = 0.5 keeps 0.5000004 (six decimals)", `{"data": {"n": [{"numeric": ["=", 0.5]}]}}`, `{"n": 0.5000004}`, true},
		{srcEBContent, "= 0.5 drops 0.500001", `{"data": {"n": [{"numeric": ["=", 0.5]}]}}`, `{"n": 0.500001}`, false},
		{srcEBContent, "chosen: > 1 keeps 1.0000001 (float64)", `{"data": {"n": [{"numeric": [">", 1]}]}}`, `{"n": 1.0000001}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.pattern)
			if err != nil {
				t.Fatalf("Parse(%s): %v (%s)", tt.pattern, err, tt.src)
			}
			if got := f.Keep([]byte(tt.data)); got != tt.want {
				t.Errorf("Keep(%s) with %s = %v, want %v (%s)", tt.data, tt.pattern, got, tt.want, tt.src)
			}
		})
	}
}
