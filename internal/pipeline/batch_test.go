package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// sink is a fake BatchFunc: it records every wave and fails the sequence numbers in fail, each
// for its first failN calls (0: always). Optional hooks misbehave on chosen waves.
type sink struct {
	mu     sync.Mutex
	waves  [][]pipeline.Record
	fail   map[string]int // seq -> failures left (-1: always)
	tries  map[string]int
	before func(recs []pipeline.Record) // may panic or block
	resize func(errs []error) []error   // may return the wrong number of outcomes
}

var errSink = errors.New("sink: entry failed")

func (s *sink) send(_ context.Context, recs []pipeline.Record) []error {
	s.mu.Lock()
	s.waves = append(s.waves, slices.Clone(recs))
	before, resize := s.before, s.resize
	s.mu.Unlock()
	if before != nil {
		before(recs)
	}
	errs := make([]error, len(recs))
	s.mu.Lock()
	for j, r := range recs {
		if s.tries == nil {
			s.tries = map[string]int{}
		}
		s.tries[r.ID.Seq]++
		if n, ok := s.fail[r.ID.Seq]; ok && (n < 0 || s.tries[r.ID.Seq] <= n) {
			errs[j] = fmt.Errorf("%w: %s", errSink, r.ID.Seq)
		}
	}
	s.mu.Unlock()
	if resize != nil {
		errs = resize(errs)
	}
	return errs
}

// sent returns every record the sink got, by partition key, in call order.
func (s *sink) sent() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for _, w := range s.waves {
		for _, r := range w {
			out[r.PartitionKey] = append(out[r.PartitionKey], r.ID.Seq)
		}
	}
	return out
}

func (s *sink) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waves)
}

func (e *env) batchPipeline(t *testing.T, s *sink, c pipeline.Config, chunk int, opts ...pipeline.Option) *pipeline.Pipeline {
	t.Helper()
	return e.pipeline(t, nil, c, append([]pipeline.Option{pipeline.WithBatchSink(s.send, chunk)}, opts...)...)
}

// checkWaves fails when a wave holds two records of one key.
func checkWaves(t *testing.T, s *sink) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, w := range s.waves {
		keys := map[string]bool{}
		for _, r := range w {
			if keys[r.PartitionKey] {
				t.Errorf("wave %d holds two records of key %s", n, r.PartitionKey)
			}
			keys[r.PartitionKey] = true
		}
	}
}

// untilDone runs b until nothing fails (at most rounds runs) and returns the results.
func untilDone(t *testing.T, p *pipeline.Pipeline, b pipeline.Batch, rounds int) []pipeline.Result {
	t.Helper()
	var out []pipeline.Result
	for range rounds {
		res, err := p.Run(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
		if res.Failed == 0 {
			return out
		}
	}
	t.Fatalf("not done after %d runs: %+v", rounds, out[len(out)-1])
	return nil
}

func TestBatchSinkOrderPerKey(t *testing.T) {
	key4 := func(i int) string { return fmt.Sprint("k", i%4) }
	tests := map[string]struct {
		n      int
		key    func(int) string
		fail   map[string]int
		chunk  int
		first  pipeline.Result // what the first run must report (fields checked below)
		parked []string
	}{
		"no failures": {n: 12, key: key4, chunk: 1, first: pipeline.Result{Processed: 12}},
		"one key":     {n: 5, key: oneKey, chunk: 10, first: pipeline.Result{Processed: 5}},
		"a failure stops its key only": {
			n: 12, key: key4, chunk: 1, fail: map[string]int{seq(6): 1}, // 6 is k2: 10 behind it
			first: pipeline.Result{Processed: 10, Failed: 2, FailedAttempts: 1, LowestFailedSeq: seq(6)},
		},
		"failures in two keys": {
			n: 12, key: key4, chunk: 1, fail: map[string]int{seq(1): 2, seq(7): 1}, // k1: 1,5,9; k3: 3,7,11
			first: pipeline.Result{Processed: 7, Failed: 5, FailedAttempts: 2, LowestFailedSeq: seq(1)},
		},
		"poison parked, its key goes on": {
			n: 8, key: key4, chunk: 1, fail: map[string]int{seq(2): -1},
			first:  pipeline.Result{Processed: 6, Failed: 2, FailedAttempts: 1, LowestFailedSeq: seq(2)},
			parked: []string{seq(2)},
		},
		"chunked waves": {
			n: 30, key: func(i int) string { return fmt.Sprint("k", i%13) }, chunk: 5,
			fail:  map[string]int{seq(14): 1}, // k1's second record
			first: pipeline.Result{Processed: 28, Failed: 2, FailedAttempts: 1, LowestFailedSeq: seq(14)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv()
			s := &sink{fail: tc.fail}
			p := e.batchPipeline(t, s, cfg(), tc.chunk)
			b := batch(tc.n, tc.key)
			runs := untilDone(t, p, b, cfg().MaxRecordAttempts+1)
			r := runs[0]
			if r.Processed != tc.first.Processed || r.Failed != tc.first.Failed || r.FailedAttempts != tc.first.FailedAttempts ||
				r.LowestFailedSeq != tc.first.LowestFailedSeq {
				t.Errorf("first run = %+v, want %+v", r, tc.first)
			}
			checkWaves(t, s)
			// Per key, the sink saw the key's records in sequence order, a record sent again
			// only after it failed, and never a record after a failed one in the same run.
			byKey := map[string][]string{}
			for _, rec := range b.Records {
				byKey[rec.PartitionKey] = append(byKey[rec.PartitionKey], rec.ID.Seq)
			}
			for k, got := range s.sent() {
				want := byKey[k]
				for j := 1; j < len(got); j++ {
					if got[j] < got[j-1] { // a failed record is sent again, never one behind it
						t.Errorf("key %s: sent %v out of order", k, got)
					}
				}
				if !isSupersequence(got, want) {
					t.Errorf("key %s: sent %v, want every record of %v", k, got, want)
				}
			}
			if tc.chunk > 1 {
				s.mu.Lock()
				for n, w := range s.waves[:len(s.waves)-1] {
					if len(w) >= tc.chunk && len(w)%tc.chunk != 0 {
						t.Errorf("wave %d has %d records, not a multiple of %d", n, len(w), tc.chunk)
					}
				}
				s.mu.Unlock()
			}
			var parked []string
			for _, pr := range e.parker.Records() {
				parked = append(parked, pr.ID.Seq)
			}
			if !slices.Equal(parked, tc.parked) {
				t.Errorf("parked %v, want %v", parked, tc.parked)
			}
			// Nothing lost: every record is done in the ledger.
			v, err := e.ledger.Lookup(context.Background(), shard, seq(1), seq(tc.n))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= tc.n; i++ {
				if !v.Done(id(i)) {
					t.Errorf("record %d not done", i)
				}
			}
		})
	}
}

// isSupersequence: every element of want appears in got, in want's order.
func isSupersequence(got, want []string) bool {
	j := 0
	for _, g := range got {
		if j < len(want) && g == want[j] {
			j++
		}
	}
	return j == len(want)
}

func TestBatchSinkMisbehaves(t *testing.T) {
	const culprit = 6 // k2 with four keys; its wave is the second
	key4 := func(i int) string { return fmt.Sprint("k", i%4) }
	hasCulprit := func(recs []pipeline.Record) bool {
		return slices.ContainsFunc(recs, func(r pipeline.Record) bool { return r.ID.Seq == seq(culprit) })
	}
	tests := map[string]struct {
		setup   func(s *sink, release chan struct{})
		margin  time.Duration
		timeout time.Duration
		want    error
	}{
		"panic": {
			setup: func(s *sink, _ chan struct{}) {
				s.before = func(recs []pipeline.Record) {
					if hasCulprit(recs) {
						panic("sink bug")
					}
				}
			},
			want: pipeline.ErrPanic,
		},
		"wrong number of outcomes": {
			setup: func(s *sink, _ chan struct{}) {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.resize = func(errs []error) []error {
					if len(errs) == 4 && len(s.waves) == 2 { // the second wave: 5, 6, 7, 8
						return errs[:3]
					}
					return errs
				}
			},
			want: pipeline.ErrSinkOutcomes,
		},
		"hung": {
			setup: func(s *sink, release chan struct{}) {
				s.before = func(recs []pipeline.Record) {
					if hasCulprit(recs) {
						<-release // ignores ctx
					}
				}
			},
			margin: 400 * time.Millisecond, timeout: 800 * time.Millisecond,
			want: pipeline.ErrAbandoned,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv()
			s := &sink{}
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			tc.setup(s, release)
			c := cfg()
			c.DeadlineMargin = tc.margin
			p := e.batchPipeline(t, s, c, 1)
			b := batch(12, key4) // waves: 1-4, 5-8 (the culprit's), 9-12
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			done := make(chan struct{})
			var res pipeline.Result
			var err error
			go func() { res, err = p.Run(ctx, b); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Errorf("Run returned after its deadline")
			}
			// Wave 2 (5-8) failed as a whole and blocked its keys: 9-12 not started.
			if res.Processed != 4 || res.Failed != 8 || res.FailedAttempts != 4 || res.LowestFailedSeq != seq(5) {
				t.Errorf("result = %+v", res)
			}
			for _, f := range res.Failures {
				inWave := f.ID.Seq >= seq(5) && f.ID.Seq <= seq(8)
				switch {
				case inWave && (!errors.Is(f.Err, tc.want) || !f.Attempted || f.Attempts != 1):
					t.Errorf("failure %s = %+v, want an attempt failed with %v", f.ID.Seq, f, tc.want)
				case !inWave && f.Attempted:
					t.Errorf("failure %s = %+v, want not attempted", f.ID.Seq, f)
				}
			}
			if tc.want == pipeline.ErrAbandoned && res.Abandoned != 4 {
				t.Errorf("abandoned = %d, want 4", res.Abandoned)
			}
			// Nothing lost: the ledger's entry names 1-4 done and 5-8 failed; 9-12 stay for the retry.
			entries := e.ledger.Entries(shard)
			if len(entries) != 1 || len(entries[0].Done) != 4 || len(entries[0].Failed) != 4 {
				t.Fatalf("entries = %+v", entries)
			}
		})
	}
}

func TestBatchSinkParksAfterMaxAttempts(t *testing.T) {
	// A wave failing as a whole every time (a panicking sink) costs every record of it an
	// attempt: after MaxRecordAttempts runs they are parked with their payloads, none lost.
	e := newEnv()
	s := &sink{before: func(recs []pipeline.Record) { panic("always") }}
	c := cfg()
	p := e.batchPipeline(t, s, c, 10)
	b := batch(4, func(i int) string { return fmt.Sprint("k", i%2) })
	untilDone(t, p, b, 2*c.MaxRecordAttempts+1)
	if got := len(e.parker.Records()); got != 4 {
		t.Errorf("parked %d records, want 4", got)
	}
	for _, pr := range e.parker.Records() {
		if pr.Attempts != c.MaxRecordAttempts || len(pr.Data) == 0 {
			t.Errorf("parked %+v", pr)
		}
	}
}

func TestBatchSinkBusinessKeys(t *testing.T) {
	e := newEnv()
	c := cfg()
	c.DedupeKey = "id"
	b := batch(6, func(i int) string { return fmt.Sprint("k", i%3) })
	for i, p := range []string{`{"id":"a"}`, `{"id":"b"}`, `{"id":"a"}`, `{"id":"c"}`, `{"id":"b"}`, `nope`} {
		b.Records[i].Data = []byte(p)
	}
	s := &sink{}
	res, err := e.batchPipeline(t, s, c, 1, pipeline.WithClaimer(e.ledger)).Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Processed != 4 || res.KeyDuplicates != 2 || res.Failed != 0 {
		t.Errorf("result = %+v", res)
	}
	// Records of different keys claim concurrently: of 1 and 3 (key "a") and of 2 and 5 (key
	// "b") exactly one each reaches the sink, whichever claimed first.
	var sent []string
	for _, seqs := range s.sent() {
		sent = append(sent, seqs...)
	}
	for _, pair := range [][2]int{{1, 3}, {2, 5}} {
		if slices.Contains(sent, seq(pair[0])) == slices.Contains(sent, seq(pair[1])) {
			t.Errorf("records %d and %d share a business key; sent %v, want exactly one of them", pair[0], pair[1], sent)
		}
	}
	if !slices.Contains(sent, seq(4)) || !slices.Contains(sent, seq(6)) || len(sent) != 4 {
		t.Errorf("sent %v, want 4 records including 4 and 6", sent)
	}
	if s.calls() == 0 {
		t.Error("sink never called")
	}
}

func TestBatchSinkDeadlineNotStarted(t *testing.T) {
	// Records not started at the margin fail with ErrDeadline, not attempted, as in Process mode.
	e := newEnv()
	c := cfg()
	c.DeadlineMargin = time.Hour
	s := &sink{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.batchPipeline(t, s, c, 1).Run(ctx, batch(5, oneKey))
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 5 || res.DeadlineSkipped != 5 || res.FailedAttempts != 0 || s.calls() != 0 {
		t.Errorf("result = %+v, %d calls", res, s.calls())
	}
}
