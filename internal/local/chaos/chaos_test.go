package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     Config
		wantErr  string // substring; "" = no error
	}{
		{name: "empty is defaults", in: "", want: DefaultConfig()},
		{name: "brief example", in: "seed=42,transient=0.03,panic=0.005,slow=0.002,slowfor=20s",
			want: Config{Seed: 42, Transient: 0.03, Panic: 0.005, Slow: 0.002, SlowFor: 20 * time.Second, HangFor: DefaultSlowFor, Poison: true}},
		{name: "killers", in: "seed=5,crash=0.01,hang=0.02,hangfor=9s",
			want: Config{Seed: 5, Crash: 0.01, Hang: 0.02, HangFor: 9 * time.Second, SlowFor: DefaultSlowFor, Poison: true}},
		{name: "killer rates sum above 1", in: "crash=0.7,hang=0.4", wantErr: "crash+hang = 1.1 exceeds 1"},
		{name: "crash above 1", in: "crash=2", wantErr: `crash="2" is not a probability`},
		{name: "bad hangfor", in: "hangfor=-1s", wantErr: `hangfor="-1s"`},
		{name: "spaces and state", in: " seed = 7 , poison=false, state=/tmp/x ",
			want: Config{Seed: 7, SlowFor: DefaultSlowFor, HangFor: DefaultSlowFor, StateDir: "/tmp/x"}},
		{name: "unknown key", in: "seed=1,flaky=0.1", wantErr: `unknown key "flaky"`},
		{name: "not key=value", in: "seed", wantErr: `"seed" is not key=value`},
		{name: "duplicate", in: "seed=1,seed=2", wantErr: `key "seed" given twice`},
		{name: "rate above 1", in: "transient=1.5", wantErr: `transient="1.5" is not a probability`},
		{name: "negative rate", in: "panic=-0.1", wantErr: `panic="-0.1"`},
		{name: "rates sum above 1", in: "transient=0.6,slow=0.5", wantErr: "exceeds 1"},
		{name: "bad seed", in: "seed=-3", wantErr: `seed="-3"`},
		{name: "bad duration", in: "slowfor=soon", wantErr: `slowfor="soon"`},
		{name: "zero duration", in: "slowfor=0s", wantErr: `slowfor="0s"`},
		{name: "bad bool", in: "poison=maybe", wantErr: `poison="maybe"`},
		{name: "empty state", in: "state=", wantErr: "state= needs a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want ErrConfig containing %q", tt.in, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), EnvVar) {
					t.Fatalf("error %q does not name %s", err, EnvVar)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			back, err := Parse(got.String())
			if err != nil || back != got {
				t.Fatalf("String() %q does not round-trip: %+v, %v", got.String(), back, err)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	if c, err := FromEnv(env("")); c != nil || err != nil {
		t.Fatalf("unset: got %v, %v; want nil, nil", c, err)
	}
	if _, err := FromEnv(env("transient=2")); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad value: err = %v, want ErrConfig", err)
	}
	c, err := FromEnv(env("seed=9,transient=0.5"))
	if err != nil || c == nil || c.Config().Seed != 9 {
		t.Fatalf("FromEnv = %+v, %v", c, err)
	}

	if opts, err := Options(env("")); len(opts) != 0 || err != nil {
		t.Fatalf("Options unset: %d options, %v; want none", len(opts), err)
	}
	if _, err := Options(env("transient=lots")); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("Options bad value: err = %v, want ErrConfig naming %s", err, EnvVar)
	}
	if opts, err := Options(env("seed=1")); len(opts) != 2 || err != nil {
		t.Fatalf("Options on: %d options, %v; want two (Process and batch wrappers)", len(opts), err)
	}
	base := func(context.Context, pipeline.Record) error { return nil }
	poison := pipeline.Record{ID: recordid.ID{ShardID: "shardId-000000000000", Seq: "1"}, Data: []byte(`{"id":"p","poison":true}`)}
	pub := gapless.Record{ShardID: "shardId-000000000000", SequenceNumber: "1", Data: poison.Data}
	if err := c.WrapRecord(func(context.Context, gapless.Record) error { return nil })(context.Background(), pub); !errors.Is(err, ErrPoison) || !strings.Contains(err.Error(), pub.ID()) {
		t.Fatalf("public Process, poison record: error = %v, want ErrPoison naming %s", err, pub.ID())
	}
	if err := c.Wrap(base)(context.Background(), poison); !errors.Is(err, ErrPoison) {
		t.Fatalf("chaos on: poison record error = %v, want ErrPoison", err)
	}
}

// outcome runs one attempt and names what happened.
func outcome(c *Chaos, name string, data []byte) (result string) {
	defer func() {
		if v := recover(); v != nil {
			result = "panic"
		}
	}()
	switch err := c.Before(context.Background(), name, data); {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrPoison):
		return "poison"
	case errors.Is(err, ErrTransient):
		return "transient"
	case errors.Is(err, ErrSlow):
		return "slow"
	default:
		return "error: " + err.Error()
	}
}

// history runs attempts on n records until each succeeds (at most 50 attempts each).
func history(t *testing.T, c *Chaos, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		name := fmt.Sprintf("r-%07d", i)
		var h []string
		for range 50 {
			o := outcome(c, name, []byte(`{"id":"`+name+`"}`))
			h = append(h, o)
			if o == "ok" {
				break
			}
		}
		out = append(out, strings.Join(h, ","))
	}
	return out
}

func TestSameSeedSameFaults(t *testing.T) {
	cfg := Config{Seed: 42, Transient: 0.2, Panic: 0.05, Slow: 0.05, SlowFor: time.Hour, Poison: true}
	noSleep := WithSleep(func(time.Duration) {})
	a, _ := New(cfg, noSleep)
	b, _ := New(cfg, noSleep)
	ha, hb := history(t, a, 300), history(t, b, 300)
	for i := range ha {
		if ha[i] != hb[i] {
			t.Fatalf("record %d: seed 42 gave %q then %q", i, ha[i], hb[i])
		}
	}
	cfg.Seed = 43
	c, _ := New(cfg, noSleep)
	hc := history(t, c, 300)
	differ := 0
	for i := range ha {
		if ha[i] != hc[i] {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("seeds 42 and 43 injected exactly the same faults into 300 records")
	}
}

func TestRatesAndRecovery(t *testing.T) {
	const n = 20000
	cfg := Config{Seed: 7, Transient: 0.03, Panic: 0.005, Slow: 0.002, SlowFor: time.Hour}
	var slept []time.Duration
	var mu sync.Mutex
	c, _ := New(cfg, WithSleep(func(d time.Duration) { mu.Lock(); slept = append(slept, d); mu.Unlock() }))
	first := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("r-%07d", i)
		first[outcome(c, name, nil)]++
	}
	check := func(kind string, rate float64) {
		t.Helper()
		want := rate * n
		sd := math.Sqrt(n * rate * (1 - rate))
		if got := float64(first[kind]); math.Abs(got-want) > 5*sd {
			t.Errorf("%s on first attempts: %v of %d, want %.0f ± %.0f", kind, got, n, want, 5*sd)
		}
	}
	check("transient", cfg.Transient)
	check("panic", cfg.Panic)
	check("slow", cfg.Slow)
	st := c.Stats()
	if st.Transient != int64(first["transient"]) || st.Panics != int64(first["panic"]) || st.Slow != int64(first["slow"]) {
		t.Errorf("Stats %+v do not match outcomes %v", st, first)
	}
	if len(slept) != first["slow"] {
		t.Errorf("slept %d times, want %d", len(slept), first["slow"])
	}
	for _, d := range slept {
		if d != time.Hour {
			t.Fatalf("slept %v, want slowfor=1h", d)
		}
	}
	// A record that faulted draws afresh on its next attempt: nearly all recover at once.
	recovered := 0
	faulted := 0
	for i := range n {
		name := fmt.Sprintf("r-%07d", i)
		if c.attemptsOf(name) == 0 {
			continue
		}
		faulted++
		if outcome(c, name, nil) == "ok" {
			recovered++
		}
	}
	if faulted == 0 || float64(recovered) < 0.9*float64(faulted) {
		t.Fatalf("%d of %d faulted records succeeded on the next attempt", recovered, faulted)
	}
}

func TestPoisonIsPermanent(t *testing.T) {
	c, _ := New(Config{Seed: 1, Poison: true})
	for i := range 10 {
		if o := outcome(c, "p", []byte(`{"id":"p","poison":true}`)); o != "poison" {
			t.Fatalf("attempt %d: %s, want poison", i, o)
		}
	}
	if got := c.Stats().Poison; got != 10 {
		t.Fatalf("Stats().Poison = %d, want 10", got)
	}
	off, _ := New(Config{Seed: 1, Poison: false})
	if o := outcome(off, "p", []byte(`{"id":"p","poison":true}`)); o != "ok" {
		t.Fatalf("poison=false: %s, want ok", o)
	}
	if o := outcome(c, "q", []byte(`{"id":"q","poison":false}`)); o != "ok" {
		t.Fatalf(`"poison": false: %s, want ok`, o)
	}
}

// TestStateSurvivesRestart: with a state directory a new process (a new Chaos) continues the
// attempt counts, so a record that timed out (its runtime killed) does not draw the same slow
// fault again forever.
func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Seed: 3, Slow: 1, SlowFor: time.Hour, StateDir: dir}
	noSleep := WithSleep(func(time.Duration) {})
	// With slow=1 every draw is slow; count how many attempts are recorded across "restarts".
	for i := range 3 {
		c, err := New(cfg, noSleep)
		if err != nil {
			t.Fatal(err)
		}
		if o := outcome(c, "weird/name:1", nil); o != "slow" {
			t.Fatalf("restart %d: %s, want slow", i, o)
		}
		if got := c.attemptsOf("weird/name:1"); got != i+1 {
			t.Fatalf("restart %d: attempts = %d, want %d", i, got, i+1)
		}
	}
	// In memory the count dies with the process.
	mem := Config{Seed: 3, Slow: 1, SlowFor: time.Hour}
	for range 2 {
		c, _ := New(mem, noSleep)
		outcome(c, "r", nil)
		if got := c.attemptsOf("r"); got != 1 {
			t.Fatalf("in-memory attempts after one fault in a new Chaos = %d, want 1", got)
		}
	}
}

func TestWrapNamesRecordsByPayloadID(t *testing.T) {
	// Find a seed whose first draw for "r-1" faults and whose first draw for the record-id
	// fallback does not, then check Wrap uses the payload id.
	rec := pipeline.Record{ID: recordid.ID{ShardID: "shardId-000000000000", Seq: "49"}, Data: []byte(`{"id":"r-1","key":"k"}`)}
	var seed uint64
	for seed = 1; seed < 10000; seed++ {
		if draw(seed, "r-1", 0) < 0.5 && draw(seed, rec.ID.String(), 0) >= 0.5 {
			break
		}
	}
	c, _ := New(Config{Seed: seed, Transient: 0.5})
	called := 0
	wrapped := c.Wrap(func(context.Context, pipeline.Record) error { called++; return nil })
	if err := wrapped(context.Background(), rec); !errors.Is(err, ErrTransient) || !strings.Contains(err.Error(), rec.ID.String()) {
		t.Fatalf("first attempt: %v, want ErrTransient naming the record", err)
	}
	if called != 0 {
		t.Fatal("next was called after an injected fault")
	}
	if got := Name([]byte(`not json`), "fallback"); got != "fallback" {
		t.Fatalf("Name(non-JSON) = %q", got)
	}
	if got := Name([]byte(`{"id":12}`), "fallback"); got != "fallback" {
		t.Fatalf("Name(numeric id) = %q", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	c, _ := New(Config{Seed: 5, Transient: 0.3, Panic: 0.1}, WithSleep(func(time.Duration) {}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				outcome(c, fmt.Sprintf("r-%d", (g*200+i)%50), nil)
			}
		})
	}
	wg.Wait()
	if c.Stats().Total() == 0 {
		t.Fatal("no faults injected in 1,600 attempts at 40%")
	}
}

// TestStateStats: the counts read back from a state directory equal what the processes
// injected.
func TestStateStats(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Seed: 11, Transient: 0.2, Panic: 0.1, Slow: 0.1, SlowFor: time.Hour, StateDir: dir}
	var total Stats
	for p := range 3 { // three "processes" over the same records
		c, err := New(cfg, WithSleep(func(time.Duration) {}))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 500 {
			outcome(c, fmt.Sprintf("r-%07d", (i*7+p)%500), nil)
		}
		st := c.Stats()
		total.Transient += st.Transient
		total.Panics += st.Panics
		total.Slow += st.Slow
	}
	got, unclassified, err := StateStats(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got != total || unclassified != 0 {
		t.Fatalf("StateStats = %+v (%d unclassified), injected %+v", got, unclassified, total)
	}
	if total.Total() == 0 {
		t.Fatal("nothing injected")
	}
	if _, _, err := StateStats(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no state dir: %v", err)
	}
}

// TestKillersMisbehaveOnEveryAttempt: a killer is chosen per record, by (seed, name) alone, and
// faults on every attempt in every process; the killer rates hold over many records.
func TestKillersMisbehaveOnEveryAttempt(t *testing.T) {
	const n = 20000
	dir := t.TempDir()
	cfg := Config{Seed: 21, Crash: 0.01, Hang: 0.02, HangFor: time.Hour, Transient: 0.3, Poison: true, StateDir: dir}
	var (
		mu      sync.Mutex
		crashed []string
		slept   []time.Duration
	)
	newChaos := func() *Chaos {
		c, err := New(cfg,
			WithSleep(func(d time.Duration) { mu.Lock(); slept = append(slept, d); mu.Unlock() }),
			WithCrash(func(_ context.Context, name string) { mu.Lock(); crashed = append(crashed, name); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	kinds := map[Kind]int{}
	var crashKiller, hangKiller string
	for i := range n {
		name := fmt.Sprintf("r-%07d", i)
		k := cfg.Killer(name)
		kinds[k]++
		if k == CrashKiller && crashKiller == "" {
			crashKiller = name
		}
		if k == HangKiller && hangKiller == "" {
			hangKiller = name
		}
	}
	for kind, rate := range map[Kind]float64{CrashKiller: cfg.Crash, HangKiller: cfg.Hang} {
		want := rate * n
		sd := math.Sqrt(n * rate * (1 - rate))
		if got := float64(kinds[kind]); math.Abs(got-want) > 5*sd {
			t.Errorf("%s killers: %v of %d, want %.0f ± %.0f", kind, got, n, want, 5*sd)
		}
	}
	// Every attempt, across three "processes" (a crash ends one), even with a poison payload.
	var injected Stats
	for p := range 3 {
		c := newChaos()
		for range 4 {
			if err := c.Before(context.Background(), crashKiller, []byte(`{"id":"x","poison":true}`)); !errors.Is(err, ErrCrash) {
				t.Fatalf("process %d: crash killer attempt: %v, want ErrCrash", p, err)
			}
			if err := c.Before(context.Background(), hangKiller, nil); !errors.Is(err, ErrHang) {
				t.Fatalf("process %d: hang killer attempt: %v, want ErrHang", p, err)
			}
		}
		st := c.Stats()
		injected.Crashes += st.Crashes
		injected.Hangs += st.Hangs
	}
	if len(crashed) != 12 || crashed[0] != crashKiller {
		t.Fatalf("crash hook called %d times (%v), want 12 times for %s", len(crashed), crashed, crashKiller)
	}
	if len(slept) != 12 || slept[0] != time.Hour {
		t.Fatalf("hangs slept %v, want 12 hangs of hangfor=1h", slept)
	}
	if injected.Crashes != 12 || injected.Hangs != 12 {
		t.Fatalf("Stats over three processes %+v, want 12 crashes and 12 hangs", injected)
	}
	got, unclassified, err := StateStats(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Crashes != 12 || got.Hangs != 12 || unclassified != 0 {
		t.Fatalf("StateStats = %+v (%d unclassified), want 12 crashes and 12 hangs", got, unclassified)
	}
	// The same seed picks the same killers; another seed picks others.
	other := cfg
	other.Seed = 22
	same, differ := 0, 0
	for i := range 2000 {
		name := fmt.Sprintf("r-%07d", i)
		if cfg.Killer(name) != NotKiller || other.Killer(name) != NotKiller {
			if cfg.Killer(name) == other.Killer(name) {
				same++
			} else {
				differ++
			}
		}
	}
	if differ == 0 {
		t.Fatalf("seeds 21 and 22 chose the same %d killers", same)
	}
	if (Config{Seed: 21}).Killer(crashKiller) != NotKiller {
		t.Fatal("a record is a killer with crash=0 and hang=0")
	}
}

// TestCrashExitsTheProcess: without a WithCrash hook a crash killer ends the process at once
// with CrashExitCode (the test runs itself as the victim).
func TestCrashExitsTheProcess(t *testing.T) {
	if os.Getenv("CHAOS_CRASH_VICTIM") == "1" {
		cfg := Config{Seed: 1, Crash: 1}
		c, err := New(cfg)
		if err != nil {
			os.Exit(2)
		}
		_ = c.Wrap(func(context.Context, pipeline.Record) error { return nil })(context.Background(),
			pipeline.Record{ID: recordid.ID{ShardID: "shardId-000000000000", Seq: "1"}, Data: []byte(`{"id":"k"}`)})
		fmt.Println("still alive after a crash killer")
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashExitsTheProcess$")
	cmd.Env = append(os.Environ(), "CHAOS_CRASH_VICTIM=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != CrashExitCode {
		t.Fatalf("victim ended with %v, want exit status %d; output:\n%s", err, CrashExitCode, out)
	}
	if strings.Contains(string(out), "still alive") || !strings.Contains(string(out), "crash killer k") {
		t.Fatalf("victim output:\n%s", out)
	}
}
