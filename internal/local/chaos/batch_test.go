package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// firstFault names a record whose first attempt under cfg is kind: "crash", "hang", "panic",
// "slow", "transient" or "ok" (poison comes from the payload).
func firstFault(t *testing.T, cfg Config, kind string, skip map[string]bool) string {
	t.Helper()
	for i := range 100000 {
		name := fmt.Sprintf("b-%07d", i)
		if skip[name] {
			continue
		}
		got := "ok"
		switch k := cfg.Killer(name); {
		case k == CrashKiller:
			got = "crash"
		case k == HangKiller:
			got = "hang"
		default:
			switch u := draw(cfg.Seed, name, 0); {
			case u < cfg.Panic:
				got = "panic"
			case u < cfg.Panic+cfg.Slow:
				got = "slow"
			case u < cfg.Panic+cfg.Slow+cfg.Transient:
				got = "transient"
			}
		}
		if got == kind {
			skip[name] = true
			return name
		}
	}
	t.Fatalf("no record name whose first attempt is %s", kind)
	return ""
}

func TestWrapBatch(t *testing.T) {
	cfg := Config{Seed: 3, Panic: 0.2, Slow: 0.2, Transient: 0.2, Crash: 0.1, Hang: 0.1,
		SlowFor: time.Hour, HangFor: time.Hour, Poison: true}
	errNext := errors.New("next: entry failed")
	tests := map[string]struct {
		wave    []string // kinds, one record each ("poison": an ok record with a poison payload)
		nextErr map[int]error
		short   bool  // next returns one outcome too few
		want    []any // per record: nil (ok), an error to match with errors.Is
	}{
		"all pass":                   {wave: []string{"ok", "ok", "ok"}, want: []any{nil, nil, nil}},
		"faults stay their records'": {wave: []string{"ok", "transient", "poison", "ok", "panic", "crash"}, want: []any{nil, ErrTransient, ErrPoison, nil, pipeline.ErrPanic, ErrCrash}},
		"slow and hang overlap":      {wave: []string{"slow", "ok", "hang", "slow"}, want: []any{ErrSlow, nil, ErrHang, ErrSlow}},
		"nothing passes":             {wave: []string{"panic", "transient"}, want: []any{pipeline.ErrPanic, ErrTransient}},
		"next's outcomes merged in order": {wave: []string{"ok", "poison", "ok", "ok"}, nextErr: map[int]error{2: errNext},
			want: []any{nil, ErrPoison, errNext, nil}},
		"next returns too few outcomes": {wave: []string{"ok", "transient", "ok"}, short: true,
			want: []any{pipeline.ErrSinkOutcomes, ErrTransient, pipeline.ErrSinkOutcomes}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Every sleeper of the wave (slow calls, hangs) waits for all the others: run one after
			// another they would never all arrive and the test fails at its bound instead.
			sleepers := 0
			for _, k := range tc.wave {
				if k == "slow" || k == "hang" {
					sleepers++
				}
			}
			var arrived sync.WaitGroup
			arrived.Add(sleepers)
			all := make(chan struct{})
			go func() { arrived.Wait(); close(all) }()
			var mu sync.Mutex
			var crashed []string
			c, err := New(cfg,
				WithSleep(func(time.Duration) {
					arrived.Done()
					select {
					case <-all:
					case <-time.After(30 * time.Second):
						t.Error("slow faults of one wave ran one after another")
					}
				}),
				WithCrash(func(_ context.Context, name string) { mu.Lock(); crashed = append(crashed, name); mu.Unlock() }))
			if err != nil {
				t.Fatal(err)
			}
			skip := map[string]bool{}
			recs := make([]gapless.Record, len(tc.wave))
			var wantNext []string
			for j, k := range tc.wave {
				data := ""
				switch k {
				case "poison":
					data = fmt.Sprintf(`{"id":%q,"poison":true}`, firstFault(t, cfg, "ok", skip))
				default:
					data = fmt.Sprintf(`{"id":%q}`, firstFault(t, cfg, k, skip))
				}
				recs[j] = gapless.Record{ShardID: "shardId-000000000000", SequenceNumber: fmt.Sprint(j + 1), PartitionKey: fmt.Sprint("k", j), Data: []byte(data)}
				if k == "ok" {
					wantNext = append(wantNext, recs[j].SequenceNumber)
				}
			}
			calls := 0
			var gotNext []string
			next := func(_ context.Context, in []gapless.Record) []error {
				calls++
				out := make([]error, len(in))
				for n, r := range in {
					gotNext = append(gotNext, r.SequenceNumber)
					j := slices.IndexFunc(recs, func(x gapless.Record) bool { return x.SequenceNumber == r.SequenceNumber })
					out[n] = tc.nextErr[j]
				}
				if tc.short {
					out = out[:len(out)-1]
				}
				return out
			}
			got := c.WrapBatch(next)(context.Background(), recs)
			if len(got) != len(recs) {
				t.Fatalf("%d outcomes for %d records", len(got), len(recs))
			}
			for j, w := range tc.want {
				switch w := w.(type) {
				case nil:
					if got[j] != nil {
						t.Errorf("record %d (%s): %v, want nil", j, tc.wave[j], got[j])
					}
				case error:
					if !errors.Is(got[j], w) {
						t.Errorf("record %d (%s): %v, want %v", j, tc.wave[j], got[j], w)
					}
				}
			}
			wantCalls := 0
			if len(wantNext) > 0 {
				wantCalls = 1
			}
			if calls != wantCalls || !slices.Equal(gotNext, wantNext) {
				t.Errorf("next called %d times with %v, want %d call(s) with %v", calls, gotNext, wantCalls, wantNext)
			}
			if slices.Contains(tc.wave, "crash") && len(crashed) != 1 {
				t.Errorf("crash hook called for %v, want once", crashed)
			}
		})
	}
}

// TestWrapSink: the pipeline's batch form gets the same per-record faults as WrapBatch's.
func TestWrapSink(t *testing.T) {
	c, err := New(Config{Seed: 1, Poison: true})
	if err != nil {
		t.Fatal(err)
	}
	recs := []pipeline.Record{
		{ID: recordid.ID{ShardID: "shardId-000000000000", Seq: "1"}, Data: []byte(`{"id":"a","poison":true}`)},
		{ID: recordid.ID{ShardID: "shardId-000000000000", Seq: "2"}, Data: []byte(`{"id":"b"}`)},
	}
	var got []string
	errs := c.WrapSink(func(_ context.Context, in []pipeline.Record) []error {
		for _, r := range in {
			got = append(got, r.ID.Seq)
		}
		return make([]error, len(in))
	})(context.Background(), recs)
	if len(errs) != 2 || !errors.Is(errs[0], ErrPoison) || errs[1] != nil || !slices.Equal(got, []string{"2"}) {
		t.Fatalf("outcomes %v, next got %v; want poison then nil, next got [2]", errs, got)
	}
}
