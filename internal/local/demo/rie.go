package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/schema"
)

// bootstraps are the built function binaries.
type bootstraps struct {
	consumer, reconciler string
	rie                  string // the emulator binary
}

// functionMains are the source directories of the two functions.
var functionMains = map[string]string{"consumer": "functions/consumer", "reconciler": "functions/reconciler"}

// mainsApplyChaos reports whether both function mains exist and link internal/local/chaos (their
// Process is wrapped by chaos.Options when built with -tags gapless_chaos, as the demo builds
// them): without it the demo cannot inject faults inside them. It asks `go list -deps` with that
// tag, so how a main reaches the package does not matter. missing is true when a main does not exist at all.
func mainsApplyChaos(ctx context.Context, root string) (ok, missing bool, why string) {
	const chaosPkg = "github.com/gapless-dev/gapless/internal/local/chaos"
	for _, dir := range []string{functionMains["consumer"], functionMains["reconciler"]} {
		if _, err := os.Stat(filepath.Join(root, dir, "main.go")); err != nil {
			return false, true, fmt.Sprintf("%s/main.go is missing", dir)
		}
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", chaos.BuildTag, "-f", "{{.ImportPath}}", "./"+dir)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return false, false, fmt.Sprintf("go list %s: %v", dir, err)
		}
		if !slices.Contains(strings.Fields(string(out)), chaosPkg) {
			return false, false, fmt.Sprintf("%s does not apply %s (it does not link %s)", dir, chaos.EnvVar, chaosPkg)
		}
	}
	return true, false, ""
}

// pickRuntime resolves Config.Runtime and, for RIE, builds the bootstraps and the emulator.
func (e *env) pickRuntime(ctx context.Context) error {
	switch e.cfg.Runtime {
	case RuntimeInProcess:
		e.runtime = RuntimeInProcess
		return nil
	case RuntimeAuto:
		e.progress.phase("runtime", "checking that the function mains apply "+chaos.EnvVar+" (go list -deps)")
		if ok, _, why := mainsApplyChaos(ctx, e.root); !ok {
			e.runtime = RuntimeInProcess
			e.progress.phase("runtime", "in-process handlers ("+why+")")
			return nil
		}
	case RuntimeRIE:
		switch ok, missing, why := mainsApplyChaos(ctx, e.root); {
		case missing:
			return fmt.Errorf("%w: runtime rie: %s", ErrConfig, why)
		case !ok:
			e.progress.phase("runtime", "WARNING: "+why+": no in-function faults in the gapless run")
		}
	}
	e.progress.phase("runtime", "building the function bootstraps and the Lambda runtime interface emulator")
	b, err := buildBootstraps(ctx, e.root, filepath.Join(e.dir, reportBinDir), e.progress)
	if err != nil {
		return err
	}
	e.boot = b
	e.runtime = RuntimeRIE
	return nil
}

// buildBootstraps builds both mains for this machine (static, like `make build`, but for the
// host's architecture so the emulator can run them).
func buildBootstraps(ctx context.Context, root, dir string, prog *progress) (bootstraps, error) {
	var b bootstraps
	for _, name := range []string{"consumer", "reconciler"} {
		src := functionMains[name]
		stop := prog.ticking(fmt.Sprintf("building %s (go build; the first build compiles the AWS SDK and takes a minute or two)", src))
		out := filepath.Join(dir, name, "bootstrap")
		err := rie.Build(ctx, root, "./"+src, out, chaos.BuildTag)
		stop()
		if err != nil {
			return b, fmt.Errorf("demo: build %s: %w", src, err)
		}
		if name == "consumer" {
			b.consumer = out
		} else {
			b.reconciler = out
		}
	}
	stop := prog.ticking("building the Lambda runtime interface emulator (aws-lambda-rie, through the Go module proxy)")
	bin, err := rie.Binary(ctx)
	stop()
	if err != nil {
		return b, err
	}
	b.rie = bin
	return b, nil
}

// newFunctions gives a variant its functions: in-process handlers, or the bootstraps under
// the emulator (gapless only: the mapping-alone handler has no main of its own).
func (e *env) newFunctions(ctx context.Context, v *variant) (functions, error) {
	if !v.gapless {
		return newInProcessBaseline(v.name, v.functionEnv(""))
	}
	if e.runtime != RuntimeRIE {
		return newInProcessGapless(v.functionEnv(""))
	}
	state := filepath.Join(v.dir, "chaos-state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	fe := v.functionEnv(state)
	logf, err := os.OpenFile(filepath.Join(v.dir, "runtime.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &rieFunctions{
		ctx: ctx, boot: e.boot, timeout: e.cfg.FunctionTimeout, log: logf,
		consumerEnv: consumerEnv(fe), racerEnv: racerEnv(fe), reconcilerEnv: reconcilerEnv(fe), chaos: fe.chaos,
		lanesByKey: map[string]*rie.Instance{},
	}, nil
}

func commonEnv(fe functionEnv, ddb, sqsURL string) map[string]string {
	return map[string]string{
		config.EnvGroup:             fe.group,
		config.EnvCheckpointTable:   fe.checkpointTable,
		config.EnvDedupeTable:       fe.ledgerTable,
		config.EnvParkedQueueURL:    fe.parkedURL,
		config.EnvTargetQueueURL:    fe.targetURL,
		config.EnvPayloadBucket:     schema.PayloadBucket, // the demo's records fit in a message: never written
		config.EnvMaxRecordAttempts: strconv.Itoa(fe.maxRecordAttempts),
		config.EnvRecordFilter:      fe.filter,
		chaos.EnvVar:                fe.chaos.String(),
		"AWS_ENDPOINT_URL_DYNAMODB": ddb,
		"AWS_ENDPOINT_URL_SQS":      sqsURL,
		"AWS_ENDPOINT_URL_KINESIS":  fe.kinesisURL,
		"AWS_ENDPOINT_URL_S3":       fe.s3URL,
		"AWS_REGION":                fe.awsCfg.Region,
		"AWS_DEFAULT_REGION":        fe.awsCfg.Region,
		// The emulators accept any credentials; never let a function look for real ones.
		"AWS_ACCESS_KEY_ID":     "local",
		"AWS_SECRET_ACCESS_KEY": "local",
		"AWS_SESSION_TOKEN":     "",
		"AWS_PROFILE":           "",
		"AWS_LAMBDA_LOG_LEVEL":  "INFO",
	}
}

func consumerEnv(fe functionEnv) map[string]string {
	env := commonEnv(fe, fe.consumerDDB, fe.consumerSQS)
	env[config.EnvDeadlineMargin] = fe.deadlineMargin.String()
	env["AWS_LAMBDA_FUNCTION_NAME"] = functionName
	return env
}

// racerEnv is the racing mapping's consumer: the same, but for its own SQS proxy.
func racerEnv(fe functionEnv) map[string]string {
	env := consumerEnv(fe)
	env["AWS_ENDPOINT_URL_SQS"] = fe.racerSQS
	return env
}

// maxRecordAgeSeconds is MAXIMUM_RECORD_AGE_SECONDS for the demo's mapping age: -1 when
// unlimited, else whole seconds rounded up, at least Lambda's minimum of 60 (the demo allows a
// shorter age; a longer bound only makes the reconciler wait longer before it verifies a tail).
func maxRecordAgeSeconds(age time.Duration) string {
	if age <= 0 {
		return "-1"
	}
	return strconv.FormatInt(max(int64(config.MinRecordAgeSeconds), int64((age+time.Second-1)/time.Second)), 10)
}

func reconcilerEnv(fe functionEnv) map[string]string {
	env := commonEnv(fe, fe.reconcilerDDB, fe.reconcilerSQS)
	if fe.failureBucket != "" {
		env[config.EnvFailureBucket] = fe.failureBucket
	}
	env[config.EnvStreamName] = fe.stream
	env[config.EnvConsumerFunction] = fe.consumerFunction
	env[config.EnvParallelizationFactor] = strconv.Itoa(fe.lanes)
	env[config.EnvSettleAfter] = fe.settleAfter.String()
	env[config.EnvMaxRecordAge] = maxRecordAgeSeconds(fe.maxRecordAge)
	env["AWS_LAMBDA_FUNCTION_NAME"] = "ReconcilerFunction"
	return env
}

// rieFunctions runs the real bootstraps: one emulator per mapping lane (the emulator cannot
// overlap invocations), one for scheduled reconciler passes and one for failure-queue batches.
type rieFunctions struct {
	ctx           context.Context
	boot          bootstraps
	timeout       time.Duration
	log           *os.File
	consumerEnv   map[string]string
	racerEnv      map[string]string
	reconcilerEnv map[string]string
	chaos         chaos.Config

	mu         sync.Mutex
	lanesByKey map[string]*rie.Instance
	sched      *rie.Instance
	fail       *rie.Instance
	armed      *rie.Instance // the reconciler instance to kill at its next replayed record
	kills      int
	note       string
	closed     bool
}

var _ functions = (*rieFunctions)(nil)

func (r *rieFunctions) start(env map[string]string, boot string, timeout time.Duration) (*rie.Instance, error) {
	return rie.Start(r.ctx, rie.Options{Bootstrap: boot, Env: env, Timeout: timeout, LogWriter: r.log, Binary: r.boot.rie})
}

func (r *rieFunctions) lanes(m int) func(string, int) (esm.Invoker, error) {
	return func(shardID string, lane int) (esm.Invoker, error) {
		env := r.consumerEnv
		if m > 0 {
			env = r.racerEnv
		}
		key := fmt.Sprintf("%d/%s/%d", m, shardID, lane)
		inst, err := r.startLane(key, env)
		if err != nil {
			return nil, err
		}
		return &laneInvoker{r: r, key: key, env: env, inst: inst}, nil
	}
}

// startLane starts a lane's emulator and registers it under key (closing a previous one).
func (r *rieFunctions) startLane(key string, env map[string]string) (*rie.Instance, error) {
	inst, err := r.start(env, r.boot.consumer, r.timeout)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = inst.Close()
		return nil, errors.New("demo: functions closed")
	}
	r.lanesByKey[key] = inst
	return inst, nil
}

// laneInvoker is a lane's emulator that replaces itself after a runtime failure (the emulator
// exited, or its port turned out to be another process's): the failed invocation is a function
// error the mapping retries, and the retry gets a fresh emulator, as Lambda would give a fresh
// sandbox. Without it one dead emulator fails its lane's every invocation until the records
// are given up.
type laneInvoker struct {
	r    *rieFunctions
	key  string
	env  map[string]string
	mu   sync.Mutex
	inst *rie.Instance
}

func (l *laneInvoker) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	l.mu.Lock()
	inst := l.inst
	l.mu.Unlock()
	if inst == nil {
		var err error
		if inst, err = l.r.startLane(l.key, l.env); err != nil {
			return nil, fmt.Errorf("%w: %v", rie.ErrRuntime, err)
		}
		l.mu.Lock()
		l.inst = inst
		l.mu.Unlock()
	}
	out, err := inst.Invoke(ctx, payload)
	if err != nil && errors.Is(err, rie.ErrRuntime) && ctx.Err() == nil {
		l.mu.Lock()
		if l.inst == inst {
			l.inst = nil
		}
		l.mu.Unlock()
		_ = inst.Close()
	}
	return out, err
}

func (r *rieFunctions) shardFinished(m int, shardID string) {
	prefix := fmt.Sprintf("%d/%s/", m, shardID)
	r.mu.Lock()
	var done []*rie.Instance
	for k, inst := range r.lanesByKey {
		if strings.HasPrefix(k, prefix) {
			done = append(done, inst)
			delete(r.lanesByKey, k)
		}
	}
	r.mu.Unlock()
	for _, inst := range done {
		_ = inst.Close()
	}
}

// reconciler returns the instance in slot (starting one when empty) and arms it for a kill.
func (r *rieFunctions) reconciler(slot **rie.Instance, kill bool) (*rie.Instance, error) {
	r.mu.Lock()
	inst := *slot
	r.mu.Unlock()
	if inst == nil {
		var err error
		if inst, err = r.start(r.reconcilerEnv, r.boot.reconciler, reconcilerTimeout); err != nil {
			return nil, err
		}
		r.mu.Lock()
		*slot = inst
		r.mu.Unlock()
	}
	if kill {
		r.mu.Lock()
		r.armed = inst
		r.mu.Unlock()
	}
	return inst, nil
}

// replaySending is called by the reconciler's SQS proxy when the reconciler forwards a record
// (a replay in progress): an armed instance is killed right then, mid-replay.
func (r *rieFunctions) replaySending() {
	r.mu.Lock()
	inst := r.armed
	r.armed = nil
	if inst != nil {
		r.kills++
		r.note = "reconciler runtime killed (SIGTERM to its emulator) while forwarding a replayed record"
		if r.sched == inst {
			r.sched = nil
		}
		if r.fail == inst {
			r.fail = nil
		}
	}
	r.mu.Unlock()
	if inst != nil {
		go func() { _ = inst.Close() }()
	}
}

func (r *rieFunctions) disarm(inst *rie.Instance) {
	r.mu.Lock()
	if r.armed == inst {
		r.armed = nil
	}
	r.mu.Unlock()
}

func (r *rieFunctions) schedule(ctx context.Context, kill bool) (reconcile.Summary, bool, error) {
	inst, err := r.reconciler(&r.sched, kill)
	if err != nil {
		return reconcile.Summary{}, false, err
	}
	defer r.disarm(inst)
	ev, _ := json.Marshal(map[string]any{
		"version": "0", "id": "demo", "detail-type": "Scheduled Event", "source": "aws.events",
		"account": "000000000000", "time": time.Now().UTC().Format(time.RFC3339), "region": "us-east-1",
		"resources": []string{"arn:aws:events:us-east-1:000000000000:rule/gapless-demo-reconcile"}, "detail": map[string]any{},
	})
	out, err := inst.Invoke(ctx, ev)
	if r.wasKilled(inst, &r.sched) || runtimeExited(err) {
		return reconcile.Summary{}, true, nil
	}
	if err != nil {
		r.replace(inst, &r.sched, err)
		return reconcile.Summary{}, false, err
	}
	var sum reconcile.Summary
	if err := json.Unmarshal(out, &sum); err != nil {
		return sum, false, fmt.Errorf("demo: reconciler response %q: %w", clip(out), err)
	}
	return sum, false, nil
}

// command invokes a reconciler instance of its own with an operator command, as gapless
// redrive invokes the local reconciler under the emulator.
func (r *rieFunctions) command(ctx context.Context, payload []byte) ([]byte, error) {
	var slot *rie.Instance
	inst, err := r.reconciler(&slot, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = inst.Close() }()
	return inst.Invoke(ctx, payload)
}

func (r *rieFunctions) failures(ctx context.Context, ev events.SQSEvent, kill bool) (events.SQSEventResponse, bool, error) {
	inst, err := r.reconciler(&r.fail, kill)
	if err != nil {
		return events.SQSEventResponse{}, false, err
	}
	defer r.disarm(inst)
	payload, err := json.Marshal(ev)
	if err != nil {
		return events.SQSEventResponse{}, false, err
	}
	out, err := inst.Invoke(ctx, payload)
	if r.wasKilled(inst, &r.fail) || runtimeExited(err) {
		return events.SQSEventResponse{}, true, nil
	}
	if err != nil {
		r.replace(inst, &r.fail, err)
		return events.SQSEventResponse{}, false, err
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return resp, false, fmt.Errorf("demo: reconciler response %q: %w", clip(out), err)
	}
	return resp, false, nil
}

// runtimeExited reports whether the bootstrap died mid-invocation (a crash killer's os.Exit):
// the emulator answers Runtime.ExitError and starts the bootstrap again on the next invocation,
// so the instance stays in its slot.
func runtimeExited(err error) bool {
	var fe *rie.FunctionError
	return errors.As(err, &fe) && fe.Type == "Runtime.ExitError"
}

// wasKilled reports whether inst was killed (it left its slot).
func (r *rieFunctions) wasKilled(inst *rie.Instance, slot **rie.Instance) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *slot != inst
}

// replace drops inst from slot after a runtime failure (the emulator died), so the next
// invocation starts a fresh one.
func (r *rieFunctions) replace(inst *rie.Instance, slot **rie.Instance, err error) {
	if !errors.Is(err, rie.ErrRuntime) {
		return
	}
	r.mu.Lock()
	if *slot == inst {
		*slot = nil
	}
	r.mu.Unlock()
	_ = inst.Close()
}

// chaosStats reads the faults back from the shared state directory of the bootstraps.
func (r *rieFunctions) chaosStats() chaos.Stats {
	s, _, err := chaos.StateStats(r.chaos)
	if err != nil {
		return chaos.Stats{}
	}
	return s
}

func (r *rieFunctions) killed() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kills, r.note
}

func (r *rieFunctions) close() {
	r.mu.Lock()
	r.closed = true
	all := make([]*rie.Instance, 0, len(r.lanesByKey)+2)
	for _, inst := range r.lanesByKey {
		all = append(all, inst)
	}
	r.lanesByKey = map[string]*rie.Instance{}
	for _, inst := range []*rie.Instance{r.sched, r.fail} {
		if inst != nil {
			all = append(all, inst)
		}
	}
	r.sched, r.fail = nil, nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, inst := range all {
		wg.Go(func() { _ = inst.Close() })
	}
	wg.Wait()
	_ = r.log.Close()
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
