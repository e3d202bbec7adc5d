package esm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.SQS, localstack.DynamoDB))
}

// stream is a fresh Kinesis stream on the local stack.
type stream struct {
	kin  *kinesis.Client
	name string
	arn  string
}

func newStream(t *testing.T, shards int32) *stream {
	t.Helper()
	name, arn := stacktest.Stream(t, shards)
	return &stream{kin: stacktest.Kinesis(t), name: name, arn: arn}
}

type putResult struct {
	key, seq, shard string
	data            []byte
}

func (s *stream) put(t *testing.T, key string, data []byte) putResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.kin.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(s.name), PartitionKey: aws.String(key), Data: data})
	if err != nil {
		t.Fatalf("PutRecord %s: %v", key, err)
	}
	return putResult{key: key, seq: aws.ToString(out.SequenceNumber), shard: aws.ToString(out.ShardId), data: data}
}

// putN writes n records with keys from keys (round robin) and data "rec-<i>".
func (s *stream) putN(t *testing.T, n int, keys ...string) []putResult {
	t.Helper()
	if len(keys) == 0 {
		keys = []string{"k"}
	}
	var out []putResult
	for i := range n {
		out = append(out, s.put(t, keys[i%len(keys)], fmt.Appendf(nil, "rec-%03d", i)))
	}
	return out
}

// invocation is one call seen by a recording invoker.
type invocation struct {
	shard   string
	lane    int
	payload []byte
	event   events.KinesisEvent
}

func (inv invocation) seqs() []string {
	var s []string
	for _, r := range inv.event.Records {
		s = append(s, r.Kinesis.SequenceNumber)
	}
	return s
}

// handler decides an invocation's outcome; n counts the calls on this lane before this one.
type handler func(ctx context.Context, inv invocation, n int) ([]byte, error)

// recorder is a lane factory of in-process invokers that record every invocation.
type recorder struct {
	t      *testing.T
	handle handler
	mu     sync.Mutex
	calls  []invocation
	perLn  map[string]int
}

func newRecorder(t *testing.T, h handler) *recorder {
	if h == nil {
		h = func(context.Context, invocation, int) ([]byte, error) { return nil, nil }
	}
	return &recorder{t: t, handle: h, perLn: map[string]int{}}
}

type laneInvoker struct {
	r     *recorder
	shard string
	lane  int
	busy  sync.Mutex // lanes invoke serially; TryLock proves it
}

func (r *recorder) lanes(shardID string, lane int) (Invoker, error) {
	return &laneInvoker{r: r, shard: shardID, lane: lane}, nil
}

func (li *laneInvoker) Invoke(ctx context.Context, p []byte) ([]byte, error) {
	if !li.busy.TryLock() {
		li.r.t.Errorf("lane %s/%d invoked while an invocation was running", li.shard, li.lane)
		return nil, fmt.Errorf("overlapping invocation")
	}
	defer li.busy.Unlock()
	var ev events.KinesisEvent
	if err := json.Unmarshal(p, &ev); err != nil {
		li.r.t.Errorf("payload is not a KinesisEvent: %v", err)
	}
	inv := invocation{shard: li.shard, lane: li.lane, payload: slices.Clone(p), event: ev}
	li.r.mu.Lock()
	key := fmt.Sprintf("%s/%d", li.shard, li.lane)
	n := li.r.perLn[key]
	li.r.perLn[key]++
	li.r.calls = append(li.r.calls, inv)
	li.r.mu.Unlock()
	return li.r.handle(ctx, inv, n)
}

func (r *recorder) invocations() []invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// delivered returns every sequence number invoked, in invocation order, with repeats.
func (r *recorder) delivered() []string {
	var all []string
	for _, c := range r.invocations() {
		all = append(all, c.seqs()...)
	}
	return all
}

// eventLog collects the mapping's events.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) observe(e Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) all(types ...EventType) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.evs {
		if len(types) == 0 || slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

// baseConfig is a fast configuration for tests against the local stack.
func baseConfig(s *stream) Config {
	cfg := DefaultConfig()
	cfg.StreamName = s.name
	cfg.FunctionName = "consumer"
	cfg.StartingPosition = TrimHorizon
	cfg.PollInterval = MinPollInterval
	return cfg
}

const drainBound = 4 * time.Minute

// e2eFunctionTimeout is the function timeout of the tests that run the real consumer (DynamoDB
// and SQS calls on the emulators) in the invocation. The default 3s, less the consumer's 500ms
// deadline margin, is not a bound a loaded machine always meets: a batch that starts too late
// is reported failed untried and retried, a mapping that gives up after one retry then gives up
// a range the test counts on, and TestFilteredRecordsAreNotGaps did not drain within a minute on
// moto under -race. The consumer's deadline handling is proven by its own tests (internal/consumer
// TestDeadline, internal/pipeline TestDeadline); here the timeout only bounds an invocation.
const e2eFunctionTimeout = 30 * time.Second

var fastOpts = []Option{WithShardDiscoveryInterval(200 * time.Millisecond), WithRetryDelay(10 * time.Millisecond)}

// drain runs a mapping until everything is drained and returns its events. drainBound only
// bounds a run that never drains; a loaded machine (-race, moto_server) can take more than a
// minute to drain the end-to-end tests' hundreds of records through the real consumer.
func drain(t *testing.T, s *stream, sqsClient sqsAPI, r *recorder, cfg Config, opts ...Option) (*Mapping, *eventLog) {
	t.Helper()
	log := &eventLog{}
	all := append(append([]Option{WithStopWhenDrained(), WithObserver(log.observe)}, fastOpts...), opts...)
	m, err := New(s.kin, sqsClient, r.lanes, cfg, all...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainBound)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m, log
}

// failureQueue is a fresh SQS queue for OnFailure messages.
type failureQueue struct {
	sqs *sqs.Client
	url string
}

func newFailureQueue(t *testing.T) *failureQueue {
	t.Helper()
	return &failureQueue{sqs: stacktest.SQS(t), url: stacktest.Queue(t, "onfailure", false)}
}

// receive reads exactly n messages (bounded wait) and checks that no more arrive.
func (q *failureQueue) receive(t *testing.T, n int) []onfailure.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []onfailure.Message
	for len(msgs) < n {
		out, err := q.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v (have %d of %d messages)", err, len(msgs), n)
		}
		for _, m := range out.Messages {
			msgs = append(msgs, decodeFailure(t, aws.ToString(m.Body)))
			if _, err := q.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
	out, err := q.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if len(msgs) != n || len(out.Messages) != 0 {
		t.Fatalf("OnFailure queue had %d messages, want %d", len(msgs)+len(out.Messages), n)
	}
	return msgs
}

// decodeFailure parses an OnFailure message strictly: unknown fields are an error.
func decodeFailure(t *testing.T, body string) onfailure.Message {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	var m onfailure.Message
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("OnFailure message %s: %v", body, err)
	}
	return m
}

func seqsOf(ps []putResult) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.seq)
	}
	return s
}

// sortedSeqs returns seqs in numeric order.
func sortedSeqs(seqs []string) []string {
	out := slices.Clone(seqs)
	slices.SortFunc(out, seqnum.Compare)
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
