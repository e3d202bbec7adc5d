package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

// memHandler is a handler on the in-memory stores (unit tests and fuzzing).
func memHandler(t testing.TB, proc pipeline.ProcessFunc) (*Handler, *pipelinetest.Checkpoint) {
	cp := &pipelinetest.Checkpoint{}
	p, err := pipeline.New(&pipelinetest.Ledger{}, cp, &pipelinetest.Parker{}, proc,
		pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(p, "unit", nil), cp
}

// TestValidation covers how each kind of broken event is answered. The rule: a record that
// cannot be placed in the shard (invalid sequence number, another shard or stream, conflicting
// duplicate) fails the batch from its FIRST valid record; a record that can be placed but not
// decoded is one failed record; nothing crashes and nothing is silently skipped.
func TestValidation(t *testing.T) {
	t.Parallel()
	s := func(i int) string { return fixtures.Seq(7000 + i) }
	ok := func(i int, pk string) string { return rawRecordJSON(s(i), pk, `"e30="`) } // data {}
	withID := func(i int, eventID, arn string) string {
		return fmt.Sprintf(`{"kinesis":{"partitionKey":"k","sequenceNumber":%q,"data":"e30="},"eventID":%q,"eventSourceARN":%q}`, s(i), eventID, arn)
	}
	ev := func(recs ...string) string { return `{"Records":[` + strings.Join(recs, ",") + `]}` }
	for _, tc := range []struct {
		name      string
		event     string
		failure   string   // reported identifier
		err       error    // handler error instead
		processed []string // sequence numbers that reach Process
		advance   string   // checkpoint after the call
	}{
		{name: "empty event", event: `{"Records":[]}`},
		{name: "no Records member", event: `{}`},
		{name: "not an object", event: `[1,2]`, err: ErrMalformedEvent},
		{name: "not JSON", event: `{"Records":`, err: ErrMalformedEvent},
		{name: "clean", event: ev(ok(1, "a"), ok(2, "b")), processed: []string{s(1), s(2)}, advance: s(2)},
		{name: "invalid sequence in the middle fails from the first record",
			event:   ev(ok(1, "a"), strings.Replace(ok(2, "b"), s(2), "0"+s(2), 2), ok(3, "c")),
			failure: s(1), processed: []string{s(1), s(3)}},
		{name: "invalid sequence first: first VALID sequence reported",
			event:   ev(strings.Replace(ok(1, "a"), s(1), "x1", 2), ok(2, "b")),
			failure: s(2), processed: []string{s(2)}},
		{name: "only invalid sequences: the first one as delivered",
			event:   ev(strings.Replace(ok(1, "a"), s(1), "abc", 2), strings.Replace(ok(2, "b"), s(2), "", 2)),
			failure: "abc"},
		{name: "no sequence numbers at all: invocation error",
			event: ev(strings.Replace(ok(1, "a"), s(1), "", 2)), err: ErrUnreportable},
		{name: "record not an object", event: ev(ok(1, "a"), `42`), failure: s(1), processed: []string{s(1)}},
		{name: "record of another shard",
			event:   ev(ok(1, "a"), withID(2, "shardId-000000000099:"+s(2), fixtures.StreamARN)),
			failure: s(1), processed: []string{s(1)}},
		{name: "record of another stream",
			event:   ev(ok(1, "a"), withID(2, fixtures.Shard+":"+s(2), "arn:aws:kinesis:us-east-1:1:stream/other")),
			failure: s(1), processed: []string{s(1)}},
		{name: "first record's shard is the batch's",
			event:   ev(withID(1, "shardId-000000000099:"+s(1), fixtures.StreamARN), ok(2, "b")),
			failure: s(1), processed: []string{s(1)}},
		{name: "unparsable eventID: a failed record of the batch",
			event:   ev(ok(1, "a"), withID(2, "garbage", fixtures.StreamARN)),
			failure: s(2), processed: []string{s(1)}, advance: s(1)},
		{name: "unparsable ARN: a failed record of the batch",
			event:   ev(ok(1, "a"), withID(2, fixtures.Shard+":"+s(2), "not-an-arn")),
			failure: s(2), processed: []string{s(1)}, advance: s(1)},
		{name: "no record names a shard", event: ev(withID(1, "x", "y")), failure: s(1)},
		{name: "wrong field type: failed record", event: ev(ok(1, "a"), strings.Replace(ok(2, "b"), `"partitionKey":"b"`, `"partitionKey":7`, 1)),
			failure: s(2), processed: []string{s(1)}, advance: s(1)},
		{name: "unsorted: sorted, per-key order kept", event: ev(ok(3, "a"), ok(1, "a"), ok(2, "a")),
			processed: []string{s(1), s(2), s(3)}, advance: s(3)},
		{name: "identical duplicate processed once", event: ev(ok(1, "a"), ok(1, "a"), ok(2, "a")),
			processed: []string{s(1), s(2)}, advance: s(2)},
		{name: "conflicting duplicate rejected", event: ev(ok(1, "a"), strings.Replace(ok(1, "a"), `"e30="`, `"e30K"`, 1), ok(2, "a")),
			failure: s(1), processed: []string{s(1), s(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu = make(chan struct{}, 1)
			var got []string
			h, cp := memHandler(t, func(_ context.Context, r pipeline.Record) error {
				mu <- struct{}{}
				got = append(got, r.ID.Seq)
				<-mu
				return nil
			})
			resp, err := h.HandleJSON(context.Background(), json.RawMessage(tc.event))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := failureOf(t, resp); f != tc.failure {
				t.Errorf("reported %q, want %q", f, tc.failure)
			}
			slices.Sort(got)
			want := slices.Clone(tc.processed)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("processed %v, want %v", got, want)
			}
			if c := cp.Seq(shardFor("unit")); c != tc.advance {
				t.Errorf("checkpoint %q, want %q", c, tc.advance)
			}
		})
	}
}

func TestKPLExpansion(t *testing.T) {
	t.Parallel()
	users := []kpl.UserRecord{{PartitionKey: "u1", Data: []byte("one")}, {PartitionKey: "u2", Data: []byte("two")}, {PartitionKey: "u1", Data: []byte("three")}}
	agg, err := kpl.Aggregate(users)
	if err != nil {
		t.Fatal(err)
	}
	pl := buildPlan("g", "", fromEvent(mustEvent(t, mkEvent(t, rec{seq: fixtures.Seq(1), pk: "outer", data: agg}))))
	if len(pl.rejected) != 0 || len(pl.batch.Records) != 3 || pl.malformed != 0 {
		t.Fatalf("plan %+v", pl)
	}
	for i, r := range pl.batch.Records {
		if r.ID.Seq != fixtures.Seq(1) || r.ID.Sub != uint32(i) || r.PartitionKey != users[i].PartitionKey || string(r.Data) != string(users[i].Data) {
			t.Errorf("user record %d = %+v", i, r)
		}
	}
}

func mustEvent(t testing.TB, raw []byte) events.KinesisEvent {
	var ev events.KinesisEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestStreamAndShardParsing(t *testing.T) {
	t.Parallel()
	for arn, want := range map[string]string{
		"arn:aws:kinesis:us-east-1:123456789012:stream/orders":                        "orders",
		"arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/c1:1700000000": "orders",
		"arn:aws-cn:kinesis:cn-north-1:123456789012:stream/o.r-d_e":                   "o.r-d_e",
		"arn:aws:sqs:us-east-1:1:stream/orders":                                       "",
		"arn:aws:kinesis:us-east-1:1:table/orders":                                    "",
		"arn:aws:kinesis:us-east-1:1:stream/":                                         "",
		"":                                                                            "",
	} {
		got, ok := streamOf(arn)
		if got != want || ok != (want != "") {
			t.Errorf("streamOf(%q) = %q %v, want %q", arn, got, ok, want)
		}
	}
	for id, want := range map[string]string{
		"shardId-000000000006:123": "shardId-000000000006",
		"shardId-000000000006":     "",
		":123":                     "",
		"shard-1:123":              "",
		"shardId-a|b:1":            "",
	} {
		got, ok := shardOf(id)
		if got != want || ok != (want != "") {
			t.Errorf("shardOf(%q) = %q %v, want %q", id, got, ok, want)
		}
	}
}

func TestLoggerAddsRequestID(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	l := NewLogger(&buf, ParseLevel("INFO")).With("group", "g")
	ctx := lambdaCtx("abc-123")
	l.InfoContext(ctx, "hello", "shard_id", "s")
	l.DebugContext(ctx, "hidden at INFO")
	lines := buf.jsonLines(t)
	if len(lines) != 1 || lines[0]["request_id"] != "abc-123" || lines[0]["group"] != "g" || lines[0]["shard_id"] != "s" {
		t.Errorf("lines = %v", lines)
	}
	for in, want := range map[string]string{"DEBUG": "DEBUG", "WARN": "WARN", "ERROR": "ERROR", "": "INFO", "bogus": "INFO"} {
		if got := ParseLevel(in).String(); got != want {
			t.Errorf("ParseLevel(%q) = %s", in, got)
		}
	}
}

// FuzzDecodeEvent: arbitrary bytes through the handler's decoding, validation and the whole
// pipeline (in-memory stores) never panic, and the answer keeps Lambda's contract: no error
// unless unavoidable, at most one failure, never an empty identifier, and the identifier is a
// sequence number that appears in the event.
func FuzzDecodeEvent(f *testing.F) {
	for _, name := range []string{fixtures.Clean, fixtures.Poison, fixtures.KPL, fixtures.Malformed, fixtures.Redelivered} {
		f.Add(fixture(f, name))
	}
	f.Add([]byte(`{"Records":[{"kinesis":{"sequenceNumber":"1","data":"AA=="},"eventID":"shardId-1:1","eventSourceARN":"arn:aws:kinesis:r:a:stream/s"}]}`))
	f.Add([]byte(`{"Records":[null,{},[],"x",{"kinesis":null}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		recs, err := decodeEvent(raw)
		if err != nil {
			if !errors.Is(err, ErrMalformedEvent) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		pl := buildPlan("fuzz", "", recs)
		placed := len(pl.rejected) + len(pl.dropped)
		seen := map[string]bool{}
		for _, r := range pl.batch.Records {
			if r.ID.Sub == 0 {
				placed++
			}
			seen[r.ID.Seq] = true
		}
		if placed != len(recs) {
			t.Fatalf("%d records in, %d accounted for (batch, rejected, dropped)", len(recs), placed)
		}
		h, _ := memHandler(t, func(context.Context, pipeline.Record) error { return nil })
		resp, err := h.HandleJSON(context.Background(), raw)
		if err != nil {
			if !errors.Is(err, ErrUnreportable) {
				t.Fatalf("handler error %v", err)
			}
			for _, r := range recs {
				if r.seq != "" {
					t.Fatalf("ErrUnreportable although record %d has sequence %q", r.pos, r.seq)
				}
			}
			return
		}
		if len(resp.BatchItemFailures) > 1 {
			t.Fatalf("%d failures", len(resp.BatchItemFailures))
		}
		if len(resp.BatchItemFailures) == 1 {
			id := resp.BatchItemFailures[0].ItemIdentifier
			if id == "" || !slices.ContainsFunc(recs, func(r inRecord) bool { return r.seq == id }) {
				t.Fatalf("identifier %q is empty or not a sequence number of the event", id)
			}
		} else if len(pl.rejected) > 0 {
			t.Fatal("success reported although records were rejected")
		}
	})
}
