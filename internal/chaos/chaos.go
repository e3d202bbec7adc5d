// Package chaos injects seeded faults into the function's record processing, for the demo and
// end-to-end tests: transient errors, panics, calls slower than the function timeout (the
// invocation times out) and, for records whose payload says "poison": true, a permanent error.
//
// It is configured by one environment variable, GAPLESS_CHAOS, and is off when the variable is
// absent; template.yaml never sets it. Example:
//
//	GAPLESS_CHAOS="seed=42,transient=0.03,panic=0.005,slow=0.002,slowfor=20s"
//
// Keys (comma-separated key=value, any order, each at most once):
//
//	seed       uint64, default 1: the seed of every draw
//	transient  probability 0..1 that an attempt fails with ErrTransient
//	panic      probability 0..1 that an attempt panics
//	slow       probability 0..1 that an attempt sleeps slowfor, ignoring its context, so the
//	           invocation runs past the function timeout (then it fails with ErrSlow)
//	slowfor    Go duration, default 20s
//	poison     true|false, default true: payloads with "poison": true fail with ErrPoison
//	state      directory shared by every process of a run that keeps the attempt counts, so a
//	           timed-out (killed) runtime does not forget them; default: in memory
//
// The three rates are one draw: their sum must not exceed 1.
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
// Process with it only when GAPLESS_CHAOS is set (see WrapFromEnv).
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
)

// Config is a parsed GAPLESS_CHAOS value.
type Config struct {
	Seed      uint64
	Transient float64
	Panic     float64
	Slow      float64
	SlowFor   time.Duration
	Poison    bool
	StateDir  string
}

// DefaultConfig is what an empty value means: seed 1, no random faults, poison on.
func DefaultConfig() Config { return Config{Seed: 1, SlowFor: DefaultSlowFor, Poison: true} }

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
		case "transient", "panic", "slow":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return c, bad("%s=%q is not a probability from 0 to 1", k, v)
			}
			switch k {
			case "transient":
				c.Transient = f
			case "panic":
				c.Panic = f
			default:
				c.Slow = f
			}
		case "slowfor":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, bad("slowfor=%q is not a positive duration like 20s", v)
			}
			c.SlowFor = d
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
			return c, bad("unknown key %q (known: seed, transient, panic, slow, slowfor, poison, state)", k)
		}
	}
	if sum := c.Transient + c.Panic + c.Slow; sum > 1+1e-9 {
		return c, bad("transient+panic+slow = %g exceeds 1", sum)
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
		"poison=" + strconv.FormatBool(c.Poison),
	}
	if c.StateDir != "" {
		parts = append(parts, "state="+c.StateDir)
	}
	return strings.Join(parts, ",")
}

// Stats counts the faults one Chaos injected.
type Stats struct {
	Poison    int64 `json:"poison"`
	Transient int64 `json:"transient"`
	Panics    int64 `json:"panics"`
	Slow      int64 `json:"slow"`
}

// Total is the sum of every kind.
func (s Stats) Total() int64 { return s.Poison + s.Transient + s.Panics + s.Slow }

// Chaos injects faults. It is safe for concurrent use.
type Chaos struct {
	cfg   Config
	sleep func(time.Duration)

	mu       sync.Mutex
	attempts map[string]int // without StateDir

	poison, transient, panics, slow atomic.Int64
}

// Option configures a Chaos.
type Option func(*Chaos)

// WithSleep replaces time.Sleep for slow calls (tests).
func WithSleep(fn func(time.Duration)) Option { return func(c *Chaos) { c.sleep = fn } }

// New returns a Chaos for cfg; with cfg.StateDir it creates the directory.
func New(cfg Config, opts ...Option) (*Chaos, error) {
	if cfg.SlowFor <= 0 {
		cfg.SlowFor = DefaultSlowFor
	}
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
			return nil, fmt.Errorf("%w: state=%s: %v", ErrConfig, cfg.StateDir, err)
		}
	}
	c := &Chaos{cfg: cfg, sleep: time.Sleep, attempts: map[string]int{}}
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

// WrapFromEnv wraps process with the Chaos configured by GAPLESS_CHAOS, and returns process
// unchanged when the variable is unset. The function mains call it on their Process:
//
//	proc, err := chaos.WrapFromEnv(os.Getenv, process.New(sqsClient, cfg.TargetQueueURL))
func WrapFromEnv(getenv func(string) string, process pipeline.ProcessFunc) (pipeline.ProcessFunc, error) {
	c, err := FromEnv(getenv)
	if err != nil || c == nil {
		return process, err
	}
	return c.Wrap(process), nil
}

// Config returns the configuration.
func (c *Chaos) Config() Config { return c.cfg }

// Stats returns the faults injected so far by this Chaos (in this process).
func (c *Chaos) Stats() Stats {
	return Stats{Poison: c.poison.Load(), Transient: c.transient.Load(), Panics: c.panics.Load(), Slow: c.slow.Load()}
}

// Wrap returns a ProcessFunc that runs Before and then next.
func (c *Chaos) Wrap(next pipeline.ProcessFunc) pipeline.ProcessFunc {
	return func(ctx context.Context, r pipeline.Record) error {
		if err := c.Before(ctx, Name(r.Data, r.ID.String()), r.Data); err != nil {
			return fmt.Errorf("record %s: %w", r.ID, err)
		}
		return next(ctx, r)
	}
}

// Before decides the fate of one attempt at the record called name with payload data: nil to
// go ahead, ErrPoison, ErrTransient, a panic, or a sleep of SlowFor that ignores ctx (as a
// handler stuck in a call does) followed by ErrSlow. Handlers that are not a pipeline.ProcessFunc
// (the demo's baseline) call it directly before processing a record.
func (c *Chaos) Before(_ context.Context, name string, data []byte) error {
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
// (the total stays exact). Records whose names had to be hashed into a file name cannot be
// classified; they are returned as unclassified. Poison failures are never recorded.
func StateStats(cfg Config) (s Stats, unclassified int, err error) {
	if cfg.StateDir == "" {
		return s, 0, fmt.Errorf("%w: no state directory", ErrConfig)
	}
	entries, err := os.ReadDir(cfg.StateDir)
	if err != nil {
		return s, 0, fmt.Errorf("chaos: read state %s: %w", cfg.StateDir, err)
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
