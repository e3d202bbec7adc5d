package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	rdebug "runtime/debug"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"
)

// TestMain runs the simulator on one processor unless GOMAXPROCS says otherwise. A run is
// sequential by construction (one bubble; the scheduler lets one call through at a time and
// waits until every goroutine is blocked again), so a second processor only adds wake-ups of
// an idle processor (futex calls) and cross-processor handoffs: 120 runs took about two thirds
// of the wall time on one processor per process (docs/simulator.md, "Figures"). Unless GOGC
// says otherwise, the collector runs at GOGC=400, as `make sim` sets it: a run's heap is a few
// megabytes, and the default (100) costs about a sixth more time.
func TestMain(m *testing.M) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		rdebug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}

var (
	flagSeeds      = flag.String("sim.seeds", "", "seeds to run: a list (1,2,3) or a first seed and a count (100+50); empty: fresh seeds from the clock")
	flagDuration   = flag.Duration("sim.duration", 0, "run fresh seeds for this long (wall clock)")
	flagMutation   = flag.String("sim.mutation", "", "put a defect back: "+MutationCheckpointDecides+", "+MutationDropMarker+", "+MutationDropLedger+", "+MutationDropHold+", "+MutationCloseBeforeCount+", "+MutationCountOnDirection+", "+MutationHoldQueueOrder+", "+MutationFailureRangeWithoutLanes)
	flagBase       = flag.Uint64("sim.base", 0, "first fresh seed (0: from the clock)")
	flagStride     = flag.Uint64("sim.stride", 1, "fresh seeds are base+offset+i*stride (several processes share one base)")
	flagOffset     = flag.Uint64("sim.offset", 0, "see -sim.stride")
	flagRetention  = flag.Duration("sim.retention", 0, "the short retention of one run in four (default 6m; below the tail rule's 4m finds the uncounted-tail loss)")
	flagVerbose    = flag.Bool("sim.v", false, "print every run's counts")
	flagCensus     = flag.Bool("sim.census", false, "give the reconciler a census of the shards: expired spans proven done are counted ExpiredUnverified")
	flagShrinkTime = flag.Duration("sim.shrinktime", time.Minute, "wall-clock budget for shrinking one failing run")
	flagControl    = flag.Bool("sim.control", false, "with -sim.mutation: the mutation's run shape without the defect (a control)")
	flagShrink     = flag.Int("sim.shrink", 1, "shrink and print the fault schedule of the first N failing runs (others print their violations)")
)

// runOne runs cfg in its own bubble.
func runOne(t *testing.T, cfg Config) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) {
		// The product's random tokens (marker nonces, park ids) come from crypto/rand: make
		// them a function of the seed too.
		cryptotest.SetGlobalRandom(t, cfg.Seed)
		res = Run(cfg)
	})
	return res
}

// shrink removes the faults of a failing run one by one, keeping each removal after which the
// run still fails, and returns the smallest failing configuration found.
func shrink(t *testing.T, cfg Config, res Result) (Config, Result) {
	if cfg.Suppress == nil {
		cfg.Suppress = map[int]bool{}
	}
	deadline := time.Now().Add(*flagShrinkTime)
	// Chunks of faults first (halves, quarters, ...), then single faults: keep every removal
	// after which the run still fails. Ordinals count every fault drawn, applied or not.
	total := len(res.Faults) + len(cfg.Suppress)
	for size := max(1, total/2); ; size /= 2 {
		for lo := 1; lo <= total && time.Now().Before(deadline); lo += size {
			try := cfg
			try.Suppress = map[int]bool{}
			for k := range cfg.Suppress {
				try.Suppress[k] = true
			}
			added := false
			for ord := lo; ord < lo+size; ord++ {
				if !try.Suppress[ord] {
					try.Suppress[ord], added = true, true
				}
			}
			if !added {
				continue
			}
			if r := runOne(t, try); r.Failed() {
				cfg, res = try, r
			}
		}
		if size == 1 {
			break
		}
	}
	return cfg, res
}

func report(t *testing.T, cfg Config, res Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d FAILED (replay: make sim SEEDS=%d%s)\n", res.Seed, res.Seed, mutationArg(cfg))
	for _, v := range res.Violations[:min(len(res.Violations), 10)] {
		fmt.Fprintf(&b, "  invariant: %s\n", v)
	}
	if len(res.Violations) > 10 {
		fmt.Fprintf(&b, "  ... %d violations in all\n", len(res.Violations))
	}
	fmt.Fprintf(&b, "  shape: shards %d records %d keys %d split %v PF %d batch %d retries %d bisect %v attempts %d retention %s hold-key %v batch sink %v (waves of %s)\n",
		cfg.Shards, cfg.Records, cfg.Keys, cfg.Split, cfg.Parallelization, cfg.BatchSize, cfg.MaxRetry, cfg.Bisect, cfg.MaxRecordAttempts, cfg.Retention, cfg.HoldKey, cfg.BatchSink, cfg.SinkWait)
	fmt.Fprintf(&b, "  minimal fault schedule (%d faults; %d removed by shrinking):\n", len(res.Faults), len(cfg.Suppress))
	for _, f := range res.Faults {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	t.Error(b.String())
}

// mutationArg is the replay command's mutation: a control run (-sim.control) names the
// mutation whose shape it runs, and the flag.
func mutationArg(cfg Config) string {
	if *flagControl && *flagMutation != "" {
		return " MUTATION=" + *flagMutation + " SIM_FLAGS=-sim.control"
	}
	if cfg.Mutation == "" {
		return ""
	}
	return " MUTATION=" + cfg.Mutation
}

// summary aggregates runs.
type summary struct {
	runs, failed int
	byInvariant  map[string]int
	counts       map[string]int
	sites        map[string]*SiteStats
	firstFail    map[string]int // invariant -> runs until first seen
	virtual      []time.Duration
}

func newSummary() *summary {
	return &summary{byInvariant: map[string]int{}, counts: map[string]int{}, sites: map[string]*SiteStats{}, firstFail: map[string]int{}}
}

var invariants = []string{"out of order", "applied out of order by a redrive", "applied ahead of its lane", "parked behind a later record", "lost", "verified past an unaccounted record", "parked with a different payload", "loss not counted", "loss counted twice", "verified across the trim horizon", "parked message does not decode"}

// flagOpen names invariants whose breaks are open findings (docs/simulator.md, "Open
// findings"): a fresh-seed run reports them, with their seeds, without failing. `make sim`
// passes -sim.open= so a search fails on every invariant; a run of named seeds always fails.
var flagOpen = flag.String("sim.open", "verified across the trim horizon,applied out of order by a redrive", "comma-separated invariants a fresh-seed run reports without failing (open findings)")

// onlyOpen reports whether every violation of r breaks an open invariant.
func onlyOpen(r Result) bool {
	open := map[string]bool{}
	for _, k := range strings.Split(*flagOpen, ",") {
		if k = strings.TrimSpace(k); k != "" {
			open[k] = true
		}
	}
	for _, v := range r.Violations {
		if !open[invariantOf(v)] {
			return false
		}
	}
	return len(r.Violations) > 0
}

func invariantOf(v string) string {
	for _, k := range invariants {
		if strings.HasPrefix(v, k+":") {
			return k
		}
	}
	return v
}

func (s *summary) add(r Result) {
	s.runs++
	s.virtual = append(s.virtual, r.Virtual)
	if r.Failed() {
		s.failed++
	}
	seen := map[string]bool{}
	for _, v := range r.Violations {
		k := invariantOf(v)
		if !seen[k] {
			seen[k] = true
			s.byInvariant[k]++
			if _, ok := s.firstFail[k]; !ok {
				s.firstFail[k] = s.runs
			}
		}
	}
	for k, n := range r.Counts {
		s.counts[k] += n
	}
	for k, st := range r.Sites {
		a := s.sites[k]
		if a == nil {
			a = &SiteStats{}
			s.sites[k] = a
		}
		a.Calls += st.Calls
		a.Failed += st.Failed
		a.Lost += st.Lost
		a.Died += st.Died
		a.Hung += st.Hung
		a.Partial += st.Partial
	}
}

func (s *summary) print(t *testing.T, wall time.Duration) {
	t.Logf("runs %d, failed %d, %.0f runs/minute (wall %s)", s.runs, s.failed, float64(s.runs)/wall.Minutes(), wall.Round(time.Millisecond))
	if n := len(s.virtual); n > 0 {
		v := slices.Clone(s.virtual)
		slices.Sort(v)
		t.Logf("  time to safety (virtual, production start to every record accounted for): median %s, p99 %s, max %s",
			v[n/2], v[n*99/100], v[n-1])
	}
	for _, inv := range invariants {
		first := ""
		if n, ok := s.firstFail[inv]; ok {
			first = fmt.Sprintf(" (first in run %d)", n)
		}
		t.Logf("  invariant %-40q broken in %d runs%s", inv, s.byInvariant[inv], first)
	}
	for k, n := range s.byInvariant {
		if !slices.Contains(invariants, k) {
			t.Logf("  other failure %q in %d runs", k, n)
		}
	}
	keys := make([]string, 0, len(s.counts))
	for k := range s.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("  records %-50s %d", k, s.counts[k])
	}
	sites := make([]string, 0, len(s.sites))
	for k := range s.sites {
		sites = append(sites, k)
	}
	sort.Strings(sites)
	t.Logf("  %-72s %8s %7s %7s %7s %7s %7s", "call site", "calls", "failed", "lost", "died", "hung", "partial")
	for _, k := range sites {
		st := s.sites[k]
		if st.Failed+st.Lost+st.Died+st.Hung+st.Partial == 0 && !*flagVerbose {
			continue
		}
		t.Logf("  %-72s %8d %7d %7d %7d %7d %7d", k, st.Calls, st.Failed, st.Lost, st.Died, st.Hung, st.Partial)
	}
}

// seeds returns the seeds the flags ask for, or fresh ones from the clock.
func seeds(t *testing.T) (list []uint64, fresh bool) {
	s := *flagSeeds
	if s == "" {
		return nil, true
	}
	if first, n, ok := strings.Cut(s, "+"); ok {
		var a, c uint64
		fmt.Sscan(first, &a)
		fmt.Sscan(n, &c)
		for i := range c {
			list = append(list, a+i)
		}
		return list, false
	}
	for _, f := range strings.Split(s, ",") {
		var a uint64
		if _, err := fmt.Sscan(f, &a); err != nil {
			t.Fatalf("-sim.seeds %q: %v", s, err)
		}
		list = append(list, a)
	}
	return list, false
}

// TestSim runs whole-system simulations: the given seeds, or fresh seeds for -sim.duration
// (default 20 s, the CI budget). A failing seed is shrunk and printed with its fault schedule.
func TestSim(t *testing.T) {
	if *flagRetention > 0 {
		ShortRetention = *flagRetention
	}
	Census = *flagCensus
	list, fresh := seeds(t)
	budget := *flagDuration
	if budget == 0 {
		budget = 20 * time.Second
		if testing.Short() {
			budget = 5 * time.Second
		}
	}
	sum := newSummary()
	start := time.Now()
	next := *flagBase
	if next == 0 {
		next = uint64(start.UnixNano())
	}
	if fresh {
		// Printed, not logged: CI shows the seeds of a passing run too.
		fmt.Printf("sim[%d]: fresh seeds %d+%d+i*%d for %s\n", *flagOffset, next, *flagOffset, *flagStride, budget)
	}
	lastLine := start
	var failed []failure
	for i := 0; ; i++ {
		var seed uint64
		if fresh {
			if time.Since(start) > budget {
				break
			}
			seed = next + *flagOffset + uint64(i)*(*flagStride)
		} else {
			if i == len(list) {
				break
			}
			seed = list[i]
		}
		cfg := WithMutation(Defaults(seed), *flagMutation)
		if *flagControl {
			cfg.Mutation = ""
		}
		res := runOne(t, cfg)
		sum.add(res)
		if *flagVerbose {
			t.Logf("seed %d: %v virtual %s grants %d trace %x", seed, res.Counts, res.Virtual, res.Grants, res.Trace)
		}
		switch {
		case fresh && onlyOpen(res):
			t.Logf("seed %d breaks an open finding (replay: make sim SEEDS=%d%s): %s", seed, seed, mutationArg(cfg), res.Violations[0])
		case res.Failed() && sum.failed <= *flagShrink:
			failed = append(failed, failure{cfg, res}) // shrunk after the budget
		case res.Failed() && sum.failed <= 20:
			t.Errorf("seed %d FAILED (replay: make sim SEEDS=%d%s): %s", seed, seed, mutationArg(cfg), res.Violations[0])
			if *flagVerbose {
				report(t, cfg, res)
			}
		}
		if time.Since(lastLine) > 5*time.Second {
			lastLine = time.Now()
			fmt.Printf("sim[%d]: %d runs, %d failed, %.0f runs/minute\n", *flagOffset, sum.runs, sum.failed, float64(sum.runs)/time.Since(start).Minutes())
		}
	}
	sum.print(t, time.Since(start))
	for _, f := range failed {
		c, r := shrink(t, f.cfg, f.res)
		report(t, c, r)
	}
}

type failure struct {
	cfg Config
	res Result
}

// TestSimReplaysExactly: a seed is a replay. Two runs of one seed make the same calls in the
// same order (the grant trace), draw the same faults and end in the same counts.
func TestSimReplaysExactly(t *testing.T) {
	for _, seed := range []uint64{3, 28} {
		cfg := Defaults(seed)
		a, b := runOne(t, cfg), runOne(t, cfg)
		if a.Grants != b.Grants || a.Trace != b.Trace {
			t.Errorf("seed %d: grant trace %d/%x, then %d/%x", seed, a.Grants, a.Trace, b.Grants, b.Trace)
		}
		if !slices.Equal(a.Faults, b.Faults) {
			t.Errorf("seed %d: fault schedules differ (%d and %d faults)", seed, len(a.Faults), len(b.Faults))
		}
		if fmt.Sprint(a.Counts) != fmt.Sprint(b.Counts) || fmt.Sprint(a.Violations) != fmt.Sprint(b.Violations) {
			t.Errorf("seed %d: outcomes differ:\n%v\n%v", seed, a.Counts, b.Counts)
		}
		if len(a.Faults) == 0 {
			t.Errorf("seed %d drew no faults: the replay proves nothing", seed)
		}
	}
}

// TestSimFindsMutations: with a known defect put back, the simulator reports the invariant the
// defect breaks within a few runs of fixed seeds. A run counts as finding the defect only if
// the same run without it (same seed, same shape) does not break that invariant: the shape of a
// mutation's runs (WithMutation) must not break it by itself.
func TestSimFindsMutations(t *testing.T) {
	for _, tc := range []struct {
		mutation  string
		invariant []string // any of these
		detail    string   // the violation must contain it ("" any)
		budget    int
	}{
		// The seed report's consumer skips a batch when it loses the checkpoint race; gapless's
		// reconciler has no mirror to verify behind, so records are trimmed unseen and uncounted
		// (with the watermark behind them, or past them).
		{MutationCheckpointDecides, []string{"loss not counted", "verified across the trim horizon"}, "", 20},
		// Without in-flight markers no death is ever counted: a killer record is never parked.
		{MutationDropMarker, []string{"lost"}, "", 20},
		// Without key holds a parked record holds nothing: later records of its key are applied.
		{MutationDropHold, []string{"out of order"}, "", 20},
		// A closed shard marked final before its expired span is counted: a pass that dies
		// between the two writes leaves the span uncounted for good (the shard is never read
		// again).
		{MutationCloseBeforeCount, []string{"loss not counted"}, "closed true", 80},
		// A span counted whenever the watermark moves forward: the failure-queue replay and the
		// scheduled pass that both find it both count it.
		{MutationCountOnDirection, []string{"loss counted twice"}, "", 40},
		// The hold walk in the order the redrive session received the messages (a standard queue
		// keeps none): a later record of a held key is applied before its head.
		{MutationHoldQueueOrder, []string{"out of order", "applied out of order by a redrive"}, "", 150},
		// A failure-queue range replayed in every lane: a later record of a key in another lane's
		// range is applied while that lane, behind, still holds an earlier one.
		{MutationFailureRangeWithoutLanes, []string{"applied ahead of its lane"}, "", 100},
	} {
		t.Run(tc.mutation, func(t *testing.T) {
			breaks := func(res Result) string {
				for _, v := range res.Violations {
					if slices.Contains(tc.invariant, invariantOf(v)) && strings.Contains(v, tc.detail) {
						return v
					}
				}
				return ""
			}
			for i := range tc.budget {
				cfg := WithMutation(Defaults(uint64(1000+i)), tc.mutation)
				v := breaks(runOne(t, cfg))
				if v == "" {
					continue
				}
				control := cfg
				control.Mutation = ""
				if c := breaks(runOne(t, control)); c != "" {
					t.Logf("run %d (seed %d) breaks %q without the mutation too: not counted (%s)", i+1, cfg.Seed, invariantOf(c), c[:min(len(c), 200)])
					continue
				}
				t.Logf("found %q in run %d (seed %d): %s", invariantOf(v), i+1, cfg.Seed, v[:min(len(v), 200)])
				return
			}
			t.Errorf("%s: none of the invariants %q reported within %d runs", tc.mutation, tc.invariant, tc.budget)
		})
	}
}

// TestVerifiedAcrossTheTrimHorizon replays the seeds of a finding (docs/simulator.md, "Found,
// and what became of it"): the reconciler's GetRecords read an iterator the trim horizon had
// passed since it was issued, Kinesis read on from the horizon, and the walk moved the
// watermark past a record that expired unseen, uncounted. The finding is open (the path has
// no guard yet); the finder's seed no longer reaches it on today's schedule, and must pass.
func TestVerifiedAcrossTheTrimHorizon(t *testing.T) {
	for _, seed := range acrossTheTrimHorizonSeeds {
		res := runOne(t, Defaults(seed))
		if res.Failed() {
			t.Errorf("seed %d: %v", seed, res.Violations)
		}
	}
}

// acrossTheTrimHorizonSeeds: the finder's seed (the product at the time; today's schedule no
// longer crosses the horizon there).
var acrossTheTrimHorizonSeeds = []uint64{1796141536815851704}

// TestRedriveUnconfirmedTake replays the seeds of an open finding (docs/simulator.md, "Open
// findings"): a redrive session's ledger read fails (every SDK attempt) while it decides whether
// a parked record of a held key takes part in the key's walk; the record is then redriven at
// once, outside the walk, its second ledger read succeeds, and it is applied while an earlier
// record of its key is still parked. Seed 300849 is a default run; the others run the
// hold-queue-order mutation's shape (hold-key, redrive sessions) without the mutation.
func TestRedriveUnconfirmedTake(t *testing.T) {
	t.Skip(`open finding, "applied out of order by a redrive": the fix belongs in reconcile's hold walk (heldSession.take)`)
	for _, tc := range []struct {
		seed  uint64
		shape string // WithMutation's shape, the mutation taken out ("": Defaults)
	}{
		{300849, ""},
		{100076, MutationHoldQueueOrder},
		{100231, MutationHoldQueueOrder},
	} {
		cfg := WithMutation(Defaults(tc.seed), tc.shape)
		cfg.Mutation = ""
		if res := runOne(t, cfg); res.Failed() {
			t.Errorf("seed %d (shape %q): %v", tc.seed, tc.shape, res.Violations)
		}
	}
}
