package esm

import (
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"pgregory.net/rapid"
)

func validConfig() Config {
	c := DefaultConfig()
	c.StreamName, c.FunctionName = "s", "f"
	return c
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no stream", func(c *Config) { c.StreamName = "" }, false},
		{"no function", func(c *Config) { c.FunctionName = "" }, false},
		{"bad position", func(c *Config) { c.StartingPosition = "EARLIEST" }, false},
		{"AT_TIMESTAMP without time", func(c *Config) { c.StartingPosition = AtTimestamp }, false},
		{"AT_TIMESTAMP with time", func(c *Config) { c.StartingPosition, c.StartingTimestamp = AtTimestamp, time.Now() }, true},
		{"batch 10000", func(c *Config) { c.BatchSize = 10000 }, true},
		{"batch 10001", func(c *Config) { c.BatchSize = 10001 }, false},
		{"window 300s", func(c *Config) { c.BatchingWindow = 300 * time.Second }, true},
		{"window 301s", func(c *Config) { c.BatchingWindow = 301 * time.Second }, false},
		{"factor 10", func(c *Config) { c.ParallelizationFactor = 10 }, true},
		{"factor 11", func(c *Config) { c.ParallelizationFactor = 11 }, false},
		{"retries -1", func(c *Config) { c.MaximumRetryAttempts = -1 }, true},
		{"retries -2", func(c *Config) { c.MaximumRetryAttempts = -2 }, false},
		{"retries 10001", func(c *Config) { c.MaximumRetryAttempts = 10001 }, false},
		{"age a week", func(c *Config) { c.MaximumRecordAge = MaxRecordAge }, true},
		{"age above a week", func(c *Config) { c.MaximumRecordAge = MaxRecordAge + time.Second }, false},
		{"payload above 6 MB", func(c *Config) { c.MaxPayloadBytes = MaxPayloadBytes + 1 }, false},
		{"poll faster than 5/s", func(c *Config) { c.PollInterval = 100 * time.Millisecond }, false},
		{"timeout negative", func(c *Config) { c.FunctionTimeout = -time.Second }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mod(&c)
			err := c.withDefaults().Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want ErrConfig", err)
			}
		})
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	m, err := New(fakeKinesis{}, nil, func(string, int) (Invoker, error) { return nil, nil },
		Config{StreamName: "s", FunctionName: "f", StartingPosition: TrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Config()
	if got.BatchSize != 100 || got.ParallelizationFactor != 1 || got.FunctionTimeout != 3*time.Second ||
		got.MaxPayloadBytes != MaxPayloadBytes || got.PollInterval != time.Second || got.MaximumRetryAttempts != 0 {
		t.Fatalf("defaults not applied: %+v", got)
	}
	if _, err := New(fakeKinesis{}, nil, func(string, int) (Invoker, error) { return nil, nil },
		Config{StreamName: "s", FunctionName: "f", StartingPosition: TrimHorizon, OnFailureQueueURL: "http://q"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("OnFailureQueueURL without SQS client: %v", err)
	}
	if _, err := New(nil, nil, nil, validConfig()); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil clients: %v", err)
	}
}

// fakeKinesis satisfies kinesisAPI for constructor tests; it is never called.
type fakeKinesis struct{ kinesisAPI }

func TestConfigFromTemplate(t *testing.T) {
	t.Parallel()
	t.Run("full", func(t *testing.T) {
		cfg, err := ConfigFromTemplate("testdata/template.yaml")
		if err != nil {
			t.Fatal(err)
		}
		want := DefaultConfig()
		want.FunctionName = "ConsumerFunction"
		want.BatchSize = 250
		want.BatchingWindow = 2 * time.Second
		want.ParallelizationFactor = 4
		want.MaximumRetryAttempts = 7
		want.MaximumRecordAge = time.Hour
		want.BisectBatchOnFunctionError = true
		want.StartingPosition = TrimHorizon
		want.FunctionTimeout = 45 * time.Second
		want.ReportBatchItemFailures = true
		if !reflect.DeepEqual(cfg, want) {
			t.Fatalf("config\n got %+v\nwant %+v", cfg, want)
		}
	})
	t.Run("minimal keeps defaults", func(t *testing.T) {
		cfg, err := ConfigFromTemplate("testdata/template-minimal.yaml")
		if err != nil {
			t.Fatal(err)
		}
		want := DefaultConfig()
		want.FunctionName = "Fn"
		if !reflect.DeepEqual(cfg, want) {
			t.Fatalf("config\n got %+v\nwant %+v", cfg, want)
		}
	})
	t.Run("the repository's template.yaml", func(t *testing.T) {
		cfg, err := ConfigFromTemplate("../../../template.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.FunctionName != "ConsumerFunction" || !cfg.ReportBatchItemFailures {
			t.Fatalf("consumer event not found: %+v", cfg)
		}
		cfg.StreamName = "s"
		if err := cfg.Validate(); err != nil {
			t.Fatalf("template defaults are not a valid mapping: %v", err)
		}
	})
	t.Run("bad default", func(t *testing.T) {
		if _, err := ConfigFromTemplate("testdata/template-bad.yaml"); !errors.Is(err, ErrConfig) {
			t.Fatalf("err = %v, want ErrConfig", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := ConfigFromTemplate("testdata/nope.yaml"); err == nil {
			t.Fatal("no error for a missing template")
		}
	})
}

func testRecord(t *testing.T, m *Mapping, seq, key string, data []byte) *record {
	t.Helper()
	r, err := m.newRecord("shardId-000000000007", kintypes.Record{
		SequenceNumber: aws.String(seq), PartitionKey: aws.String(key), Data: data,
		ApproximateArrivalTimestamp: aws.Time(time.UnixMilli(1700000000123)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testMapping() *Mapping {
	return &Mapping{streamARN: "arn:aws:kinesis:eu-west-1:123456789012:stream/s", region: "eu-west-1",
		identityARN: "arn:aws:iam::123456789012:role/f-role", functionARN: "arn:aws:lambda:eu-west-1:123456789012:function:f",
		now: func() time.Time { return time.UnixMilli(1700000100456) }}
}

func TestPayloadMatchesEventEncoding(t *testing.T) {
	t.Parallel()
	m := testMapping()
	var recs []*record
	for i := range 4 {
		recs = append(recs, testRecord(t, m, fmt.Sprint(100+i), fmt.Sprintf("k%d", i), []byte{byte(i), '<', '&'}))
	}
	var ev events.KinesisEvent
	for _, r := range recs {
		var er events.KinesisEventRecord
		if err := json.Unmarshal(r.json, &er); err != nil {
			t.Fatal(err)
		}
		ev.Records = append(ev.Records, er)
	}
	want, _ := json.Marshal(ev)
	if got := payload(recs); string(got) != string(want) {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	if got := payload(nil); string(got) != `{"Records":[]}` {
		t.Fatalf("empty payload %s", got)
	}
	if !strings.Contains(string(recs[0].json), `"approximateArrivalTimestamp":1700000000.123`) {
		t.Fatalf("arrival not in epoch seconds with milliseconds: %s", recs[0].json)
	}
	if !strings.Contains(string(recs[0].json), `"eventID":"shardId-000000000007:100"`) {
		t.Fatalf("eventID: %s", recs[0].json)
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	m := testMapping()
	var q []*record
	for i := range 6 {
		q = append(q, testRecord(t, m, fmt.Sprint(i+1), "k", []byte("0123456789")))
	}
	one := len(q[0].json)
	tests := []struct {
		name      string
		queue     []*record
		batchSize int
		maxBytes  int
		n         int
		full      bool
	}{
		{"all fit", q, 10, MaxPayloadBytes, 6, false},
		{"batch size", q, 4, MaxPayloadBytes, 4, true},
		{"exactly batch size", q, 6, MaxPayloadBytes, 6, true},
		{"bytes: two fit exactly", q, 10, envelopeBytes + 2*one + 1, 2, true},
		{"bytes: one byte short of two", q, 10, envelopeBytes + 2*one, 1, true},
		{"single oversize record alone", q, 10, 10, 1, true},
		{"empty", nil, 10, MaxPayloadBytes, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, full := cut(tc.queue, tc.batchSize, tc.maxBytes)
			if n != tc.n || full != tc.full {
				t.Fatalf("cut = %d,%v want %d,%v", n, full, tc.n, tc.full)
			}
			if n > 1 && len(payload(tc.queue[:n])) > tc.maxBytes {
				t.Fatalf("batch of %d is %d bytes > %d", n, len(payload(tc.queue[:n])), tc.maxBytes)
			}
		})
	}
}

func TestLaneOf(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.String().Draw(t, "key")
		n := rapid.IntRange(1, MaxParallelizationFactor).Draw(t, "n")
		sum := md5.Sum([]byte(key))
		want := new(big.Int).Mod(new(big.Int).SetBytes(sum[:]), big.NewInt(int64(n))).Int64()
		if got := LaneOf(key, n); int64(got) != want || got < 0 || got >= n {
			t.Fatalf("LaneOf(%q, %d) = %d, want %d", key, n, got, want)
		}
	})
	// Keys spread over every lane.
	seen := map[int]bool{}
	for i := range 200 {
		seen[LaneOf(fmt.Sprint(i), 10)] = true
	}
	if len(seen) != 10 {
		t.Fatalf("200 keys reached %d of 10 lanes", len(seen))
	}
}

func TestParseResponse(t *testing.T) {
	t.Parallel()
	m := testMapping()
	recs := []*record{testRecord(t, m, "11", "k", nil), testRecord(t, m, "12", "k", nil), testRecord(t, m, "13", "k", nil)}
	tests := []struct {
		resp string
		idx  int
		bad  bool
	}{
		{``, -1, false},
		{`  null `, -1, false},
		{`{}`, -1, false},
		{`{"batchItemFailures":null}`, -1, false},
		{`{"batchItemFailures":[]}`, -1, false},
		{`{"batchItemFailures":[{"itemIdentifier":"12"}]}`, 1, false},
		{`{"batchItemFailures":[{"itemIdentifier":"13"},{"itemIdentifier":"11"}]}`, 0, false},
		{`{"batchItemFailures":[{"itemIdentifier":""}]}`, 0, true},
		{`{"batchItemFailures":[{"itemIdentifier":null}]}`, 0, true},
		{`{"batchItemFailures":[{"ItemIdentifier":"12"}]}`, 0, true},
		{`{"batchItemFailures":[{"itemIdentifier":12}]}`, 0, true},
		{`{"batchItemFailures":[{"itemIdentifier":"99"}]}`, 0, true},
		{`{"batchItemFailures":[{"itemIdentifier":"12"},{"itemIdentifier":""}]}`, 0, true},
		{`{"batchItemFailures":{}}`, 0, true},
		{`{"batchItemFailures":[null]}`, 0, true},
		{`[]`, -1, false}, // recorded on AWS as success (see parseResponse)
		{`["12"]`, 0, true},
		{`"ok"`, 0, true},
		{`{`, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.resp, func(t *testing.T) {
			idx, err := parseResponse([]byte(tc.resp), recs)
			if tc.bad {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("err = %v, want ErrBadResponse", err)
				}
				return
			}
			if err != nil || idx != tc.idx {
				t.Fatalf("parseResponse = %d, %v; want %d", idx, err, tc.idx)
			}
		})
	}
}

// The function's response is untrusted input: any bytes give success, a partial failure
// inside the batch, or ErrBadResponse.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{``, `null`, `{"batchItemFailures":[{"itemIdentifier":"12"}]}`, `{"batchItemFailures":[{"itemIdentifier":""}]}`, `[1]`} {
		f.Add([]byte(s))
	}
	m := testMapping()
	var recs []*record
	for _, s := range []string{"11", "12", "13"} {
		r, _ := m.newRecord("shardId-000000000000", kintypes.Record{SequenceNumber: aws.String(s), PartitionKey: aws.String("k")})
		recs = append(recs, r)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := parseResponse(b, recs)
		switch {
		case err != nil && !errors.Is(err, ErrBadResponse):
			t.Fatalf("unexpected error %v", err)
		case err == nil && (idx < -1 || idx >= len(recs)):
			t.Fatalf("index %d outside the batch", idx)
		}
	})
}

// The OnFailure message has exactly the keys of the AWS documentation's example, with its types.
func TestFailureMessageShape(t *testing.T) {
	t.Parallel()
	m := testMapping()
	recs := []*record{testRecord(t, m, "21", "k", nil), testRecord(t, m, "22", "k", nil)}
	given := func(condition string, invokes int, last *lastInvoke) *givenUp {
		g := &givenUp{condition: condition}
		g.add(recs, unit{recs: recs, invokes: invokes, last: last})
		return g
	}
	msg := m.failureMessage("shardId-000000000007", given(onfailure.ConditionRetryAttemptsExhausted, 4,
		&lastInvoke{requestID: "r-1", statusCode: 200, functionError: true}))
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	// Shape of the example in docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html,
	// values of this test.
	want := `{"requestContext":{"requestId":"r-1","functionArn":"arn:aws:lambda:eu-west-1:123456789012:function:f",` +
		`"condition":"RetryAttemptsExhausted","approximateInvokeCount":4},` +
		`"responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":"Unhandled"},` +
		`"version":"1.0","timestamp":"2023-11-14T22:15:00.456Z",` +
		`"KinesisBatchInfo":{"shardId":"shardId-000000000007","startSequenceNumber":"21","endSequenceNumber":"22",` +
		`"approximateArrivalOfFirstRecord":"2023-11-14T22:13:20.123Z","approximateArrivalOfLastRecord":"2023-11-14T22:13:20.123Z",` +
		`"batchSize":2,"streamArn":"arn:aws:kinesis:eu-west-1:123456789012:stream/s"}}`
	if string(b) != want {
		t.Fatalf("message\n got %s\nwant %s", b, want)
	}
	partial := m.failureMessage("shardId-000000000007", given(onfailure.ConditionRetryAttemptsExhausted, 1, &lastInvoke{requestID: "r-2", statusCode: 200}))
	if b, _ := json.Marshal(partial.ResponseContext); string(b) != `{"statusCode":200,"executedVersion":"$LATEST","functionError":null}` {
		t.Fatalf("responseContext after a partial failure: %s", b)
	}
	expired := m.failureMessage("shardId-000000000007", given(onfailure.ConditionRecordAgeExceeded, 0, nil))
	if b, _ := json.Marshal(expired); strings.Contains(string(b), "responseContext") || expired.RequestContext.RequestID == "" ||
		expired.RequestContext.ApproximateInvokeCount != 1 {
		t.Fatalf("never-invoked message: %s", b)
	}
	// As recorded on AWS (LocalStack's test_kinesis_maximum_record_age_exceeded[expire-while-retrying]):
	// no responseContext on RecordAgeExceeded even after invocations.
	expiredLate := m.failureMessage("shardId-000000000007", given(onfailure.ConditionRecordAgeExceeded, 8,
		&lastInvoke{requestID: "r-3", statusCode: 200, functionError: true}))
	if b, _ := json.Marshal(expiredLate); strings.Contains(string(b), "responseContext") ||
		expiredLate.RequestContext.ApproximateInvokeCount != 8 {
		t.Fatalf("RecordAgeExceeded after invocations: %s", b)
	}
	// The emulator writes the format; the reconciler's parser (internal/onfailure) reads it. Every
	// variant the emulator sends must parse into the same range.
	for _, fm := range []*onfailure.Message{msg, partial, expired, expiredLate} {
		body, _ := json.Marshal(fm)
		parsed, err := onfailure.Parse(body)
		if err != nil {
			t.Fatalf("onfailure.Parse of the emulator's message: %v\n%s", err, body)
		}
		if b := parsed.KinesisBatchInfo; b.ShardID != fm.KinesisBatchInfo.ShardID || b.StartSequenceNumber != "21" ||
			b.EndSequenceNumber != "22" || b.StreamName() != "s" || parsed.RequestContext.Condition != fm.RequestContext.Condition {
			t.Fatalf("parsed %+v from %s", parsed, body)
		}
	}
}

func TestNewRequestID(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{}
	for range 100 {
		id := newRequestID()
		if len(id) != 36 || id[14] != '4' || !slices.Contains([]byte("89ab"), id[19]) {
			t.Fatalf("%q is not a version 4 UUID", id)
		}
		ids[id] = true
	}
	if len(ids) != 100 {
		t.Fatalf("request ids repeat")
	}
}
