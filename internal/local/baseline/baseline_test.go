package baseline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

const shardID = "shardId-000000000000"

// event builds a Kinesis event of n records with 56-digit sequence numbers; key(i) names the
// partition key of record i.
func event(n int, key func(i int) string) events.KinesisEvent {
	ev := events.KinesisEvent{Records: make([]events.KinesisEventRecord, n)}
	for i := range n {
		seq := fmt.Sprintf("4959%052d", 1000+i*7)
		ev.Records[i] = events.KinesisEventRecord{
			EventID:        shardID + ":" + seq,
			EventSource:    "aws:kinesis",
			EventSourceArn: "arn:aws:kinesis:us-east-1:000000000000:stream/bench",
			Kinesis: events.KinesisRecord{
				SequenceNumber: seq, PartitionKey: key(i), Data: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			},
		}
	}
	return ev
}

func oneKey(int) string { return "k" }

// recorder is a Process that records calls and fails the sequence numbers in fail.
type recorder struct {
	mu    sync.Mutex
	calls []pipeline.Record
	fail  map[string]error
	panic map[string]bool
}

func (r *recorder) process(_ context.Context, rec pipeline.Record) error {
	r.mu.Lock()
	r.calls = append(r.calls, rec)
	err, p := r.fail[rec.ID.Seq], r.panic[rec.ID.Seq]
	r.mu.Unlock()
	if p {
		panic("boom")
	}
	return err
}

func (r *recorder) count(seq string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.ID.Seq == seq {
			n++
		}
	}
	return n
}

func failure(t *testing.T, resp events.KinesisEventResponse) string {
	t.Helper()
	switch len(resp.BatchItemFailures) {
	case 0:
		return ""
	case 1:
		if resp.BatchItemFailures[0].ItemIdentifier == "" {
			t.Fatal("empty itemIdentifier: Lambda would read it as total failure")
		}
		return resp.BatchItemFailures[0].ItemIdentifier
	}
	t.Fatalf("want at most one failure, got %+v", resp.BatchItemFailures)
	return ""
}

func TestBare(t *testing.T) {
	ev := event(10, oneKey)
	seq := func(i int) string { return ev.Records[i].Kinesis.SequenceNumber }
	tests := []struct {
		name    string
		fail    []int
		panic   []int
		want    int // index of the reported failure, -1 for none
		workers int
	}{
		{name: "all succeed", want: -1},
		{name: "one failure", fail: []int{4}, want: 4},
		{name: "lowest of several", fail: []int{7, 2, 5}, want: 2},
		{name: "panic is a failure", panic: []int{3}, fail: []int{8}, want: 3},
		{name: "lowest with lanes", fail: []int{9, 6}, want: 6, workers: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := event(10, func(i int) string { return fmt.Sprint("k", i%3) })
			rec := &recorder{fail: map[string]error{}, panic: map[string]bool{}}
			for _, i := range tc.fail {
				rec.fail[seq(i)] = errors.New("no")
			}
			for _, i := range tc.panic {
				rec.panic[seq(i)] = true
			}
			var st baseline.Stats
			h := baseline.Bare(rec.process, baseline.WithStats(&st), baseline.WithConcurrency(tc.workers))
			resp, err := h(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.want >= 0 {
				want = seq(tc.want)
			}
			if got := failure(t, resp); got != want {
				t.Errorf("failure = %q, want %q", got, want)
			}
			// The recipe keeps going after a failure: every record ran exactly once.
			for i := range ev.Records {
				if n := rec.count(seq(i)); n != 1 {
					t.Errorf("record %d processed %d times", i, n)
				}
			}
			nf := len(tc.fail) + len(tc.panic)
			if st.Records.Load() != 10 || st.Failed.Load() != int64(nf) || st.Processed.Load() != int64(10-nf) {
				t.Errorf("stats records=%d processed=%d failed=%d", st.Records.Load(), st.Processed.Load(), st.Failed.Load())
			}
		})
	}
}

// Sequence numbers compare as numbers, not strings: "9" < "10".
func TestBareLowestIsNumeric(t *testing.T) {
	ev := events.KinesisEvent{Records: []events.KinesisEventRecord{
		{EventID: shardID + ":10", Kinesis: events.KinesisRecord{SequenceNumber: "10", PartitionKey: "a"}},
		{EventID: shardID + ":9", Kinesis: events.KinesisRecord{SequenceNumber: "9", PartitionKey: "b"}},
	}}
	h := baseline.Bare(func(context.Context, pipeline.Record) error { return errors.New("no") })
	resp, err := h(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failure(t, resp); got != "9" {
		t.Errorf("failure = %q, want 9", got)
	}
}

// With concurrent lanes each partition key still runs in event order, and keys do overlap.
func TestBareLanesKeepKeyOrder(t *testing.T) {
	const keys, n = 8, 400
	ev := event(n, func(i int) string { return fmt.Sprint("key-", i%keys) })
	var mu sync.Mutex
	last := map[string]int{}
	running, maxRunning := 0, 0
	release := make(chan struct{})
	var once sync.Once
	h := baseline.Bare(func(_ context.Context, r pipeline.Record) error {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		if running == 4 {
			once.Do(func() { close(release) })
		}
		var i int
		fmt.Sscanf(string(r.Data), `{"n":%d}`, &i)
		prev, seen := last[r.PartitionKey]
		if seen && prev > i {
			t.Errorf("key %s: record %d after %d", r.PartitionKey, i, prev)
		}
		last[r.PartitionKey] = i
		mu.Unlock()
		select { // the first records wait until four lanes run at once (or give up)
		case <-release:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}, baseline.WithConcurrency(4))
	resp, err := h(context.Background(), ev)
	if err != nil || failure(t, resp) != "" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if maxRunning != 4 {
		t.Errorf("max concurrent = %d, want 4", maxRunning)
	}
	if len(last) != keys {
		t.Errorf("keys seen %d", len(last))
	}
}

// fakeDynamo is a function-typed fake of baseline.DynamoAPI.
type fakeDynamo struct {
	put    func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error)
	get    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	update func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	del    func(*dynamodb.DeleteItemInput) (*dynamodb.DeleteItemOutput, error)
}

func (f fakeDynamo) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return f.put(in)
}
func (f fakeDynamo) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return f.get(in)
}
func (f fakeDynamo) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return f.update(in)
}
func (f fakeDynamo) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return f.del(in)
}

// A store that cannot be written fails the record without running Process; a failed COMPLETED
// write fails the record after Process ran (it will run again once the claim expires).
func TestIdempotentStoreErrors(t *testing.T) {
	down := errors.New("connection refused")
	ok := func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) { return &dynamodb.PutItemOutput{}, nil }
	tests := []struct {
		name      string
		fake      fakeDynamo
		processed int
	}{
		{name: "put fails", fake: fakeDynamo{put: func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) { return nil, down }}},
		{name: "update fails", processed: 3, fake: fakeDynamo{put: ok,
			update: func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) { return nil, down }}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := event(3, oneKey)
			rec := &recorder{}
			var st baseline.Stats
			h := baseline.Idempotent(tc.fake, "t", rec.process, baseline.WithStats(&st))
			resp, err := h(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if got := failure(t, resp); got != ev.Records[0].Kinesis.SequenceNumber {
				t.Errorf("failure = %q", got)
			}
			if len(rec.calls) != tc.processed || st.Failed.Load() != 3 {
				t.Errorf("processed %d failed %d", len(rec.calls), st.Failed.Load())
			}
		})
	}
}

func TestKey(t *testing.T) {
	// md5 of the JSON string "shardId-000000000000:1" (with its quotes), as Powertools hashes
	// json.dumps of the selected field: printf '"shardId-000000000000:1"' | md5sum
	got := baseline.Key("fn", shardID+":1")
	if want := "fn#ec75edd4bcffa8b187df1bb12e86f654"; got != want {
		t.Errorf("Key = %s, want %s", got, want)
	}
	if baseline.Key("fn", shardID+":1") == baseline.Key("fn", shardID+":2") {
		t.Error("different records share a key")
	}
}
