package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// fakeQueue is a parked queue: each message is received once per session (as if its
// visibility timeout outlasted the session). TEST-ONLY.
type fakeQueue struct {
	mu       sync.Mutex
	bodies   []string
	received int
	deleted  []string
	released []string
}

func (q *fakeQueue) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out sqs.ReceiveMessageOutput
	for ; q.received < len(q.bodies) && len(out.Messages) < int(in.MaxNumberOfMessages); q.received++ {
		h := "h" + string(rune('a'+q.received))
		out.Messages = append(out.Messages, sqstypes.Message{MessageId: aws.String("m" + h), ReceiptHandle: aws.String(h), Body: aws.String(q.bodies[q.received])})
	}
	return &out, nil
}

func (q *fakeQueue) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = append(q.deleted, aws.ToString(in.ReceiptHandle))
	return &sqs.DeleteMessageOutput{}, nil
}

func (q *fakeQueue) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.released = append(q.released, aws.ToString(in.ReceiptHandle))
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func parkedBody(t *testing.T, group string, i int, data []byte, byRef bool) string {
	t.Helper()
	id := recordid.ID{ShardID: "shardId-0", Seq: fakeSeq(i)}
	sum := sha256.Sum256(data)
	m := park.Message{Version: park.Version, RecordID: id.String(), Group: group, Stream: ustream, ShardID: id.ShardID, Seq: id.Seq,
		PartitionKey: "k", Attempts: 2, LastError: "boom", Source: pipeline.SourceConsumer, ParkedAt: time.Now().Add(-time.Hour),
		Data: data, DataBytes: len(data), DataSHA256: hex.EncodeToString(sum[:]), ByRef: byRef, ParkID: fmt.Sprintf("%016x", i+1)}
	if byRef { // only releases before payloads went to S3 wrote these, as version 1
		m.Data, m.Version, m.ParkID = nil, 1, ""
	}
	if byRef {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	b, err := park.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRedriveOutcomes(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 6, time.Now(), key3)
	q := &fakeQueue{bodies: []string{
		parkedBody(t, ugroup, 0, []byte("zero"), false),     // ha: processed
		"not a parked message",                              // hb: invalid
		parkedBody(t, "other-group", 1, []byte("x"), false), // hc: skipped
		parkedBody(t, ugroup, 2, sh.recs[2].Data, true),     // hd: by reference, re-read: processed
		parkedBody(t, ugroup, 3, []byte("tampered"), true),  // he: by reference, checksum differs: left
		parkedBody(t, ugroup, 4, []byte("four"), false),     // hf: ledger write fails: left
	}}
	ledger := &pipelinetest.Ledger{}
	for _, b := range q.bodies {
		if m, err := park.Decode(b); err == nil && m.Group == ugroup {
			recordParkedBody(t, ledger, b)
		}
	}
	rec := newRecorder()
	ledger.Fail = func(op string) error {
		if op == "record" && slices.ContainsFunc(rec.delivered(), func(id recordid.ID) bool { return id.Seq == fakeSeq(4) }) {
			return errBoom
		}
		return nil
	}
	p, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, &pipelinetest.Parker{}, rec.process, pipeline.Config{MaxRecordAttempts: 2, MaxConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	var events []RedriveEvent
	d, err := NewRedriver(q, "https://sqs/parked", newMemKinesis(sh), p, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 2, Backoff: time.Millisecond},
		WithRedriveLogger(discard()), WithRedriveProgress(func(ev RedriveEvent) { events = append(events, ev) }))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := RedriveReport{Received: 6, Processed: 2, Left: 2, Skipped: 1, Invalid: 1}
	if rep != want {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	var outcomes []Outcome
	for _, ev := range events {
		outcomes = append(outcomes, ev.Outcome)
	}
	if !slices.Equal(outcomes, []Outcome{OutcomeProcessed, OutcomeInvalid, OutcomeSkipped, OutcomeProcessed, OutcomeLeft, OutcomeLeft}) {
		t.Errorf("outcomes %v", outcomes)
	}
	if !slices.Equal(q.deleted, []string{"ha", "hd"}) {
		t.Errorf("deleted %v, want only the processed messages", q.deleted)
	}
	if !slices.Equal(q.released, []string{"hb", "hc", "he", "hf"}) {
		t.Errorf("made visible again %v, want every message left in the queue", q.released)
	}
	if got := rec.counts()[recordid.ID{ShardID: sh.id, Seq: fakeSeq(2)}]; got != 1 {
		t.Errorf("by-reference record processed %d times", got)
	}
}

// TestRedriveKeepsTheMessageWhenParkingAgainFails: the old message is deleted only after the
// new park was accepted; a park that fails (SQS or S3 down) leaves the original in the queue.
func TestRedriveKeepsTheMessageWhenParkingAgainFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		parkErr  error
		outcome  Outcome
		deleted  []string
		released []string
	}{
		{name: "park accepted: old message deleted", outcome: OutcomeParkedAgain, deleted: []string{"ha"}},
		{name: "park failed: old message kept", parkErr: errBoom, outcome: OutcomeLeft, released: []string{"ha"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{bodies: []string{parkedBody(t, ugroup, 0, []byte("zero"), false)}}
			ledger := &pipelinetest.Ledger{}
			recordParkedBody(t, ledger, q.bodies[0])
			parker := &pipelinetest.Parker{Fail: func(park.Record) error { return tc.parkErr }}
			failing := func(context.Context, pipeline.Record) error { return errBoom }
			p, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, failing, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			var events []RedriveEvent
			d, err := NewRedriver(q, "https://sqs/parked", newMemKinesis(), p, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1, Backoff: time.Millisecond},
				WithRedriveLogger(discard()), WithRedriveProgress(func(ev RedriveEvent) { events = append(events, ev) }))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(events) != 1 || events[0].Outcome != tc.outcome {
				t.Fatalf("events %+v, want %s", events, tc.outcome)
			}
			if !slices.Equal(q.deleted, tc.deleted) || !slices.Equal(q.released, tc.released) {
				t.Errorf("deleted %v released %v, want %v %v", q.deleted, q.released, tc.deleted, tc.released)
			}
		})
	}
}
