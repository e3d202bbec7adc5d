package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

var shard = recordid.Shard{Group: "g", Stream: "s", ShardID: "shardId-000000000000"}

func seq(i int) string { return fmt.Sprintf("49590338271490256608559692538361571095921575989%09d", i) }

func id(i int) recordid.ID { return recordid.ID{ShardID: shard.ShardID, Seq: seq(i)} }

// batch builds n plain records with sequence numbers seq(1..n); key(i) names the partition key.
func batch(n int, key func(i int) string) pipeline.Batch {
	b := pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
	for i := 1; i <= n; i++ {
		b.Records = append(b.Records, pipeline.Record{
			ID: id(i), PartitionKey: key(i), Data: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			ArrivalTime: time.Unix(1_700_000_000, 0),
		})
	}
	return b
}

func oneKey(int) string { return "k" }

type env struct {
	ledger *pipelinetest.Ledger
	cp     *pipelinetest.Checkpoint
	parker *pipelinetest.Parker
	logs   *syncBuffer
}

type syncBuffer struct{ syncbuf.Buffer }

// lines returns the decoded JSON log lines whose msg contains substr.
func (s *syncBuffer) lines(t *testing.T, substr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, substr) {
			out = append(out, m)
		}
	}
	return out
}

func newEnv() *env {
	return &env{ledger: &pipelinetest.Ledger{}, cp: &pipelinetest.Checkpoint{}, parker: &pipelinetest.Parker{}, logs: &syncBuffer{}}
}

func (e *env) pipeline(t testing.TB, process pipeline.ProcessFunc, cfg pipeline.Config, opts ...pipeline.Option) *pipeline.Pipeline {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := pipeline.New(e.ledger, e.cp, e.parker, process, cfg, append([]pipeline.Option{pipeline.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recorder is a ProcessFunc that records calls and fails the sequence numbers in fail.
type recorder struct {
	mu    sync.Mutex
	calls []recordid.ID
	byKey map[string][]string
	fail  map[string]error
}

func (r *recorder) process(_ context.Context, rec pipeline.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, rec.ID)
	if r.byKey == nil {
		r.byKey = map[string][]string{}
	}
	r.byKey[rec.PartitionKey] = append(r.byKey[rec.PartitionKey], rec.ID.Seq)
	return r.fail[rec.ID.Seq]
}

func (r *recorder) called(seq string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.calls, func(id recordid.ID) bool { return id.Seq == seq })
}

func cfg() pipeline.Config {
	c := pipeline.DefaultConfig()
	c.MaxRecordAttempts = 3
	c.MaxConcurrency = 4
	c.DeadlineMargin = 0
	return c
}

func TestSkipsWhatTheLedgerHasDone(t *testing.T) {
	e := newEnv()
	ctx := context.Background()
	// An earlier invocation did records 2 and 4 (one processed, one parked).
	if err := e.ledger.Record(ctx, shard, pipeline.Entry{First: seq(2), Last: seq(4), Done: []recordid.ID{id(2), id(4)}, Parked: []recordid.ID{id(4)}, Source: "consumer"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	res, err := e.pipeline(t, rec.process, cfg()).Run(ctx, batch(5, func(i int) string { return fmt.Sprint("k", i%2) }))
	if err != nil {
		t.Fatal(err)
	}
	if e.ledger.Lookups != 1 {
		t.Errorf("%d lookups, want exactly 1 per batch", e.ledger.Lookups)
	}
	if rec.called(seq(2)) || rec.called(seq(4)) {
		t.Error("processed a record the ledger has as done")
	}
	if res.Processed != 3 || res.DuplicatesSkipped != 2 || res.Failed != 0 || res.LowestFailedSeq != "" {
		t.Errorf("result = %+v", res)
	}
	entries := e.ledger.Entries(shard)
	if len(entries) != 2 || !slices.Equal(entries[1].Done, []recordid.ID{id(1), id(3), id(5)}) {
		t.Errorf("ledger entry = %+v, want Done 1,3,5 only", entries[len(entries)-1])
	}
	if !res.CheckpointAdvanced || e.cp.Seq(shard) != seq(5) {
		t.Errorf("checkpoint = %q advanced=%v, want %s", e.cp.Seq(shard), res.CheckpointAdvanced, seq(5))
	}
}

// TestOrderWithinKeyUnderConcurrency: many keys, MaxConcurrency>1; each key's records reach
// Process in sequence order, the number of keys in flight reaches the bound and never exceeds it.
func TestOrderWithinKeyUnderConcurrency(t *testing.T) {
	const keys, perKey, bound = 40, 25, 6
	e := newEnv()
	c := cfg()
	c.MaxConcurrency = bound
	var inFlight, maxInFlight atomic.Int32
	reached := make(chan struct{})
	var once sync.Once
	rec := &recorder{}
	process := func(ctx context.Context, r pipeline.Record) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		if n == bound {
			once.Do(func() { close(reached) })
		}
		// Hold the first records until the bound is reached, proving it is reachable.
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			return errors.New("concurrency bound never reached")
		}
		return rec.process(ctx, r)
	}
	b := batch(keys*perKey, func(i int) string { return fmt.Sprintf("key-%02d", i%keys) })
	res, err := e.pipeline(t, process, c).Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != keys*perKey {
		t.Fatalf("processed %d of %d: %+v", res.Processed, keys*perKey, res.Failures[:min(3, len(res.Failures))])
	}
	if got := maxInFlight.Load(); got != bound {
		t.Errorf("max keys in flight = %d, want exactly %d", got, bound)
	}
	if len(rec.byKey) != keys {
		t.Fatalf("%d keys seen, want %d", len(rec.byKey), keys)
	}
	for k, seqs := range rec.byKey {
		if len(seqs) != perKey || !slices.IsSortedFunc(seqs, strings.Compare) { // equal-length seqs: string order is numeric
			t.Errorf("key %s: %d records, order %v", k, len(seqs), seqs)
		}
	}
}

func TestFailureStopsItsKeyOnly(t *testing.T) {
	e := newEnv()
	// keys: odd records "a", even records "b"; record 3 (key a) fails.
	rec := &recorder{fail: map[string]error{seq(3): errors.New("downstream 500")}}
	res, err := e.pipeline(t, rec.process, cfg()).Run(context.Background(), batch(8, func(i int) string { return map[bool]string{true: "a", false: "b"}[i%2 == 1] }))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{5, 7} {
		if rec.called(seq(s)) {
			t.Errorf("record %d of the failed key was started", s)
		}
	}
	for _, s := range []int{2, 4, 6, 8} {
		if !rec.called(seq(s)) {
			t.Errorf("record %d of the other key was not processed", s)
		}
	}
	if res.Processed != 5 || res.Failed != 3 || res.FailedAttempts != 1 || res.LowestFailedSeq != seq(3) {
		t.Errorf("result = %+v", res)
	}
	for _, f := range res.Failures {
		wantAttempted := f.ID == id(3)
		if f.Attempted != wantAttempted || (!wantAttempted && !errors.Is(f.Err, pipeline.ErrKeyBlocked)) {
			t.Errorf("failure %s: attempted=%v err=%v", f.ID.Seq, f.Attempted, f.Err)
		}
	}
	entries := e.ledger.Entries(shard)
	if len(entries) != 1 || !slices.Equal(entries[0].Failed, []recordid.ID{id(3)}) {
		t.Errorf("ledger Failed = %v, want only record 3 (blocked records are not attempts)", entries[0].Failed)
	}
	if e.cp.Seq(shard) != seq(2) {
		t.Errorf("checkpoint = %q, want %s (everything below the lowest failure)", e.cp.Seq(shard), seq(2))
	}
}

func TestCheckpointTarget(t *testing.T) {
	sub := func(b pipeline.Batch) pipeline.Batch { // records 3 and 4 become sub-records 0,1 of one KPL seq
		b.Records[3].ID = recordid.ID{ShardID: shard.ShardID, Seq: seq(3), Sub: 1}
		return b
	}
	for _, tc := range []struct {
		name   string
		b      pipeline.Batch
		fail   []int // record positions (1-based) whose Process fails
		want   string
		lowest string
	}{
		{name: "all done advances to last", b: batch(5, oneKey), want: seq(5)},
		{name: "first record fails: no advance", b: batch(5, func(i int) string { return fmt.Sprint(i) }), fail: []int{1}, lowest: seq(1)},
		{name: "middle failure: below it", b: batch(5, func(i int) string { return fmt.Sprint(i) }), fail: []int{4}, want: seq(3), lowest: seq(4)},
		{name: "two failures: below the lowest", b: batch(6, func(i int) string { return fmt.Sprint(i) }), fail: []int{5, 3}, want: seq(2), lowest: seq(3)},
		{name: "failed sub-record holds its whole sequence", b: sub(batch(5, func(i int) string { return fmt.Sprint(i) })), fail: []int{4}, want: seq(2), lowest: seq(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			failing := map[recordid.ID]bool{}
			for _, pos := range tc.fail {
				failing[tc.b.Records[pos-1].ID] = true
			}
			process := func(_ context.Context, r pipeline.Record) error {
				if failing[r.ID] {
					return errors.New("fail")
				}
				return nil
			}
			res, err := e.pipeline(t, process, cfg()).Run(context.Background(), tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if res.CheckpointSeq != tc.want || e.cp.Seq(shard) != tc.want || res.LowestFailedSeq != tc.lowest {
				t.Errorf("checkpoint target %q stored %q lowest failed %q; want %q and lowest %q",
					res.CheckpointSeq, e.cp.Seq(shard), res.LowestFailedSeq, tc.want, tc.lowest)
			}
			if tc.want == "" && e.cp.Calls != 0 {
				t.Errorf("%d checkpoint calls, want none", e.cp.Calls)
			}
		})
	}
}

// TestCheckpointOutcomeNeverChangesResults: a failed or lost checkpoint write is counted and
// logged; what is processed, skipped and reported is identical.
func TestCheckpointOutcomeNeverChangesResults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(*pipelinetest.Checkpoint)
		raceLost bool
		writeErr bool
	}{
		{name: "ok", setup: func(*pipelinetest.Checkpoint) {}},
		{name: "race lost: another writer moved it ahead", raceLost: true, setup: func(c *pipelinetest.Checkpoint) {
			if _, err := c.Advance(context.Background(), shard, seq(100)); err != nil {
				panic(err)
			}
		}},
		{name: "write error", writeErr: true, setup: func(c *pipelinetest.Checkpoint) {
			c.Fail = func(recordid.Shard, string) error { return errors.New("ProvisionedThroughputExceeded") }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			tc.setup(e.cp)
			rec := &recorder{fail: map[string]error{seq(4): errors.New("x")}}
			res, err := e.pipeline(t, rec.process, cfg()).Run(context.Background(), batch(6, oneKey))
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.calls) != 4 || res.Processed != 3 || res.DuplicatesSkipped != 0 || res.Failed != 3 || res.LowestFailedSeq != seq(4) {
				t.Errorf("records affected by the checkpoint: calls %d result %+v", len(rec.calls), res)
			}
			if res.CheckpointRaceLost != tc.raceLost || (res.CheckpointWriteFailures == 1) != tc.writeErr || res.CheckpointAdvanced == (tc.raceLost || tc.writeErr) {
				t.Errorf("checkpoint outcome: %+v", res)
			}
			if !res.LedgerWritten {
				t.Error("ledger not written")
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	t.Run("fake clock stops starting records", func(t *testing.T) {
		e := newEnv()
		start := time.Now()
		var mu sync.Mutex
		clock := start
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Hour))
		defer cancel()
		c := cfg()
		c.DeadlineMargin = 10 * time.Minute
		c.MaxConcurrency = 1
		rec := &recorder{}
		process := func(ctx context.Context, r pipeline.Record) error {
			mu.Lock()
			clock = clock.Add(20 * time.Minute) // each record takes 20 fake minutes
			mu.Unlock()
			return rec.process(ctx, r)
		}
		// Two keys: the deadline stop is global, not per key.
		res, err := e.pipeline(t, process, c, pipeline.WithClock(now)).Run(ctx, batch(8, func(i int) string { return fmt.Sprint(i % 2) }))
		if err != nil {
			t.Fatal(err)
		}
		// Starts at 60, 40, 20 minutes left; at 0 left (< 10) nothing more starts.
		if res.Processed != 3 || res.DeadlineSkipped != 5 || res.Failed != 5 || res.FailedAttempts != 0 {
			t.Errorf("result = %+v", res)
		}
		entries := e.ledger.Entries(shard)
		if len(entries) != 1 || len(entries[0].Done) != 3 || len(entries[0].Failed) != 0 {
			t.Errorf("ledger = %+v: finished records recorded, skipped ones not attempts", entries)
		}
		if len(e.logs.lines(t, "deadline near")) != 1 {
			t.Error("want one 'deadline near' warning")
		}
	})
	t.Run("real deadline with a slow processor", func(t *testing.T) {
		e := newEnv()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c := cfg()
		c.DeadlineMargin = time.Second
		c.MaxConcurrency = 2
		rec := &recorder{}
		process := func(ctx context.Context, r pipeline.Record) error {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return rec.process(ctx, r)
		}
		const n = 60
		res, err := e.pipeline(t, process, c).Run(ctx, batch(n, func(i int) string { return fmt.Sprint(i % 2) }))
		if err != nil {
			t.Fatal(err)
		}
		if res.Processed < 1 || res.Processed >= n || res.Processed+res.Failed != n || res.DeadlineSkipped == 0 {
			t.Errorf("result = %+v", res)
		}
		if got := len(e.ledger.Entries(shard)[0].Done); got != res.Processed {
			t.Errorf("ledger has %d done, result %d", got, res.Processed)
		}
	})
	t.Run("process context ends before the write budget", func(t *testing.T) {
		e := newEnv()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c := cfg()
		c.DeadlineMargin = 2 * time.Second
		var procDeadline time.Time
		process := func(ctx context.Context, r pipeline.Record) error {
			procDeadline, _ = ctx.Deadline()
			<-ctx.Done() // a hung call that honours its context
			return ctx.Err()
		}
		res, err := e.pipeline(t, process, c).Run(ctx, batch(1, oneKey))
		if err != nil {
			t.Fatalf("the ledger write must still fit after Process timed out: %v", err)
		}
		parent, _ := ctx.Deadline()
		if got := parent.Sub(procDeadline); got != time.Second {
			t.Errorf("Process deadline %v before the invocation's, want half the margin (1s)", got)
		}
		if res.FailedAttempts != 1 || !res.LedgerWritten {
			t.Errorf("a timed-out Process is a failed attempt and is recorded: %+v", res)
		}
	})
}

func TestPanicIsAFailure(t *testing.T) {
	e := newEnv()
	process := func(_ context.Context, r pipeline.Record) error {
		if r.ID.Seq == seq(2) {
			var m map[string]int
			m["boom"]++ // nil map write panics
		}
		return nil
	}
	res, err := e.pipeline(t, process, cfg()).Run(context.Background(), batch(3, oneKey))
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != 1 || res.FailedAttempts != 1 || res.Failed != 2 || res.LowestFailedSeq != seq(2) {
		t.Errorf("result = %+v", res)
	}
	if !errors.Is(res.Failures[0].Err, pipeline.ErrPanic) || !strings.Contains(res.Failures[0].Err.Error(), "nil map") {
		t.Errorf("failure = %v", res.Failures[0].Err)
	}
	lines := e.logs.lines(t, "panicked")
	if len(lines) != 1 {
		t.Fatalf("%d panic log lines", len(lines))
	}
	if st, _ := lines[0]["stack"].(string); !strings.Contains(st, "pipeline_test.go") || lines[0]["sequence_number"] != seq(2) {
		t.Errorf("panic log lacks stack or sequence number: %v", lines[0])
	}
}

func TestAttemptsAndParking(t *testing.T) {
	payload := []byte{0x00, 0xff, 'p', 'o', 'i', 's', 'o', 'n'}
	for _, tc := range []struct {
		name       string
		prior      int // failed attempts already in the ledger for record 2
		decodeErr  bool
		parkErr    bool
		wantParked bool
		wantByRef  bool
	}{
		{name: "below max: failed attempt", prior: 0},
		{name: "one below max: still failed", prior: 1},
		{name: "reaches max: parked with payload, key continues", prior: 2, wantParked: true},
		{name: "already past max: parked", prior: 7, wantParked: true},
		{name: "park error: stays failed", prior: 2, parkErr: true},
		{name: "decode error counts as attempt", prior: 0, decodeErr: true},
		{name: "decode error parked at max", prior: 2, decodeErr: true, wantParked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			ctx := context.Background()
			if tc.parkErr {
				e.parker.Fail = func(park.Record) error { return errors.New("sqs down") }
			}
			for range tc.prior {
				if err := e.ledger.Record(ctx, shard, pipeline.Entry{First: seq(2), Last: seq(2), Failed: []recordid.ID{id(2)}, Source: "consumer"}); err != nil {
					t.Fatal(err)
				}
			}
			b := batch(3, oneKey)
			b.Records[1].Data = payload
			b.Records[1].PartitionKey = "k"
			if tc.decodeErr {
				b.Records[1].DecodeErr = errors.New("kpl: corrupt aggregated record")
			}
			rec := &recorder{fail: map[string]error{seq(2): errors.New("poison")}}
			res, err := e.pipeline(t, rec.process, cfg()).Run(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if tc.decodeErr && rec.called(seq(2)) {
				t.Error("Process called for a record that failed to decode")
			}
			entry := e.ledger.Entries(shard)[tc.prior]
			parked := e.parker.Records()
			if tc.wantParked {
				if res.Parked != 1 || res.Failed != 0 || !rec.called(seq(3)) || res.Processed != 2 {
					t.Errorf("parked record must count as done and its key continue: %+v", res)
				}
				if len(parked) != 1 {
					t.Fatalf("%d parked", len(parked))
				}
				p := parked[0]
				wantData := payload
				if tc.wantByRef {
					wantData = nil
				}
				if p.ID != id(2) || p.Shard != shard || p.PartitionKey != "k" || p.Attempts != tc.prior+1 ||
					!bytes.Equal(p.Data, wantData) || p.Source != "consumer" || p.LastError == "" || !p.ArrivalTime.Equal(time.Unix(1_700_000_000, 0)) {
					t.Errorf("parked record = %+v", p)
				}
				if !slices.Contains(entry.Done, id(2)) || !slices.Equal(entry.Parked, []recordid.ID{id(2)}) || !slices.Equal(entry.Failed, []recordid.ID{id(2)}) {
					t.Errorf("ledger entry = %+v", entry)
				}
				if (res.ParkedByRef == 1) != tc.wantByRef || slices.Contains(entry.ParkedByRef, id(2)) != tc.wantByRef {
					t.Errorf("by reference: result %d, ledger %v", res.ParkedByRef, entry.ParkedByRef)
				}
				if tc.wantByRef {
					l := e.logs.lines(t, "BY REFERENCE")
					if len(l) != 1 || l[0]["level"] != "ERROR" {
						t.Errorf("by-reference park must log at ERROR: %v", l)
					}
				}
				if e.cp.Seq(shard) != seq(3) {
					t.Errorf("checkpoint %q, want past the parked record", e.cp.Seq(shard))
				}
				return
			}
			if len(parked) != 0 || res.Parked != 0 {
				t.Errorf("parked %d, want none", len(parked))
			}
			if res.Failed != 2 || res.FailedAttempts != 1 || res.LowestFailedSeq != seq(2) || rec.called(seq(3)) {
				t.Errorf("result = %+v", res)
			}
			if res.Failures[0].Attempts != tc.prior+1 || !slices.Equal(entry.Failed, []recordid.ID{id(2)}) {
				t.Errorf("attempts %d ledger failed %v", res.Failures[0].Attempts, entry.Failed)
			}
			if (res.ParkFailures == 1) != tc.parkErr {
				t.Errorf("ParkFailures = %d", res.ParkFailures)
			}
		})
	}
}

func TestBusinessKeyDedupe(t *testing.T) {
	e := newEnv()
	c := cfg()
	c.DedupeKey = "order.id"
	b := batch(7, oneKey) // one key: claim order is sequence order
	payloads := []string{
		`{"order":{"id":"A-1"}}`, // 1 claims A-1
		`{"order":{"id":"A-1"}}`, // 2 duplicate of 1 (a producer retry)
		`{"order":{"id":42}}`,    // 3 numeric key
		`not json at all`,        // 4 processed normally
		`{"order":{}}`,           // 5 no field: processed normally
		`{"order":{"id":42}}`,    // 6 duplicate of 3
		`{"order":{"id":["x"]}}`, // 7 not a scalar: no key
	}
	for i, p := range payloads {
		b.Records[i].Data = []byte(p)
	}
	rec := &recorder{}
	res, err := e.pipeline(t, rec.process, c, pipeline.WithClaimer(e.ledger)).Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if rec.called(seq(2)) || rec.called(seq(6)) {
		t.Error("business-key duplicate reached Process")
	}
	if res.Processed != 5 || res.KeyDuplicates != 2 || res.DuplicatesSkipped != 2 || res.Failed != 0 {
		t.Errorf("result = %+v", res)
	}
	if e.ledger.ClaimsN != 4 {
		t.Errorf("%d claims, want 4 (only records with a key)", e.ledger.ClaimsN)
	}
	if !slices.Contains(e.ledger.Entries(shard)[0].Done, id(2)) {
		t.Error("a key duplicate must be recorded done so a redelivery does not claim again")
	}
	if len(e.logs.lines(t, "no business key")) != 3 {
		t.Errorf("want 3 debug lines for records without a key")
	}

	t.Run("a retry of the claiming record is not a duplicate", func(t *testing.T) {
		e2 := newEnv()
		rec2 := &recorder{fail: map[string]error{seq(1): errors.New("first try fails")}}
		one := batch(1, oneKey)
		one.Records[0].Data = []byte(`{"order":{"id":"B"}}`)
		p := e2.pipeline(t, rec2.process, c, pipeline.WithClaimer(e2.ledger))
		if res, err := p.Run(context.Background(), one); err != nil || res.FailedAttempts != 1 {
			t.Fatalf("first run: %+v %v", res, err)
		}
		rec2.fail = nil
		res, err := p.Run(context.Background(), one)
		if err != nil || res.Processed != 1 || res.KeyDuplicates != 0 {
			t.Fatalf("retry: %+v %v", res, err)
		}
	})
	t.Run("claim error fails the record, never skips it", func(t *testing.T) {
		e3 := newEnv()
		e3.ledger.Fail = func(op string) error {
			if op == "claim" {
				return errors.New("throttled")
			}
			return nil
		}
		rec3 := &recorder{}
		one := batch(2, oneKey)
		one.Records[0].Data = []byte(`{"order":{"id":"C"}}`)
		res, err := e3.pipeline(t, rec3.process, c, pipeline.WithClaimer(e3.ledger)).Run(context.Background(), one)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec3.calls) != 0 || res.Failed != 2 || res.FailedAttempts != 0 || res.DuplicatesSkipped != 0 || res.LowestFailedSeq != seq(1) {
			t.Errorf("result = %+v", res)
		}
	})
	t.Run("claim error that is the record's fault counts as an attempt and parks it", func(t *testing.T) {
		// Only an error wrapping ErrRecordFault: retrying cannot help, so the record must move
		// on (parked with its payload) instead of blocking its key forever. A throttle (above)
		// still counts nothing.
		e4 := newEnv()
		e4.ledger.Fail = func(op string) error {
			if op == "claim" {
				return fmt.Errorf("key can never be claimed: %w", pipeline.ErrRecordFault)
			}
			return nil
		}
		rec4 := &recorder{}
		one := batch(1, oneKey)
		one.Records[0].Data = []byte(`{"order":{"id":"D"}}`)
		p := e4.pipeline(t, rec4.process, c, pipeline.WithClaimer(e4.ledger))
		for attempt := 1; attempt <= c.MaxRecordAttempts; attempt++ {
			res, err := p.Run(context.Background(), one)
			if err != nil {
				t.Fatal(err)
			}
			if attempt < c.MaxRecordAttempts && (res.Failed != 1 || res.FailedAttempts != 1) {
				t.Fatalf("attempt %d: result = %+v, want one failed attempt", attempt, res)
			}
			if attempt == c.MaxRecordAttempts && (res.Parked != 1 || res.Failed != 0) {
				t.Fatalf("attempt %d: result = %+v, want the record parked", attempt, res)
			}
		}
		if len(rec4.calls) != 0 {
			t.Error("Process ran for a record whose key could not be claimed")
		}
		if got := e4.parker.Records(); len(got) != 1 || !strings.Contains(got[0].LastError, "claim business key") {
			t.Errorf("parked %+v, want the record with the claim error as its last error", got)
		}
	})
}

func TestLedgerFailures(t *testing.T) {
	t.Run("lookup error: nothing processed", func(t *testing.T) {
		e := newEnv()
		e.ledger.Fail = func(op string) error {
			if op == "lookup" {
				return errors.New("dynamodb unreachable")
			}
			return nil
		}
		rec := &recorder{}
		_, err := e.pipeline(t, rec.process, cfg()).Run(context.Background(), batch(3, oneKey))
		if !errors.Is(err, pipeline.ErrLedger) || len(rec.calls) != 0 || e.cp.Calls != 0 {
			t.Errorf("err %v, %d calls, %d checkpoint calls", err, len(rec.calls), e.cp.Calls)
		}
	})
	t.Run("write error: error returned, checkpoint written beside it", func(t *testing.T) {
		e := newEnv()
		e.ledger.Fail = func(op string) error {
			if op == "record" {
				return errors.New("dynamodb 500")
			}
			return nil
		}
		rec := &recorder{}
		p := e.pipeline(t, rec.process, cfg())
		_, err := p.Run(context.Background(), batch(3, oneKey))
		// The checkpoint advance goes out in parallel with the entry (two sequential round
		// trips): it is issued although the entry fails. It decides nothing: nothing was
		// recorded, so a retry processes everything again (the documented duplicate window), and
		// nothing is skipped.
		if !errors.Is(err, pipeline.ErrLedger) || e.cp.Calls != 1 {
			t.Fatalf("err %v, %d checkpoint calls, want ErrLedger and 1", err, e.cp.Calls)
		}
		e.ledger.Fail = nil
		res, err := p.Run(context.Background(), batch(3, oneKey))
		if err != nil || res.Processed != 3 || res.DuplicatesSkipped != 0 || len(rec.calls) != 6 {
			t.Errorf("retry: %+v %v calls %d", res, err, len(rec.calls))
		}
	})
	t.Run("nothing new to record: no write", func(t *testing.T) {
		e := newEnv()
		rec := &recorder{}
		p := e.pipeline(t, rec.process, cfg())
		if _, err := p.Run(context.Background(), batch(3, oneKey)); err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(context.Background(), batch(3, oneKey))
		if err != nil || res.DuplicatesSkipped != 3 || res.LedgerWritten || e.ledger.Records != 1 {
			t.Errorf("redelivery of a done batch: %+v %v, %d ledger writes", res, err, e.ledger.Records)
		}
	})
}

func TestInvalidBatch(t *testing.T) {
	for name, mutate := range map[string]func(*pipeline.Batch){
		"bad shard":    func(b *pipeline.Batch) { b.Shard.Stream = "" },
		"no source":    func(b *pipeline.Batch) { b.Source = "" },
		"other shard":  func(b *pipeline.Batch) { b.Records[1].ID.ShardID = "shardId-000000000001" },
		"bad sequence": func(b *pipeline.Batch) { b.Records[1].ID.Seq = "x" },
		"out of order": func(b *pipeline.Batch) { b.Records[0], b.Records[1] = b.Records[1], b.Records[0] },
		"duplicate id": func(b *pipeline.Batch) { b.Records[1].ID = b.Records[0].ID },
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv()
			b := batch(3, oneKey)
			mutate(&b)
			if _, err := e.pipeline(t, (&recorder{}).process, cfg()).Run(context.Background(), b); !errors.Is(err, pipeline.ErrInvalidBatch) {
				t.Errorf("err = %v", err)
			}
			if e.ledger.Lookups != 0 {
				t.Error("invalid batch reached the ledger")
			}
		})
	}
	e := newEnv()
	res, err := e.pipeline(t, (&recorder{}).process, cfg()).Run(context.Background(), pipeline.Batch{Shard: shard, Source: "consumer"})
	if err != nil || res.Records != 0 || e.ledger.Lookups != 0 {
		t.Errorf("empty batch: %+v %v", res, err)
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv()
	noop := func(context.Context, pipeline.Record) error { return nil }
	for name, c := range map[string]pipeline.Config{
		"attempts":    {MaxRecordAttempts: 0, MaxConcurrency: 1},
		"concurrency": {MaxRecordAttempts: 1, MaxConcurrency: 0},
		"margin":      {MaxRecordAttempts: 1, MaxConcurrency: 1, DeadlineMargin: -1},
		"key path":    {MaxRecordAttempts: 1, MaxConcurrency: 1, DedupeKey: "a..b"},
		"no claimer":  {MaxRecordAttempts: 1, MaxConcurrency: 1, DedupeKey: "a.b"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := pipeline.New(e.ledger, e.cp, e.parker, noop, c); !errors.Is(err, pipeline.ErrInvalidConfig) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if _, err := pipeline.New(nil, e.cp, e.parker, noop, pipeline.DefaultConfig()); !errors.Is(err, pipeline.ErrInvalidConfig) {
		t.Errorf("nil ledger: %v", err)
	}
}

func TestPayloadLoggingIsOptIn(t *testing.T) {
	for _, logPayloads := range []bool{false, true} {
		e := newEnv()
		c := cfg()
		c.LogPayloads = logPayloads
		rec := &recorder{fail: map[string]error{seq(1): errors.New("x")}}
		b := batch(1, oneKey)
		b.Records[0].Data = []byte("SECRET-PAYLOAD")
		if _, err := e.pipeline(t, rec.process, c).Run(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(e.logs.String(), "SECRET-PAYLOAD"); got != logPayloads {
			t.Errorf("LogPayloads=%v: payload in logs = %v", logPayloads, got)
		}
	}
}

// TestDedupeLedgerClaimFault: the adapter marks exactly the ledger's "key can never be claimed"
// error as the record's fault. (The empty key is refused before any DynamoDB call.)
func TestDedupeLedgerClaimFault(t *testing.T) {
	d := pipeline.DedupeLedger{L: dedupe.New(nil, "t")}
	_, err := d.Claim(context.Background(), "g", "", id(1))
	if !errors.Is(err, pipeline.ErrRecordFault) || !errors.Is(err, dedupe.ErrInvalidKey) {
		t.Fatalf("empty key: %v, want ErrRecordFault wrapping dedupe.ErrInvalidKey", err)
	}
	_, err = d.Claim(context.Background(), "bad|group", "k", id(1))
	if err == nil || errors.Is(err, pipeline.ErrRecordFault) {
		t.Fatalf("invalid group: %v, want an error that is not the record's fault", err)
	}
}

// TestPartitionKeyLoggingIsOptIn: the log lines of a failed and a parked record name the
// partition key only when payload logging is on; otherwise a short digest of it. Before, every
// line carried the key as given.
func TestPartitionKeyLoggingIsOptIn(t *testing.T) {
	for _, logPayloads := range []bool{false, true} {
		e := newEnv()
		c := cfg()
		c.LogPayloads = logPayloads
		rec := &recorder{fail: map[string]error{seq(1): errors.New("x")}}
		p := e.pipeline(t, rec.process, c)
		b := batch(1, oneKey)
		b.Records[0].PartitionKey = "SECRET-KEY"
		for range c.MaxRecordAttempts {
			if _, err := p.Run(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
		logs := e.logs.String()
		if !strings.Contains(logs, "record parked") || !strings.Contains(logs, "record failed") {
			t.Fatalf("the test needs a failed and a parked line: %s", logs)
		}
		if got := strings.Contains(logs, "SECRET-KEY"); got != logPayloads {
			t.Errorf("LogPayloads=%v: partition key in logs = %v", logPayloads, got)
		}
		if digest := park.KeyDigest("SECRET-KEY")[:16]; !logPayloads && !strings.Contains(logs, digest) {
			t.Errorf("LogPayloads=false: no key digest %s in the logs", digest)
		}
	}
}
