package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
)

// Case is one configuration of the matrix.
type Case struct {
	Handler   string
	BatchSize int
	PF        int // ParallelizationFactor: concurrent batches on the shard, one per lane
}

func (c Case) String() string { return fmt.Sprintf("%s/batch=%d/pf=%d", c.Handler, c.BatchSize, c.PF) }

// Limits bound the work spent on one case.
type Limits struct {
	// Budget: stop starting rounds once this much handler time has been measured...
	Budget time.Duration
	// ...and at least MinBatches batches ran; never more than MaxRecords records or MaxTime of
	// handler time, but always at least one round of PF batches.
	MinBatches int
	MaxRecords int
	MaxTime    time.Duration
	// InvokeTimeout is the deadline each invocation gets, like a function timeout.
	InvokeTimeout time.Duration
}

// CaseResult is what one case measured. Per-batch and per-record figures are means.
type CaseResult struct {
	Case
	Batches int `json:"batches"`
	Records int `json:"records"`
	// FailedBatches answered with a batch item failure or an error (expected 0).
	FailedBatches int     `json:"failed_batches"`
	Seconds       float64 `json:"seconds"` // handler wall time, summed over rounds
	RecordsPerSec float64 `json:"records_per_sec"`
	P50Ms         float64 `json:"p50_batch_ms"`
	P99Ms         float64 `json:"p99_batch_ms"`
	// CPU of this process (getrusage user+system) per record: decoding, Process, the handler and
	// the SDK's client side; the emulators run in other processes and are not counted.
	CPUMicrosPerRecord float64 `json:"cpu_us_per_record"`
	// Heap allocations per record (runtime.MemStats deltas over the rounds).
	AllocsPerRecord     float64 `json:"allocs_per_record"`
	AllocBytesPerRecord float64 `json:"alloc_bytes_per_record"`
	// DynamoDB, from internal/local/ddbmeter: logical calls and HTTP attempts per batch, calls per
	// operation per batch, and capacity units per record computed from item sizes.
	DDBCallsPerBatch    float64 `json:"ddb_calls_per_batch"`
	DDBAttemptsPerBatch float64 `json:"ddb_round_trips_per_batch"`
	// CriticalPathRoundTrips: DynamoDB calls made one after another (the longest chain of
	// non-overlapping calls) per batch; calls made in parallel count once. Measured on
	// pathProbes extra batches of the case's size, run after its rounds with every call held to
	// pathFloor (critpath.go), median; the probes are not in any other figure.
	CriticalPathRoundTrips float64            `json:"critical_path_round_trips"`
	DDBOpsPerBatch         map[string]float64 `json:"ddb_ops_per_batch,omitempty"`
	WriteUnitsPerRecord    float64            `json:"wcu_per_record"`
	ReadUnitsPerRecord     float64            `json:"rcu_per_record"`
	WriteBytesPerRecord    float64            `json:"write_bytes_per_record"`
	// SQS (SQSMeter): HTTP requests per record (retries included), requests as billed (one per
	// started 64 KB of payload per request) and messages sent per record.
	SQSRequestsPerRecord       float64 `json:"sqs_requests_per_record"`
	SQSBilledRequestsPerRecord float64 `json:"sqs_billed_requests_per_record"`
	SQSMessagesPerRecord       float64 `json:"sqs_messages_per_record"`
	// List-price cost per million records (SQSPerMillionRequests, DDBPerMillionWRU/RRU).
	SQSUSDPerMillionRecords float64 `json:"sqs_usd_per_million_records"`
	DDBUSDPerMillionRecords float64 `json:"ddb_usd_per_million_records"`
	USDPerMillionRecords    float64 `json:"usd_per_million_records"`
}

// Runner runs cases on fresh synthetic shards.
type Runner struct {
	subjects map[string]*Subject
	limits   Limits
	stream   string
	next     int // shard counter: every case gets its own shard
	arrival  time.Time
}

// NewRunner returns a runner over the given handlers.
func NewRunner(subjects []*Subject, stream string, l Limits) *Runner {
	m := make(map[string]*Subject, len(subjects))
	for _, s := range subjects {
		m[s.Name] = s
	}
	if l.InvokeTimeout <= 0 {
		l.InvokeTimeout = 5 * time.Minute
	}
	return &Runner{subjects: m, limits: l, stream: stream, arrival: time.Now().Add(-time.Hour)}
}

func (r *Runner) workload() Workload {
	r.next++
	return Workload{Stream: r.stream, ShardID: fmt.Sprintf("shardId-%012d", r.next), Arrival: r.arrival}
}

// Warm invokes every handler once on a small batch of its own shard, so connections and lazy
// initialisation are not charged to the first case.
func (r *Runner) Warm(ctx context.Context) error {
	for _, name := range Handlers {
		s, ok := r.subjects[name]
		if !ok {
			continue
		}
		raw, err := r.workload().Payload(0, 1, 0, 10)
		if err != nil {
			return err
		}
		if err := r.invoke(ctx, s, raw, nil); err != nil {
			return fmt.Errorf("bench: warm %s: %w", name, err)
		}
	}
	return nil
}

func (r *Runner) invoke(ctx context.Context, s *Subject, raw []byte, path *callLog) error {
	ctx, cancel := context.WithTimeout(ctx, r.limits.InvokeTimeout)
	defer cancel()
	if path != nil {
		ctx = withCallLog(ctx, path)
	}
	resp, err := s.Invoke(ctx, raw)
	if err != nil {
		return err
	}
	if len(resp.BatchItemFailures) > 0 {
		return fmt.Errorf("batch failed from %s", resp.BatchItemFailures[0].ItemIdentifier)
	}
	return nil
}

// errNoHandler: the case names a handler the runner was not given.
var errNoHandler = errors.New("bench: handler not configured")

// Run measures one case on its own.
func (r *Runner) Run(ctx context.Context, c Case) (CaseResult, error) {
	res, err := r.RunTogether(ctx, []Case{c})
	if len(res) == 0 {
		return CaseResult{}, err
	}
	return res[0], err
}

// RunTogether measures several cases with their rounds interleaved (one round of each case in
// turn until each is done), so that cases compared with each other run under the same machine
// load; on a shared machine, load drifts over seconds and would otherwise land on one handler.
func (r *Runner) RunTogether(ctx context.Context, cases []Case) ([]CaseResult, error) {
	runs := make([]*caseRun, len(cases))
	for i, c := range cases {
		s, ok := r.subjects[c.Handler]
		if !ok {
			return nil, fmt.Errorf("%w: %s", errNoHandler, c.Handler)
		}
		if c.BatchSize < 1 || c.PF < 1 {
			return nil, fmt.Errorf("bench: case %s: batch size and PF must be positive", c)
		}
		runs[i] = &caseRun{r: r, s: s, w: r.workload(), res: CaseResult{Case: c}, before: s.Meter.Snapshot(), sqs0: s.SQS.Snapshot()}
	}
	for active := len(runs); active > 0; {
		active = 0
		for _, cr := range runs {
			if cr.done {
				continue
			}
			if err := cr.round(ctx); err != nil {
				return nil, fmt.Errorf("bench: %s: %w", cr.res.Case, err)
			}
			if !cr.done {
				active++
			}
		}
	}
	out := make([]CaseResult, len(runs))
	for i, cr := range runs {
		out[i] = cr.result()
		path, err := cr.probePath(ctx)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: critical path: %w", cr.res.Case, err)
		}
		out[i].CriticalPathRoundTrips = path
	}
	return out, nil
}

// probePath runs pathProbes batches of the case's size one at a time, every DynamoDB call held
// to pathFloor, and returns the median critical path (critpath.go). It runs after result, so
// no other figure of the case includes the probes.
func (cr *caseRun) probePath(ctx context.Context) (float64, error) {
	paths := make([]int, pathProbes)
	for i := range paths {
		raw, err := cr.w.Payload(0, cr.res.PF, cr.rounds, cr.res.BatchSize) // lane 0 of a new round: new records
		if err != nil {
			return 0, err
		}
		cr.rounds++
		l := &callLog{floor: pathFloor}
		if err := cr.r.invoke(ctx, cr.s, raw, l); err != nil {
			return 0, err
		}
		paths[i] = l.criticalPath()
	}
	slices.Sort(paths)
	return float64(paths[len(paths)/2]), nil
}

// caseRun is the state of one case being measured.
type caseRun struct {
	r      *Runner
	s      *Subject
	w      Workload
	res    CaseResult
	before ddbmeter.Snapshot
	sqs0   SQSSnapshot
	rounds int
	done   bool

	lat                 []time.Duration
	wall, cpu           time.Duration
	mallocs, allocBytes uint64
}

// round runs PF batches at once, one per lane, and decides whether the case is done.
func (cr *caseRun) round(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := cr.res.Case
	payloads := make([][]byte, c.PF)
	for lane := range payloads {
		raw, err := cr.w.Payload(lane, c.PF, cr.rounds, c.BatchSize)
		if err != nil {
			return err
		}
		payloads[lane] = raw
	}
	cr.rounds++
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	start := time.Now()
	times := make([]time.Duration, c.PF)
	errs := make([]error, c.PF)
	var wg sync.WaitGroup
	for lane := range c.PF {
		wg.Go(func() {
			t0 := time.Now()
			errs[lane] = cr.r.invoke(ctx, cr.s, payloads[lane], nil)
			times[lane] = time.Since(t0)
		})
	}
	wg.Wait()
	cr.wall += time.Since(start)
	cr.cpu += cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	cr.mallocs += ms1.Mallocs - ms0.Mallocs
	cr.allocBytes += ms1.TotalAlloc - ms0.TotalAlloc
	cr.lat = append(cr.lat, times...)
	for _, err := range errs {
		if err != nil {
			cr.res.FailedBatches++
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	cr.res.Batches += c.PF
	cr.res.Records += c.PF * c.BatchSize
	l := cr.r.limits
	cr.done = cr.res.Records+c.PF*c.BatchSize > l.MaxRecords || (l.MaxTime > 0 && cr.wall >= l.MaxTime) ||
		(cr.wall >= l.Budget && cr.res.Batches >= l.MinBatches)
	return nil
}

func (cr *caseRun) result() CaseResult {
	res := cr.res
	d := cr.s.Meter.Snapshot().Sub(cr.before)
	n, b := float64(res.Records), float64(res.Batches)
	res.Seconds = cr.wall.Seconds()
	res.RecordsPerSec = n / cr.wall.Seconds()
	res.P50Ms, res.P99Ms = percentile(cr.lat, 50), percentile(cr.lat, 99)
	res.CPUMicrosPerRecord = float64(cr.cpu.Microseconds()) / n
	res.AllocsPerRecord = float64(cr.mallocs) / n
	res.AllocBytesPerRecord = float64(cr.allocBytes) / n
	res.DDBCallsPerBatch = float64(d.Total.Calls) / b
	res.DDBAttemptsPerBatch = float64(d.Total.Attempts) / b
	res.WriteUnitsPerRecord = d.Total.WriteUnits / n
	res.ReadUnitsPerRecord = d.Total.ReadUnits / n
	res.WriteBytesPerRecord = float64(d.Total.BytesWritten) / n
	q := cr.s.SQS.Snapshot().Sub(cr.sqs0)
	res.SQSRequestsPerRecord = float64(q.Attempts) / n
	res.SQSBilledRequestsPerRecord = float64(q.Billed) / n
	res.SQSMessagesPerRecord = float64(q.Messages) / n
	res.SQSUSDPerMillionRecords = res.SQSBilledRequestsPerRecord * SQSPerMillionRequests
	res.DDBUSDPerMillionRecords = res.WriteUnitsPerRecord*DDBPerMillionWRU + res.ReadUnitsPerRecord*DDBPerMillionRRU
	res.USDPerMillionRecords = res.SQSUSDPerMillionRecords + res.DDBUSDPerMillionRecords
	if len(d.Ops) > 0 {
		res.DDBOpsPerBatch = map[string]float64{}
		for op, o := range d.Ops {
			if o.Calls > 0 {
				res.DDBOpsPerBatch[op] = float64(o.Calls) / b
			}
		}
	}
	return res
}

// percentile is the nearest-rank percentile in milliseconds.
func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return float64(s[min(max(i, 0), len(s)-1)].Microseconds()) / 1000
}

// cpuTime is this process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
