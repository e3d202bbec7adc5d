package reconcile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// stack is one test's share of the local stack: a fresh stream, checkpoint and ledger tables
// and parked queue, with the real stores on top.
type stack struct {
	t         *testing.T
	kin       *kinesis.Client
	sqs       *sqs.Client
	group     string
	stream    string
	cps       *checkpoint.Store
	cpTable   string
	ledger    *dedupe.Ledger
	parkedURL string
	parker    *park.Parker
}

func newStack(t *testing.T, shards int32) *stack {
	t.Helper()
	ddb := stacktest.DynamoDB(t)
	name, _ := stacktest.Stream(t, shards)
	cpTable := stacktest.CheckpointTable(t)
	s := &stack{
		t: t, kin: stacktest.Kinesis(t), sqs: stacktest.SQS(t), group: "g", stream: name,
		cps:       checkpoint.New(ddb, cpTable),
		cpTable:   cpTable,
		ledger:    dedupe.New(ddb, stacktest.LedgerTable(t), dedupe.WithLogger(slog.New(slog.DiscardHandler))),
		parkedURL: stacktest.Queue(t, "parked", false),
	}
	s.parker = park.New(s.sqs, s.parkedURL)
	return s
}

func (s *stack) shard(id string) recordid.Shard {
	return recordid.Shard{Group: s.group, Stream: s.stream, ShardID: id}
}

// put is one record written to the stream.
type put struct {
	shard, seq, key string
	data            []byte
}

func (p put) id() recordid.ID { return recordid.ID{ShardID: p.shard, Seq: p.seq} }

// putN writes n records with keys key(i) and payloads {"n":i,"tag":tag}.
func (s *stack) putN(n int, tag string, key func(i int) string, payload func(i int) []byte) []put {
	s.t.Helper()
	var out []put
	for i := range n {
		data := []byte(fmt.Sprintf(`{"n":%d,"tag":%q}`, i, tag))
		if payload != nil {
			data = payload(i)
		}
		o, err := s.kin.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(s.stream),
			PartitionKey: aws.String(key(i)), Data: data})
		if err != nil {
			s.t.Fatalf("PutRecord: %v", err)
		}
		out = append(out, put{shard: aws.ToString(o.ShardId), seq: aws.ToString(o.SequenceNumber), key: key(i), data: data})
	}
	return out
}

func keyMod(m int) func(int) string { return func(i int) string { return fmt.Sprintf("key-%d", i%m) } }

// recorder is a ProcessFunc that counts deliveries per record and remembers their order.
type recorder struct {
	mu    sync.Mutex
	count map[recordid.ID]int
	order []recordid.ID
	// fail, when set, decides the outcome of each call.
	fail func(ctx context.Context, r pipeline.Record) error
}

func newRecorder() *recorder { return &recorder{count: map[recordid.ID]int{}} }

func (r *recorder) process(ctx context.Context, rec pipeline.Record) error {
	if r.fail != nil {
		if err := r.fail(ctx, rec); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[rec.ID]++
	r.order = append(r.order, rec.ID)
	return nil
}

func (r *recorder) counts() map[recordid.ID]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps(r.count)
}

func (r *recorder) delivered() []recordid.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

func maps(m map[recordid.ID]int) map[recordid.ID]int {
	out := make(map[recordid.ID]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// pipeline builds a pipeline over the stack's real stores.
func (s *stack) pipeline(proc pipeline.ProcessFunc, maxAttempts int) *pipeline.Pipeline {
	s.t.Helper()
	p, err := pipeline.New(pipeline.DedupeLedger{L: s.ledger}, pipeline.CheckpointStore{S: s.cps}, s.parker, proc,
		pipeline.Config{MaxRecordAttempts: maxAttempts, MaxConcurrency: 4, DeadlineMargin: time.Second})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// consume runs recs (one shard, in order) through p as the consumer would, advancing the
// checkpoint.
func (s *stack) consume(p *pipeline.Pipeline, recs []put) pipeline.Result {
	s.t.Helper()
	b := pipeline.Batch{Shard: s.shard(recs[0].shard), Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
	for _, r := range recs {
		b.Records = append(b.Records, pipeline.Record{ID: r.id(), PartitionKey: r.key, Data: r.data, ArrivalTime: time.Now()})
	}
	res, err := p.Run(context.Background(), b)
	if err != nil {
		s.t.Fatalf("consume: %v", err)
	}
	return res
}

// later is a clock an hour ahead: every record just written is past a 30-minute settle window.
func later() time.Time { return time.Now().Add(time.Hour) }

// reconciler builds a Reconciler for the stack with fast pacing.
func (s *stack) reconciler(p Replayer, cfg Config, opts ...Option) *Reconciler {
	s.t.Helper()
	cfg.Group, cfg.Stream = s.group, s.stream
	if cfg.SettleAfter == 0 {
		cfg.SettleAfter = 30 * time.Minute
	}
	if cfg.ReadInterval == 0 {
		cfg.ReadInterval = time.Millisecond
	}
	opts = append([]Option{WithClock(later), WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	r, err := New(s.kin, s.cps, p, cfg, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

func (s *stack) state(shardID string) checkpoint.State {
	s.t.Helper()
	st, err := s.cps.Get(context.Background(), s.shard(shardID))
	if err != nil {
		s.t.Fatalf("checkpoint get %s: %v", shardID, err)
	}
	return st
}

func (s *stack) shardIDs() []string {
	s.t.Helper()
	out, err := s.kin.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(s.stream)})
	if err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, sh := range out.Shards {
		ids = append(ids, aws.ToString(sh.ShardId))
	}
	slices.Sort(ids)
	return ids
}

func (s *stack) waitActive() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		out, err := s.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.stream)})
		if err != nil {
			s.t.Fatal(err)
		}
		if out.StreamDescriptionSummary.StreamStatus == kintypes.StreamStatusActive {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parkedMessages drains the parked queue.
func (s *stack) parkedMessages() []park.Message {
	s.t.Helper()
	var out []park.Message
	for {
		o, err := s.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.parkedURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			s.t.Fatal(err)
		}
		if len(o.Messages) == 0 {
			return out
		}
		for _, m := range o.Messages {
			pm, err := park.Decode(aws.ToString(m.Body))
			if err != nil {
				s.t.Fatalf("parked message: %v", err)
			}
			out = append(out, pm)
			if _, err := s.sqs.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(s.parkedURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				s.t.Fatal(err)
			}
		}
	}
}

// idsOf returns the ids of recs.
func idsOf(recs []put) []recordid.ID {
	out := make([]recordid.ID, len(recs))
	for i, r := range recs {
		out[i] = r.id()
	}
	return out
}

// checkOnce fails unless counts holds exactly want, each once.
func checkOnce(t *testing.T, what string, counts map[recordid.ID]int, want []recordid.ID) {
	t.Helper()
	if len(counts) != len(want) {
		t.Errorf("%s: %d records processed, want %d", what, len(counts), len(want))
	}
	for _, id := range want {
		if counts[id] != 1 {
			t.Errorf("%s: record %s processed %d times, want once", what, id, counts[id])
		}
	}
}

// logBuffer collects JSON log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the decoded log lines at level.
func (l *logBuffer) lines(level string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

func containsLine(lines []map[string]any, msgPart string) bool {
	return slices.ContainsFunc(lines, func(m map[string]any) bool {
		s, _ := m["msg"].(string)
		return strings.Contains(s, msgPart)
	})
}

func seqLess(a, b string) bool { return seqnum.Compare(a, b) < 0 }

func splitInput(stream, shardID string, at *big.Int) *kinesis.SplitShardInput {
	return &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String(shardID), NewStartingHashKey: aws.String(at.String())}
}

func mergeInput(stream, a, b string) *kinesis.MergeShardsInput {
	return &kinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: aws.String(a), AdjacentShardToMerge: aws.String(b)}
}
