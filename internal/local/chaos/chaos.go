// Package chaos injects seeded faults into the function's record processing, for the demo and
// end-to-end tests: transient errors, panics, calls slower than the function timeout (the
// invocation times out), killer records that crash the runtime process or hang on every
// attempt, and, for records whose payload says "poison": true, a permanent error.
//
// It is configured by one environment variable, GAPLESS_CHAOS, and is off when the variable is
// absent; template.yaml never sets it. Example:
//
//	GAPLESS_CHAOS="seed=42,transient=0.03,panic=0.005,slow=0.002,slowfor=20s,crash=0.002,hang=0.002"
//
// Keys (comma-separated key=value, any order, each at most once):
//
//	seed       uint64, default 1: the seed of every draw
//	transient  probability 0..1 that an attempt fails with ErrTransient
//	panic      probability 0..1 that an attempt panics
//	slow       probability 0..1 that an attempt sleeps slowfor, ignoring its context, so the
//	           invocation runs past the function timeout (then it fails with ErrSlow)
//	slowfor    Go duration, default 20s
//	crash      probability 0..1 that a record is a crash killer: every attempt at it exits the
//	           runtime process (os.Exit(CrashExitCode), nothing after it runs; see WithCrash)
//	hang       probability 0..1 that a record is a hang killer: every attempt at it blocks,
//	           ignoring its context, for hangfor (then it fails with ErrHang)
//	hangfor    Go duration, default 20s: set it past the function timeout
//	poison     true|false, default true: payloads with "poison": true fail with ErrPoison
//	state      directory shared by every process of a run that keeps the attempt counts, so a
//	           timed-out (killed) runtime does not forget them; default: in memory
//
// The three per-attempt rates are one draw: their sum must not exceed 1. The two killer rates
// are another, per record: their sum must not exceed 1 either.
//
// Killers: whether a record is a killer, and which kind, is a pure function of (seed, name)
// (Killer), drawn apart from the per-attempt draws, so a killer misbehaves on every attempt, in
// every process, in both variants of a demo run, and the demo can count the killers it produced
// without running anything. A killer is decided before anything else (poison included).
//
// Repeatability: each record is named by the "id" field of its JSON payload (loadgen's unique
// id), or by its record id when the payload has none, so two runs of the same workload with the
// same seed see the same faults on the same records whatever their sequence numbers. The k-th
// draw for a record is a pure function of (seed, name, k), where k counts the faults already
// injected into that record; a fault bumps k before it acts (before the panic, before the
// sleep), so a retry draws afresh and a killed process cannot make a record fault forever. A
// record therefore faults on n consecutive attempts with probability rate^n.
//
// It is a test and demo tool, not business logic: the consumer and reconciler mains wrap their
// Process and its batch form with it only when built with -tags gapless_chaos (BuildTag) and
// GAPLESS_CHAOS is set (see Options).
package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// EnvVar is the environment variable that configures and enables chaos.
const EnvVar = "GAPLESS_CHAOS"

// DefaultSlowFor is how long a slow call sleeps unless slowfor says otherwise.
const DefaultSlowFor = 20 * time.Second

// Errors. Every injected failure wraps ErrInjected.
var (
	// ErrConfig wraps every error in the GAPLESS_CHAOS value.
	ErrConfig = errors.New("chaos: invalid " + EnvVar)
	// ErrInjected is wrapped by every error chaos returns from a record.
	ErrInjected = errors.New("chaos: injected fault")
	// ErrTransient is a fault that a retry may not see again.
	ErrTransient = fmt.Errorf("%w: transient error", ErrInjected)
	// ErrPoison is the permanent failure of a payload marked "poison": true.
	ErrPoison = fmt.Errorf("%w: poison record", ErrInjected)
	// ErrSlow is returned after a slow call has slept (if the runtime was not killed first).
	ErrSlow = fmt.Errorf("%w: slow call", ErrInjected)
	// ErrHang is returned after a hang killer's call has blocked for HangFor (if the runtime
	// was not killed first).
	ErrHang = fmt.Errorf("%w: hang killer", ErrInjected)
	// ErrCrash is returned by an attempt at a crash killer only when a WithCrash hook returns
	// (in-process runtimes); the default hook exits the process.
	ErrCrash = fmt.Errorf("%w: crash killer", ErrInjected)
)

// CrashExitCode is the exit status of a runtime process a crash killer ended.
const CrashExitCode = 86

// Kind is the kind of killer a record is.
type Kind int

// Kinds of killers.
const (
	NotKiller Kind = iota
	CrashKiller
	HangKiller
)

func (k Kind) String() string {
	switch k {
	case CrashKiller:
		return "crash"
	case HangKiller:
		return "hang"
	}
	return "none"
}

// Config is a parsed GAPLESS_CHAOS value.
type Config struct {
	Seed      uint64
	Transient float64
	Panic     float64
	Slow      float64
	SlowFor   time.Duration
	Poison    bool
	StateDir  string
	// Crash and Hang are per-record probabilities of killers (see Killer).
	Crash   float64
	Hang    float64
	HangFor time.Duration
}

// DefaultConfig is what an empty value means: seed 1, no random faults, poison on.
func DefaultConfig() Config {
	return Config{Seed: 1, SlowFor: DefaultSlowFor, HangFor: DefaultSlowFor, Poison: true}
}

// Parse reads a GAPLESS_CHAOS value. Errors wrap ErrConfig and name the variable and the key.
func Parse(s string) (Config, error) {
	c := DefaultConfig()
	seen := map[string]bool{}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return c, bad("%q is not key=value", part)
		}
		if seen[k] {
			return c, bad("key %q given twice", k)
		}
		seen[k] = true
		switch k {
		case "seed":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return c, bad("seed=%q is not an unsigned integer", v)
			}
			c.Seed = n
		case "transient", "panic", "slow", "crash", "hang":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return c, bad("%s=%q is not a probability from 0 to 1", k, v)
			}
			switch k {
			case "transient":
				c.Transient = f
			case "panic":
				c.Panic = f
			case "slow":
				c.Slow = f
			case "crash":
				c.Crash = f
			default:
				c.Hang = f
			}
		case "slowfor", "hangfor":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, bad("%s=%q is not a positive duration like 20s", k, v)
			}
			if k == "slowfor" {
				c.SlowFor = d
			} else {
				c.HangFor = d
			}
		case "poison":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return c, bad("poison=%q is not true or false", v)
			}
			c.Poison = b
		case "state":
			if v == "" {
				return c, bad("state= needs a directory")
			}
			c.StateDir = v
		default:
			return c, bad("unknown key %q (known: seed, transient, panic, slow, slowfor, crash, hang, hangfor, poison, state)", k)
		}
	}
	if sum := c.Transient + c.Panic + c.Slow; sum > 1+1e-9 {
		return c, bad("transient+panic+slow = %g exceeds 1", sum)
	}
	if sum := c.Crash + c.Hang; sum > 1+1e-9 {
		return c, bad("crash+hang = %g exceeds 1", sum)
	}
	return c, nil
}

// String formats c as a GAPLESS_CHAOS value that Parse reads back to c.
func (c Config) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	parts := []string{
		"seed=" + strconv.FormatUint(c.Seed, 10),
		"transient=" + f(c.Transient),
		"panic=" + f(c.Panic),
		"slow=" + f(c.Slow),
		"slowfor=" + c.SlowFor.String(),
		"crash=" + f(c.Crash),
		"hang=" + f(c.Hang),
	}
	if c.HangFor > 0 {
		parts = append(parts, "hangfor="+c.HangFor.String())
	}
	parts = append(parts, "poison="+strconv.FormatBool(c.Poison))
	if c.StateDir != "" {
		parts = append(parts, "state="+c.StateDir)
	}
	return strings.Join(parts, ",")
}

// Stats counts the faults one Chaos injected (attempts that faulted, not records).
type Stats struct {
	Poison    int64 `json:"poison"`
	Transient int64 `json:"transient"`
	Panics    int64 `json:"panics"`
	Slow      int64 `json:"slow"`
	Crashes   int64 `json:"crashes"` // attempts at crash killers (each one a dead runtime)
	Hangs     int64 `json:"hangs"`   // attempts at hang killers
}

// Total is the sum of every kind.
func (s Stats) Total() int64 {
	return s.Poison + s.Transient + s.Panics + s.Slow + s.Crashes + s.Hangs
}

// Chaos injects faults. It is safe for concurrent use.
type Chaos struct {
	cfg   Config
	sleep func(time.Duration)
	crash func(ctx context.Context, name string)

	mu       sync.Mutex
	attempts map[string]int // without StateDir

	poison, transient, panics, slow, crashes, hangs atomic.Int64
}

// Option configures a Chaos.
type Option func(*Chaos)

// WithSleep replaces time.Sleep for slow calls and hangs (tests).
func WithSleep(fn func(time.Duration)) Option { return func(c *Chaos) { c.sleep = fn } }

// WithCrash replaces what an attempt at a crash killer does. The default writes one line to
// stderr and exits the process with CrashExitCode: the runtime dies mid-record, as on an
// out-of-memory kill, and nothing of the invocation runs after it. A runtime that hosts the
// handler in a process it must keep (the demo's in-process runtime) passes a hook that abandons
// the invocation in ctx instead: its caller must see the invocation end as a crash, nothing of
// it may be recorded afterwards, and the hook should not return before that holds; when it
// returns, the attempt fails with ErrCrash.
func WithCrash(fn func(ctx context.Context, name string)) Option {
	return func(c *Chaos) { c.crash = fn }
}

// exit is the default crash: the process dies mid-record.
func exit(_ context.Context, name string) {
	fmt.Fprintf(os.Stderr, "chaos: crash killer %s: exiting the runtime process (status %d)\n", name, CrashExitCode)
	os.Exit(CrashExitCode)
}

// New returns a Chaos for cfg; with cfg.StateDir it creates the directory.
func New(cfg Config, opts ...Option) (*Chaos, error) {
	if cfg.SlowFor <= 0 {
		cfg.SlowFor = DefaultSlowFor
	}
	if cfg.HangFor <= 0 {
		cfg.HangFor = DefaultSlowFor
	}
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: state=%s: %v", ErrConfig, cfg.StateDir, err)
		}
	}
	c := &Chaos{cfg: cfg, sleep: time.Sleep, crash: exit, attempts: map[string]int{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// FromEnv returns the Chaos configured by GAPLESS_CHAOS, or nil (and no error) when the
// variable is unset or empty.
func FromEnv(getenv func(string) string) (*Chaos, error) {
	v := strings.TrimSpace(getenv(EnvVar))
	if v == "" {
		return nil, nil
	}
	cfg, err := Parse(v)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// BuildTag is the build tag under which the function mains link this package: the local
// harness builds them with it, `sam build` and `make build` do not.
const BuildTag = "gapless_chaos"

// Options returns the options of the public package (github.com/gapless-dev/gapless) that put
// the Chaos configured by GAPLESS_CHAOS around a function's Process and around its batch form
// (WrapRecord and WrapBatch: one Chaos, so both share the attempt counts), or none when the
// variable is unset. The function mains reach it only
// when built with -tags gapless_chaos (their faults_chaos.go), which only the local harness
// does (gapless demo, gapless invoke): a deployed build has no fault injection in it at all.
func Options(getenv func(string) string) ([]gapless.Option, error) {
	c, err := FromEnv(getenv)
	if err != nil || c == nil {
		return nil, err
	}
	// Both forms: with the batch wrapper beside the Process wrapper the default bridge stays
	// batched (SendMessageBatch waves), so the demo runs the default as deployed.
	return []gapless.Option{gapless.WithProcessWrapper(c.WrapRecord), gapless.WithBatchWrapper(c.WrapBatch)}, nil
}

// Config returns the configuration.
func (c *Chaos) Config() Config { return c.cfg }

// Stats returns the faults injected so far by this Chaos (in this process).
func (c *Chaos) Stats() Stats {
	return Stats{Poison: c.poison.Load(), Transient: c.transient.Load(), Panics: c.panics.Load(), Slow: c.slow.Load(),
		Crashes: c.crashes.Load(), Hangs: c.hangs.Load()}
}

// Wrap returns a ProcessFunc that runs Before and then next.
func (c *Chaos) Wrap(next pipeline.ProcessFunc) pipeline.ProcessFunc {
	return func(ctx context.Context, r pipeline.Record) error {
		if err := c.before(ctx, r.ID.String(), r.Data); err != nil {
			return err
		}
		return next(ctx, r)
	}
}

// WrapRecord is Wrap for the public package's Process (what Options installs).
func (c *Chaos) WrapRecord(next gapless.ProcessFunc) gapless.ProcessFunc {
	return func(ctx context.Context, r gapless.Record) error {
		if err := c.before(ctx, r.ID(), r.Data); err != nil {
			return err
		}
		return next(ctx, r)
	}
}

// WrapBatch is WrapRecord for the batch form (what Options installs beside it; the default
// bridge then stays batched). Each record of a wave gets the same per-attempt decision as a
// Process call (Before), the records concurrently, as records of different keys run concurrently
// record by record, so the slow faults of one wave overlap instead of adding up. The records that
// pass go to next in one call, and the outcomes come back in the wave's order.
//
// A fault is its record's alone, as record by record: an injected error fails that record; an
// injected panic fails that record with an error wrapping pipeline.ErrPanic, which is what the
// pipeline makes of a Process that panics (one failed attempt of that record; the pipeline turns
// a panic of the whole batch call into the failure of every record of the wave, a sink bug that
// its own tests cover). A crash killer exits the process mid-wave (WithCrash); a hang killer
// blocks its wave past the deadline margin, so the pipeline abandons the wave and counts an
// attempt for every record of it, after which it sends records with a failed attempt behind them
// in calls of their own (see internal/pipeline's WithBatchSink), and only the killer is parked.
// A next that returns the wrong number of outcomes fails every record (pipeline.ErrSinkOutcomes).
func (c *Chaos) WrapBatch(next gapless.BatchProcessFunc) gapless.BatchProcessFunc {
	return wrapWave(c, next, gapless.Record.ID, func(r gapless.Record) []byte { return r.Data })
}

// WrapSink is WrapBatch for the pipeline's batch form (the demo's in-process runtime).
func (c *Chaos) WrapSink(next pipeline.BatchFunc) pipeline.BatchFunc {
	return wrapWave(c, next, func(r pipeline.Record) string { return r.ID.String() }, func(r pipeline.Record) []byte { return r.Data })
}

// wrapWave is WrapBatch for a record type R named by id with payload data.
func wrapWave[R any](c *Chaos, next func(context.Context, []R) []error, id func(R) string, data func(R) []byte) func(context.Context, []R) []error {
	return func(ctx context.Context, recs []R) []error {
		errs := make([]error, len(recs))
		var wg sync.WaitGroup
		for j, r := range recs {
			wg.Go(func() { errs[j] = c.beforeRecovered(ctx, id(r), data(r)) })
		}
		wg.Wait()
		var pass []R
		var at []int
		for j, err := range errs {
			if err == nil {
				pass = append(pass, recs[j])
				at = append(at, j)
			}
		}
		if len(pass) == 0 {
			return errs
		}
		out := next(ctx, pass)
		if len(out) != len(pass) {
			err := fmt.Errorf("%w: %d outcomes for %d records", pipeline.ErrSinkOutcomes, len(out), len(pass))
			for _, j := range at {
				errs[j] = err
			}
			return errs
		}
		for n, j := range at {
			errs[j] = out[n]
		}
		return errs
	}
}

// beforeRecovered is before with an injected panic turned into the record's error, as the
// pipeline turns a panicking Process into its record's failure.
func (c *Chaos) beforeRecovered(ctx context.Context, id string, data []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("record %s: %w: %v", id, pipeline.ErrPanic, v)
		}
	}()
	return c.before(ctx, id, data)
}

func (c *Chaos) before(ctx context.Context, id string, data []byte) error {
	if err := c.Before(ctx, Name(data, id), data); err != nil {
		return fmt.Errorf("record %s: %w", id, err)
	}
	return nil
}

// Before decides the fate of one attempt at the record called name with payload data: for a
// killer, the crash (see WithCrash) or a block of HangFor that ignores ctx followed by ErrHang;
// otherwise nil to go ahead, ErrPoison, ErrTransient, a panic, or a sleep of SlowFor that
// ignores ctx (as a handler stuck in a call does) followed by ErrSlow. Handlers that are not a
// pipeline.ProcessFunc (the demo's baseline) call it directly before processing a record.
func (c *Chaos) Before(ctx context.Context, name string, data []byte) error {
	switch c.cfg.Killer(name) {
	case CrashKiller:
		c.crashes.Add(1)
		c.recordKiller(name) // before dying: the count survives the process
		c.crash(ctx, name)
		return ErrCrash
	case HangKiller:
		c.hangs.Add(1)
		c.recordKiller(name)
		c.sleep(c.cfg.HangFor)
		return ErrHang
	}
	if c.cfg.Poison && isPoison(data) {
		c.poison.Add(1)
		return ErrPoison
	}
	k := c.attemptsOf(name)
	u := draw(c.cfg.Seed, name, k)
	switch {
	case u < c.cfg.Panic:
		c.bump(name)
		c.panics.Add(1)
		panic(fmt.Sprintf("chaos: injected panic in record %s (fault %d)", name, k+1))
	case u < c.cfg.Panic+c.cfg.Slow:
		c.bump(name)
		c.slow.Add(1)
		c.sleep(c.cfg.SlowFor)
		return ErrSlow
	case u < c.cfg.Panic+c.cfg.Slow+c.cfg.Transient:
		c.bump(name)
		c.transient.Add(1)
		return ErrTransient
	}
	return nil
}

// Name is how chaos names a record: the string "id" field of a JSON object payload, else
// fallback (the record id).
func Name(data []byte, fallback string) string {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &p) != nil {
		return fallback
	}
	var id string
	if json.Unmarshal(p.ID, &id) != nil || id == "" {
		return fallback
	}
	return id
}

func isPoison(data []byte) bool {
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	var p struct {
		Poison bool `json:"poison"`
	}
	return json.Unmarshal(data, &p) == nil && p.Poison
}

// Killer reports whether the record called name is a killer under c, and of which kind: a pure
// function of (Seed, name), independent of the per-attempt draws.
func (c Config) Killer(name string) Kind {
	if c.Crash <= 0 && c.Hang <= 0 {
		return NotKiller
	}
	switch u := draw(c.Seed, killerPrefix+name, 0); {
	case u < c.Crash:
		return CrashKiller
	case u < c.Crash+c.Hang:
		return HangKiller
	}
	return NotKiller
}

// killerPrefix separates the killer draw of a record from its per-attempt draws.
const killerPrefix = "\x00killer\x00"

// killersDir is the subdirectory of StateDir that counts the attempts at killers.
const killersDir = "killers"

// recordKiller appends one attempt at killer name to the state directory, if any.
func (c *Chaos) recordKiller(name string) {
	if c.cfg.StateDir == "" {
		return
	}
	dir := filepath.Join(c.cfg.StateDir, killersDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, filepath.Base(c.stateFile(name))), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return // uncounted, not worth failing for (see bump)
	}
	_, _ = f.Write([]byte{'x'})
	_ = f.Sync() // a crash follows at once
	_ = f.Close()
}

// draw is the uniform [0,1) value of the k-th draw for name: FNV-1a over (seed, name, k)
// finished with splitmix64's mixer, so neighbouring inputs give unrelated outputs.
func draw(seed uint64, name string, k int) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(name))
	binary.LittleEndian.PutUint64(b[:], uint64(k))
	h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

func (c *Chaos) stateFile(name string) string {
	if !safeName.MatchString(name) || name == "." || name == ".." {
		sum := sha256.Sum256([]byte(name))
		name = hex.EncodeToString(sum[:])
	}
	return filepath.Join(c.cfg.StateDir, name)
}

// attemptsOf is k for name: the faults already injected into it (file size with StateDir).
func (c *Chaos) attemptsOf(name string) int {
	if c.cfg.StateDir == "" {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.attempts[name]
	}
	fi, err := os.Stat(c.stateFile(name))
	if err != nil {
		return 0
	}
	return int(fi.Size())
}

// bump records one more fault for name before the fault acts.
func (c *Chaos) bump(name string) {
	if c.cfg.StateDir == "" {
		c.mu.Lock()
		c.attempts[name]++
		c.mu.Unlock()
		return
	}
	f, err := os.OpenFile(c.stateFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		// Unwritable state: the same draw repeats on the next attempt. Demo runs put the state
		// in a directory they created, so this is not expected; it is not worth failing for.
		return
	}
	_, _ = f.Write([]byte{'x'})
	_ = f.Close()
}

// StateStats counts the faults recorded in cfg.StateDir by kind, for a run whose processes
// are gone or out of reach: the k-th fault of a record was its k-th draw, a pure function of
// (seed, name, k), so the kinds follow from the counts. Two processes that drew for the same
// record at the same moment both record draw k, which is then read back as draws k and k+1
// (the total stays exact). Attempts at killers are counted in the killers subdirectory and
// classified by Killer. Records whose names had to be hashed into a file name cannot be
// classified; they are returned as unclassified. Poison failures are never recorded.
func StateStats(cfg Config) (s Stats, unclassified int, err error) {
	if cfg.StateDir == "" {
		return s, 0, fmt.Errorf("%w: no state directory", ErrConfig)
	}
	entries, err := os.ReadDir(cfg.StateDir)
	if err != nil {
		return s, 0, fmt.Errorf("chaos: read state %s: %w", cfg.StateDir, err)
	}
	if killers, err := os.ReadDir(filepath.Join(cfg.StateDir, killersDir)); err == nil {
		for _, e := range killers {
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			name, n := e.Name(), int64(fi.Size())
			switch {
			case !safeName.MatchString(name):
				unclassified += int(n)
			case cfg.Killer(name) == CrashKiller:
				s.Crashes += n
			case cfg.Killer(name) == HangKiller:
				s.Hangs += n
			default:
				unclassified += int(n)
			}
		}
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		name, n := e.Name(), int(fi.Size())
		if !safeName.MatchString(name) {
			unclassified += n
			continue
		}
		for k := range n {
			switch u := draw(cfg.Seed, name, k); {
			case u < cfg.Panic:
				s.Panics++
			case u < cfg.Panic+cfg.Slow:
				s.Slow++
			default:
				s.Transient++
			}
		}
	}
	return s, unclassified, nil
}
