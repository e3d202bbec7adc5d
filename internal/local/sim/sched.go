package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/aws/smithy-go"
)

// The scheduler runs inside a synctest bubble: time is virtual and moves only when every
// goroutine of the run is blocked. Every call an actor makes to a service model first waits at
// a gate; the scheduler lets exactly one waiting call through at a time, chosen by the run's
// seed among the waiting calls sorted by a stable key, so the interleaving of actors is a
// function of the seed. Faults are drawn from a second seeded stream when a call passes its
// gate.

// sdkAttempts is the AWS SDK's standard retryer's attempt count (aws/retry: DefaultMaxAttempts
// 3): a throttle, a 5xx or a connection error is retried twice before the caller sees it.
const sdkAttempts = 3

// errDied is what every call of a dead sandbox returns: nothing it does after its death
// reaches a model.
var errDied = errors.New("sim: the sandbox died (process exited)")

// errResponseLost is the error a caller sees when its request was applied but the response
// never arrived (a connection reset or timeout after the write).
var errResponseLost = errors.New("sim: connection reset after the request was sent (response lost)")

// Faults are per-call probabilities, drawn from the run's seed.
type Faults struct {
	Fail    float64 // an attempt fails before it is applied (5xx or throttle)
	Lost    float64 // a write attempt is applied and its response lost
	Die     float64 // a sandbox dies before a call (consumer, reconciler, failure handler)
	Hang    float64 // a sandbox stops making progress at a call until its function timeout, then is ended
	Partial float64 // an item of a batch call comes back unprocessed
	Process float64 // the business logic fails a record (half of them after its effect)
	NoDest  float64 // the mapping's on-failure message is not delivered
}

type actorKey struct{}

type actor struct {
	name   string
	faulty bool // faults apply to its calls
	mortal bool // it can die
	dead   bool
	cancel context.CancelFunc
	done   <-chan struct{} // the invocation's end (its function timeout): where a hang stops
	calls  map[string]int  // gate calls by site and detail
	kind   string          // consumer, reconciler, failure, mapping, producer
	// late: its faults are drawn from a stream of their own (Sched.lr) and go on after the
	// other actors' faults end (the operator's redrive sessions start after production's
	// faults; drawing them apart left every other draw of a seed as it was).
	late bool
}

func withActor(ctx context.Context, a *actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actorOf(ctx context.Context) *actor {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		panic("sim: a model call without an actor")
	}
	return a
}

type waiter struct {
	key string
	ch  chan struct{}
}

// SiteStats counts what happened at one call site (operation and product function).
type SiteStats struct {
	Calls, Failed, Lost, Died, Hung, Partial int
}

// Sched is one run's scheduler and fault source.
type Sched struct {
	mu       sync.Mutex
	pending  []*waiter
	wake     chan struct{}
	pick     *rand.Rand
	fr       *rand.Rand
	hr       *rand.Rand // hangs: a stream of their own, so that adding them left the other faults' draws as they were
	lr       *rand.Rand // every fault of a late actor (the operator's redrive)
	faults   Faults
	chaos    bool
	ord      int          // faults drawn so far
	suppress map[int]bool // fault ordinals not applied (shrinking)
	Log      []string     // the faults applied, in order
	Sites    map[string]*SiteStats
	grants   int
	trace    uint64 // a hash of the grant order, to prove replay
}

func newSched(seed uint64, f Faults, suppress map[int]bool) *Sched {
	return &Sched{wake: make(chan struct{}, 1), pick: rand.New(rand.NewPCG(seed, 1)), fr: rand.New(rand.NewPCG(seed, 2)), hr: rand.New(rand.NewPCG(seed, 7)), lr: rand.New(rand.NewPCG(seed, 9)),
		faults: f, chaos: true, suppress: suppress, Sites: map[string]*SiteStats{}}
}

func (s *Sched) site(name string) *SiteStats {
	st := s.Sites[name]
	if st == nil {
		st = &SiteStats{}
		s.Sites[name] = st
	}
	return st
}

// gate blocks until the scheduler lets the call through. A call of a dead actor fails at once;
// a mortal actor may die here.
func (s *Sched) gate(ctx context.Context, site, detail string) error {
	a := actorOf(ctx)
	s.mu.Lock()
	if a.dead {
		s.mu.Unlock()
		return errDied
	}
	// The key names the call by what it is, not by when its goroutine got here: goroutines
	// woken at one virtual instant reach their gates in any order.
	if a.calls == nil {
		a.calls = map[string]int{}
	}
	k := site + "|" + detail
	n := a.calls[k]
	a.calls[k] = n + 1
	w := &waiter{key: a.name + "|" + k + "|" + strconv.Itoa(n), ch: make(chan struct{})}
	// pending is kept sorted by key (keys are unique: an actor's name and its call's
	// occurrence), so the loop picks without sorting.
	i, _ := slices.BinarySearchFunc(s.pending, w.key, func(p *waiter, k string) int { return strings.Compare(p.key, k) })
	s.pending = slices.Insert(s.pending, i, w)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-w.ch
	s.mu.Lock()
	defer s.mu.Unlock()
	s.site(site).Calls++
	if a.mortal && s.on(a) && s.rng(a, s.fr).Float64() < s.faults.Die {
		if s.apply(fmt.Sprintf("%s dies before %s", a.name, site)) {
			a.dead = true
			a.cancel()
			s.site(site).Died++
			return errDied
		}
	}
	if a.mortal && a.done != nil && s.on(a) && s.rng(a, s.hr).Float64() < s.faults.Hang {
		if s.apply(fmt.Sprintf("%s hangs before %s", a.name, site)) {
			// The call makes no progress until the invocation's timeout; Lambda then ends the
			// runtime ("Task timed out"), so the sandbox is gone as after a death.
			s.site(site).Hung++
			s.mu.Unlock()
			<-a.done
			s.mu.Lock()
			a.dead = true
			a.cancel()
			return errDied
		}
	}
	return ctx.Err()
}

// isDead reports whether a's sandbox died. A hang ends in gate after the invocation's context is
// done, on a goroutine the invocation may have left running, so a.dead is read under s.mu.
func (s *Sched) isDead(a *actor) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.dead
}

// kill ends a sandbox now (a crash the record itself causes, not a drawn fault).
func (s *Sched) kill(a *actor, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.dead {
		return
	}
	a.dead = true
	a.cancel()
	s.Log = append(s.Log, fmt.Sprintf("t=%s %s dies: %s", time.Now().UTC().Format("15:04:05.000"), a.name, why))
}

// on reports whether a's calls draw faults now.
func (s *Sched) on(a *actor) bool { return s.chaos || a.late }

// rng is the stream a's faults are drawn from: r, or the late actors' own.
func (s *Sched) rng(a *actor, r *rand.Rand) *rand.Rand {
	if a.late {
		return s.lr
	}
	return r
}

// apply numbers a drawn fault and reports whether it is applied (not suppressed by shrinking).
func (s *Sched) apply(what string) bool {
	s.ord++
	if s.suppress[s.ord] {
		return false
	}
	s.Log = append(s.Log, fmt.Sprintf("#%d t=%s %s", s.ord, time.Now().UTC().Format("15:04:05.000"), what))
	return true
}

type fault int

const (
	faultNone fault = iota
	faultFail
	faultLost
)

// draw picks the fault of one attempt.
func (s *Sched) draw(ctx context.Context, site string, write bool) fault {
	a := actorOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.rng(a, s.fr).Float64()
	if !a.faulty || !s.on(a) {
		return faultNone
	}
	switch {
	case x < s.faults.Fail:
		if s.apply(fmt.Sprintf("%s: %s fails (5xx/throttle)", a.name, site)) {
			s.site(site).Failed++
			return faultFail
		}
	case write && x < s.faults.Fail+s.faults.Lost:
		if s.apply(fmt.Sprintf("%s: %s applied, response lost", a.name, site)) {
			s.site(site).Lost++
			return faultLost
		}
	}
	return faultNone
}

// partial reports whether item i of a batch call comes back unprocessed.
func (s *Sched) partial(ctx context.Context, site string) bool {
	a := actorOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.rng(a, s.fr).Float64()
	if !a.faulty || !s.on(a) || x >= s.faults.Partial {
		return false
	}
	if s.apply(fmt.Sprintf("%s: %s item unprocessed", a.name, site)) {
		s.site(site).Partial++
		return true
	}
	return false
}

// chance draws a seeded event outside the call path (the business logic, the destination).
func (s *Sched) chance(p float64, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.fr.Float64()
	return s.chaos && x < p && s.apply(what)
}

// chanceOf is chance for an event of a's (its business logic).
func (s *Sched) chanceOf(a *actor, p float64, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.rng(a, s.fr).Float64()
	return s.on(a) && x < p && s.apply(what)
}

// calm ends the chaos: no more faults or deaths.
func (s *Sched) calm() {
	s.mu.Lock()
	s.chaos = false
	s.mu.Unlock()
}

// loop grants waiting calls until stop reports true at a moment nothing is waiting. It must
// run in the bubble's root goroutine.
func (s *Sched) loop(stop func() bool) {
	const tick = time.Second
	for {
		synctest.Wait()
		s.mu.Lock()
		if n := len(s.pending); n > 0 {
			i := s.pick.IntN(n)
			w := s.pending[i]
			s.pending = slices.Delete(s.pending, i, i+1)
			s.grants++
			for _, c := range w.key {
				s.trace = s.trace*1099511628211 + uint64(c)
			}
			s.mu.Unlock()
			close(w.ch)
			continue
		}
		s.mu.Unlock()
		if stop() {
			return
		}
		select {
		case <-s.wake:
		case <-time.After(tick):
		}
	}
}

// call makes one SDK call through the fault layer: each attempt waits at the gate and may fail
// before it is applied or be applied with its response lost; like the SDK's retryer, a failed
// attempt is retried (after a backoff) up to sdkAttempts, and the caller sees the last error.
//
// site names the product function making the call; "" reads it from the stack (callerSite).
func call[T any](ctx context.Context, s *Sched, site, op, detail string, write bool, f func() (T, error)) (T, error) {
	if site == "" {
		site = callerSite()
	}
	site = op + " " + site
	var zero T
	var last error
	for attempt := range sdkAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(25<<attempt) * time.Millisecond)
		}
		if err := s.gate(ctx, site, detail); err != nil {
			return zero, err
		}
		switch s.draw(ctx, site, write) {
		case faultNone:
			return f()
		case faultFail:
			last = &smithy.OperationError{ServiceID: strings.Fields(op)[0], OperationName: op,
				Err: &smithy.GenericAPIError{Code: "InternalServerError", Message: "sim: injected 5xx", Fault: smithy.FaultServer}}
		case faultLost:
			_, _ = f()
			last = &smithy.OperationError{ServiceID: strings.Fields(op)[0], OperationName: op, Err: errResponseLost}
		}
	}
	return zero, last
}

var siteCache sync.Map // pc -> site name, "" (not a product function) or mappingFrame

// mappingFrame marks a frame of the event-source mapping (internal/local/esm): no product
// function is ever further up a stack that reaches it (the mapping's goroutines start in the
// simulator, and it calls the consumer, not the other way round), so the search stops there.
// The mapping's polls are most of a run's calls.
const mappingFrame = "\x00mapping"

// callerSite names the first product function on the stack (outside this package and the SDK
// adapters), e.g. "dedupe.(*Ledger).Mark", or "?" (the mapping's calls, the simulator's own).
func callerSite() string {
	// The product function is nearly always the frame above the client method (or above a
	// mutation's wrapper): unwinding a few frames first is cheaper than twelve every call.
	var few [4]uintptr
	n := runtime.Callers(3, few[:])
	if site, stop := siteOf(few[:n]); site != "" || stop || n < len(few) {
		return cmp.Or(site, "?")
	}
	var pcs [12]uintptr
	site, _ := siteOf(pcs[:runtime.Callers(3, pcs[:])])
	return cmp.Or(site, "?")
}

// siteOf names the first product function among pcs ("" if none); stop reports that the
// search reached the mapping's code, above which no product function is.
func siteOf(pcs []uintptr) (site string, stop bool) {
	for _, pc := range pcs {
		v, ok := siteCache.Load(pc)
		if !ok {
			name := ""
			if fn := runtime.FuncForPC(pc - 1); fn != nil {
				full := fn.Name()
				switch {
				case strings.HasPrefix(full, "github.com/gapless-dev/gapless/internal/local/esm."):
					name = mappingFrame
				case strings.HasPrefix(full, "github.com/gapless-dev/gapless/") && !strings.Contains(full, "/internal/local/"):
					name = full[strings.LastIndex(full, "/")+1:]
				}
			}
			siteCache.Store(pc, name)
			v = name
		}
		switch name := v.(string); name {
		case "":
		case mappingFrame:
			return "", true
		default:
			return name, false
		}
	}
	return "", false
}
