package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/process"
)

// functions runs one variant's functions: the consumer behind the mappings and, for gapless,
// the reconciler on its schedule and on the failure queue.
type functions interface {
	// lanes is the lane factory of mapping number m (esm.New's lanes argument).
	lanes(m int) func(shardID string, lane int) (esm.Invoker, error)
	// shardFinished releases the lanes of a shard of mapping m that has finished.
	shardFinished(m int, shardID string)
	// schedule runs one scheduled reconciler pass; kill arms the kill fault (see failures).
	schedule(ctx context.Context, kill bool) (sum reconcile.Summary, crashed bool, err error)
	// failures hands the reconciler one batch of failure-queue messages. With kill, the
	// invocation is killed in the middle of its first replay, if it replays anything; crashed
	// reports that it died: its response must be ignored.
	failures(ctx context.Context, ev events.SQSEvent, kill bool) (resp events.SQSEventResponse, crashed bool, err error)
	// chaosStats are the faults injected in the function code: counted by the Chaos in process,
	// read back from the bootstraps' shared chaos state under the emulator.
	chaosStats() chaos.Stats
	// killed reports the reconciler kills so far and a note on the first.
	killed() (int, string)
	// replaySending is told by the reconciler's SQS proxy that the reconciler is forwarding or
	// parking a record: a replay is in progress.
	replaySending()
	// command sends the reconciler function an operator command event (reconcile.Command) and
	// returns its answer; errNoCommands when these functions have none.
	command(ctx context.Context, payload []byte) ([]byte, error)
	close()
}

// functionEnv is what a variant gives its functions: names, endpoints (the fault proxies) and
// the function settings, the same values the template hands the deployed functions.
type functionEnv struct {
	awsCfg                       aws.Config
	group, stream                string
	checkpointTable              string
	ledgerTable                  string
	targetURL, parkedURL         string
	kinesisURL                   string // direct: the proxies sit in front of DynamoDB and SQS only
	s3URL                        string // direct: the SQS emulator's port serves S3 (payload bucket)
	consumerDDB, consumerSQS     string
	racerSQS                     string // the racing mapping's consumer's SQS endpoint
	reconcilerDDB, reconcilerSQS string
	maxRecordAttempts            int
	deadlineMargin               time.Duration
	settleAfter                  time.Duration
	maxRecordAge                 time.Duration // the mappings' MaximumRecordAge (0: unlimited): the reconciler's tail bound
	chaos                        chaos.Config
	log                          *slog.Logger
	decidesTable                 string // checkpoint decides: the shared checkpoint's table
	filter                       string // RECORD_FILTER ("" none)
	failureBucket                string // FAILURE_BUCKET: the S3 on-failure destination ("" none)
	// consumerFunction (CONSUMER_FUNCTION_ARN) is the function the mappings invoke, and name in
	// their on-failure records: the reconciler refuses records naming another function.
	consumerFunction string
	// lanes (PARALLELIZATION_FACTOR) is the mappings' ParallelizationFactor: the reconciler
	// replays a given-up range only in its batch's lane.
	lanes int
}

// consumerDeadlineMargin leaves the pipeline this much of the function timeout for its writes.
func consumerDeadlineMargin(timeout time.Duration) time.Duration {
	return min(config.DefaultDeadlineMargin, timeout/3)
}

// inProcess runs the gapless or baseline handlers in this process: the same code the
// bootstraps run, minus the runtime. A timed-out invocation returns to the mapping at its
// deadline while the handler goroutine finishes on its own with an expired context (as a
// frozen sandbox would never write again, every call it makes after the deadline fails).
type inProcess struct {
	invoke func(ctx context.Context, payload []byte) ([]byte, error)
	// invokeRace is the racing mapping's consumer: the same handler over its own SQS client.
	invokeRace func(ctx context.Context, payload []byte) ([]byte, error)
	rec        *reconcile.Handler
	// cmd runs an operator command (nil: none).
	cmd   func(ctx context.Context, payload []byte) ([]byte, error)
	chaos *chaos.Chaos
	kills *killSwitch
	// stats are the baseline handler's counts (mapping alone, checkpoint decides).
	stats *baseline.Stats
}

var _ functions = (*inProcess)(nil)

func (p *inProcess) lanes(m int) func(string, int) (esm.Invoker, error) {
	inv := p.invoke
	if m > 0 && p.invokeRace != nil {
		inv = p.invokeRace
	}
	return func(string, int) (esm.Invoker, error) { return invokerFunc(inv), nil }
}
func (p *inProcess) shardFinished(int, string) {}

// command runs an operator command through the in-process reconciler handler, built with
// operator commands as the reconciler's main builds it (p.cmd); errNoCommands without.
func (p *inProcess) command(ctx context.Context, payload []byte) ([]byte, error) {
	if p.cmd == nil {
		return nil, errNoCommands
	}
	return runInvocation(lambdaContext(ctx), func(ctx context.Context) ([]byte, error) { return p.cmd(ctx, payload) })
}
func (p *inProcess) chaosStats() chaos.Stats { return p.chaos.Stats() }
func (p *inProcess) close()                  {}

// replaySending is a no-op: in process, killingProcess kills from inside the pipeline.
func (p *inProcess) replaySending() {}

func (p *inProcess) schedule(ctx context.Context, kill bool) (reconcile.Summary, bool, error) {
	if p.rec == nil {
		return reconcile.Summary{}, false, errors.New("demo: no reconciler in this variant")
	}
	ctx, k, cancel := p.arm(ctx, kill)
	defer cancel()
	sum, err := runInvocation(ctx, p.rec.HandleSchedule)
	if (k != nil && k.fired()) || errors.Is(err, errRuntimeExited) {
		return reconcile.Summary{}, true, nil
	}
	return sum, false, err
}

func (p *inProcess) failures(ctx context.Context, ev events.SQSEvent, kill bool) (events.SQSEventResponse, bool, error) {
	if p.rec == nil {
		return events.SQSEventResponse{}, false, errors.New("demo: no reconciler in this variant")
	}
	ctx, k, cancel := p.arm(ctx, kill)
	defer cancel()
	resp, err := runInvocation(ctx, func(ctx context.Context) (events.SQSEventResponse, error) {
		return p.rec.HandleSQS(ctx, ev), nil
	})
	if (k != nil && k.fired()) || errors.Is(err, errRuntimeExited) {
		return events.SQSEventResponse{}, true, nil
	}
	return resp, false, err
}

// arm gives an invocation its own cancellable context and, with kill, a killArm in it.
func (p *inProcess) arm(ctx context.Context, kill bool) (context.Context, *killArm, context.CancelFunc) {
	ctx, cancel := context.WithCancel(lambdaContext(ctx))
	if !kill {
		return ctx, nil, cancel
	}
	k := &killArm{cancel: cancel}
	return context.WithValue(ctx, killKey{}, k), k, cancel
}

// killed reports the kills so far and a note on the first.
func (p *inProcess) killed() (int, string) {
	p.kills.mu.Lock()
	defer p.kills.mu.Unlock()
	return p.kills.kills, p.kills.note
}

// invokerFunc adapts a function to esm.Invoker, returning at ctx's deadline (the function
// timeout) even when the handler is still running, and turning a panic that escapes the handler
// into a function error (aws-lambda-go reports a handler panic as a function error). It runs the
// function as one invocation of an in-process runtime (see runInvocation).
type invokerFunc func(ctx context.Context, payload []byte) ([]byte, error)

func (f invokerFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return runInvocation(ctx, func(ctx context.Context) ([]byte, error) { return f(ctx, payload) })
}

// errRuntimeExited is the function error of an in-process invocation whose runtime a crash
// killer ended, worded as Lambda reports a runtime that exits mid-invocation.
var errRuntimeExited = errors.New("Runtime.ExitError: Runtime exited with error: exit status 86 (injected crash)")

// runtimeArm is the runtime of one in-process invocation. It dies when a crash killer exits it
// (chaos's crash hook, see crashInProcess) or when the invocation runs past its timeout; from then
// on every AWS call the invocation's code still makes fails (deadRuntimeGuard), whatever context
// it uses, because nothing runs in a runtime that exited or was frozen at its timeout.
type runtimeArm struct {
	once   sync.Once
	died   chan struct{} // closed by a crash
	cancel context.CancelCauseFunc
	dead   atomic.Bool
}

type runtimeKey struct{}

// kill marks the runtime dead and cancels the invocation's context; crash also ends the wait
// of runInvocation at once.
func (a *runtimeArm) kill(cause error, crash bool) {
	a.once.Do(func() {
		a.dead.Store(true)
		a.cancel(cause)
		if crash {
			close(a.died)
		}
	})
}

// runInvocation runs fn as one invocation: in its own goroutine with a runtimeArm in its
// context and a Lambda request id. It returns fn's result, a panic escaping fn as a function
// error, errRuntimeExited at once when a crash killer ends the runtime, or ctx's error at ctx's
// end (the timeout) while fn may still be running: its later calls then fail, and its result
// is dropped.
func runInvocation[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ictx, cancel := context.WithCancelCause(ctx)
	arm := &runtimeArm{died: make(chan struct{}), cancel: cancel}
	ictx = context.WithValue(ictx, runtimeKey{}, arm)
	ch := make(chan result, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				ch <- result{err: fmt.Errorf("Runtime.Panic: %v", v)}
			}
		}()
		v, err := fn(lambdaContext(ictx))
		ch <- result{v, err}
	}()
	var zero T
	select {
	case r := <-ch:
		cancel(nil)
		return r.v, r.err
	case <-arm.died:
		return zero, errRuntimeExited
	case <-ctx.Done():
		arm.kill(ctx.Err(), false)
		return zero, ctx.Err()
	}
}

// crashInProcess is the in-process runtime's chaos crash (chaos.WithCrash): the runtime of the
// invocation in ctx dies — its caller sees Runtime.ExitError at once and nothing the invocation
// does afterwards reaches DynamoDB or SQS — and the attempt returns chaos.ErrCrash to code that
// will never be heard from.
func crashInProcess(ctx context.Context, _ string) {
	if a, ok := ctx.Value(runtimeKey{}).(*runtimeArm); ok {
		a.kill(errRuntimeExited, true)
	}
}

// errDeadRuntime fails every AWS call made from a dead in-process runtime.
var errDeadRuntime = errors.New("demo: call from an invocation whose runtime is dead (crashed or timed out)")

// deadRuntimeGuard makes every AWS call made with a context of a dead in-process invocation
// fail before it is sent, even when the caller detached the context from its cancellation
// (context.WithoutCancel keeps values): a runtime that exited or was frozen sends nothing.
func deadRuntimeGuard(cfg aws.Config) aws.Config {
	cfg = cfg.Copy()
	cfg.APIOptions = append(cfg.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("gaplessDemoDeadRuntime",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if a, ok := ctx.Value(runtimeKey{}).(*runtimeArm); ok && a.dead.Load() {
					return middleware.InitializeOutput{}, middleware.Metadata{}, errDeadRuntime
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	})
	return cfg
}

// lambdaContext adds a request id, as the Lambda runtime does (the handlers log it).
func lambdaContext(ctx context.Context) context.Context {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])})
}

// killSwitch counts the reconciler kills of a variant.
type killSwitch struct {
	mu    sync.Mutex
	kills int
	note  string
}

// killArm kills one in-process reconciler invocation: the first wave of replayed records (a gap
// being processed) cancels the invocation's context right after the sink returns, so the batch's
// ledger write never happens, like a runtime killed between processing and recording.
type killArm struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   bool
}

type killKey struct{}

func (k *killArm) fire() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return false
	}
	k.done = true
	k.cancel()
	return true
}

func (k *killArm) fired() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.done
}

// killingSink wraps the reconciler's batch sink: an armed invocation dies after its first wave.
func killingSink(next pipeline.BatchFunc, ks *killSwitch) pipeline.BatchFunc {
	return func(ctx context.Context, recs []pipeline.Record) []error {
		errs := next(ctx, recs)
		if k, ok := ctx.Value(killKey{}).(*killArm); ok && len(recs) > 0 && k.fire() {
			ks.mu.Lock()
			ks.kills++
			ks.note = fmt.Sprintf("killed while replaying record %s", recs[0].ID)
			ks.mu.Unlock()
		}
		return errs
	}
}

// newInProcessGapless builds the consumer and reconciler handlers as their mains would.
func newInProcessGapless(env functionEnv) (*inProcess, error) {
	env.awsCfg = deadRuntimeGuard(withSDKLog(env.awsCfg, env.log))
	ch, err := chaos.New(env.chaos, chaos.WithCrash(crashInProcess))
	if err != nil {
		return nil, err
	}
	// The default bridge in batch form (SendMessageBatch waves), as the mains wire it; the
	// reconciler's sink carries the kill switch.
	build := func(ddbURL, sqsURL string, sink func(pipeline.BatchFunc) pipeline.BatchFunc, margin time.Duration) (*pipeline.Pipeline, *checkpoint.Store, error) {
		c := newClients(env.awsCfg, env.kinesisURL, ddbURL, sqsURL, false)
		ledger := dedupe.New(c.ddb, env.ledgerTable)
		cps := checkpoint.New(c.ddb, env.checkpointTable)
		parker := park.New(c.sqs, env.parkedURL)
		p, err := pipeline.New(pipeline.DedupeLedger{L: ledger}, pipeline.CheckpointStore{S: cps}, parker,
			ch.Wrap(process.New(c.sqs, env.targetURL)),
			pipeline.Config{MaxRecordAttempts: env.maxRecordAttempts, MaxConcurrency: config.DefaultMaxConcurrency, DeadlineMargin: margin},
			pipeline.WithLogger(env.log),
			pipeline.WithBatchSink(sink(ch.WrapSink(process.NewBatch(c.sqs, env.targetURL))), process.MaxBatchEntries))
		return p, cps, err
	}
	same := func(f pipeline.BatchFunc) pipeline.BatchFunc { return f }
	cp, _, err := build(env.consumerDDB, env.consumerSQS, same, env.deadlineMargin)
	if err != nil {
		return nil, err
	}
	flt, err := filter.Parse(env.filter)
	if err != nil {
		return nil, err
	}
	h := consumer.NewHandler(cp, env.group, env.log, consumer.WithFilter(flt))
	racePipeline, _, err := build(env.consumerDDB, env.racerSQS, same, env.deadlineMargin)
	if err != nil {
		return nil, err
	}
	hRace := consumer.NewHandler(racePipeline, env.group, env.log, consumer.WithFilter(flt))
	ks := &killSwitch{}
	rp, cps, err := build(env.reconcilerDDB, env.reconcilerSQS, func(f pipeline.BatchFunc) pipeline.BatchFunc { return killingSink(f, ks) }, 2*time.Second)
	if err != nil {
		return nil, err
	}
	rc := newClients(env.awsCfg, env.kinesisURL, env.reconcilerDDB, env.reconcilerSQS, false)
	r, err := reconcile.New(rc.kin, cps, rp, reconcile.Config{
		Group: env.group, Stream: env.stream, SettleAfter: env.settleAfter, MaxRecordAge: env.maxRecordAge,
		ReadInterval: 250 * time.Millisecond, DeadlineMargin: 2 * time.Second, Filter: flt,
	}, reconcile.WithLogger(env.log))
	if err != nil {
		return nil, err
	}
	// Operator commands, as the reconciler's main wires them: a redrive session runs over a
	// fresh RedriveLedger with this Process, this parked queue and payload bucket, and the holds.
	newRedriver := func(ctx context.Context, cfg reconcile.RedriveConfig, progress func(reconcile.RedriveEvent)) (*reconcile.Redriver, error) {
		c := newClients(env.awsCfg, env.kinesisURL, env.reconcilerDDB, env.reconcilerSQS, false)
		ledger := pipeline.DedupeLedger{L: dedupe.New(c.ddb, env.ledgerTable)}
		p, err := pipeline.New(reconcile.NewRedriveLedger(ledger), pipeline.CheckpointStore{S: checkpoint.New(c.ddb, env.checkpointTable)},
			park.New(c.sqs, env.parkedURL), ch.Wrap(process.New(c.sqs, env.targetURL)),
			pipeline.Config{MaxRecordAttempts: env.maxRecordAttempts, MaxConcurrency: config.DefaultMaxConcurrency, DeadlineMargin: 2 * time.Second},
			pipeline.WithLogger(env.log), pipeline.WithClaimer(ledger),
			pipeline.WithBatchSink(ch.WrapSink(process.NewBatch(c.sqs, env.targetURL)), process.MaxBatchEntries))
		if err != nil {
			return nil, err
		}
		cfg.MaxRecordAttempts = env.maxRecordAttempts
		return reconcile.NewRedriver(c.sqs, env.parkedURL, c.kin, p, cfg,
			reconcile.WithRedriveHolds(dedupe.NewHolds(c.ddb, env.ledgerTable)), reconcile.WithRedriveLogger(env.log),
			reconcile.WithRedrivePayloads(c.s3(env.s3URL)), reconcile.WithRedrivePayloadBucket(schema.PayloadBucket),
			reconcile.WithRedriveProgress(progress))
	}
	// The handler's options as gapless.NewReconciler sets them from the function's environment
	// (CONSUMER_FUNCTION_ARN, PARALLELIZATION_FACTOR, FAILURE_BUCKET), over the demo's clients.
	recOpts := []reconcile.HandlerOption{reconcile.WithRelease(rc.sqs),
		reconcile.WithConsumerFunction(env.consumerFunction), reconcile.WithLanes(env.lanes),
		reconcile.WithCommands(newRedriver, config.OnParkContinue)}
	if env.failureBucket != "" {
		recOpts = append(recOpts, reconcile.WithFailureBucket(rc.s3(env.s3URL), env.failureBucket))
	}
	handle := func(h *consumer.Handler) func(ctx context.Context, payload []byte) ([]byte, error) {
		return func(ctx context.Context, payload []byte) ([]byte, error) {
			resp, err := h.HandleJSON(ctx, payload)
			if err != nil {
				return nil, err
			}
			return json.Marshal(resp)
		}
	}
	rh := reconcile.NewHandler(r, nil, env.log, recOpts...) // as functions/reconciler wires it: untried failure-queue messages go back
	return &inProcess{
		invoke:     handle(h),
		invokeRace: handle(hRace),
		rec:        rh,
		cmd: func(ctx context.Context, payload []byte) ([]byte, error) {
			out, err := rh.Handle(ctx, payload)
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		},
		chaos: ch,
		kills: ks,
	}, nil
}

// newInProcessBaseline is a comparison variant's consumer, with the same Process and chaos as
// gapless: for the mapping alone internal/local/baseline's Bare handler (every record through
// Process, partial batch response, no state); for checkpoint decides its CheckpointDecides
// handler over a shared checkpoint table, reached through the consumer's DynamoDB proxy.
func newInProcessBaseline(name string, env functionEnv) (*inProcess, error) {
	env.awsCfg = deadRuntimeGuard(withSDKLog(env.awsCfg, env.log))
	ch, err := chaos.New(env.chaos, chaos.WithCrash(crashInProcess))
	if err != nil {
		return nil, err
	}
	stats := &baseline.Stats{}
	opts := []baseline.Option{baseline.WithConcurrency(config.DefaultMaxConcurrency), baseline.WithLogger(env.log), baseline.WithStats(stats)}
	// One handler per mapping, the same but for the SQS endpoint (the racing mapping's proxy).
	handler := func(sqsURL string) func(ctx context.Context, payload []byte) ([]byte, error) {
		c := newClients(env.awsCfg, env.kinesisURL, env.consumerDDB, sqsURL, false)
		proc := ch.Wrap(process.New(c.sqs, env.targetURL))
		var h baseline.Handler
		switch name {
		case VariantCheckpointDecides:
			h = baseline.CheckpointDecides(baseline.NewDynamoCheckpoints(c.ddb, env.decidesTable), env.group, proc, opts...)
		default:
			h = baseline.Bare(proc, opts...)
		}
		return func(ctx context.Context, payload []byte) ([]byte, error) {
			var ev events.KinesisEvent
			if err := json.Unmarshal(payload, &ev); err != nil {
				return nil, err
			}
			resp, err := h(ctx, ev)
			if err != nil {
				return nil, err
			}
			return json.Marshal(resp)
		}
	}
	return &inProcess{
		stats:      stats,
		invoke:     handler(env.consumerSQS),
		invokeRace: handler(env.racerSQS),
		chaos:      ch,
		kills:      &killSwitch{},
	}, nil
}
