package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
	"github.com/gapless-dev/gapless/internal/local/retention"
	"github.com/gapless-dev/gapless/internal/schema"
)

// Variant names (the --variants values, the report's subdirectories).
const (
	// VariantBaseline: the mapping alone, internal/local/baseline's Bare handler.
	VariantBaseline = "mapping-alone"
	// VariantCheckpointDecides: the field report's consumer, internal/local/baseline's
	// CheckpointDecides (a shared checkpoint filters records; a lost replace skips the batch).
	VariantCheckpointDecides = "checkpoint-decides"
	// VariantGapless: internal/consumer and the reconciler.
	VariantGapless = "gapless"
)

// AllVariants are the variants in the order a run runs them.
func AllVariants() []string {
	return []string{VariantBaseline, VariantCheckpointDecides, VariantGapless}
}

// ParseVariants reads a comma-separated list of variant names ("all" for every one) into run
// order. Unknown, repeated or missing names are errors wrapping ErrConfig that name the valid
// values.
func ParseVariants(s string) ([]string, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: variants: %s (want a comma-separated list of %s, or all)", ErrConfig,
			fmt.Sprintf(format, a...), strings.Join(AllVariants(), ", "))
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		name := strings.TrimSpace(f)
		switch {
		case name == "" && strings.TrimSpace(s) == "":
			return nil, bad("none given")
		case name == "":
			return nil, bad("empty name in %q", s)
		case name == "all":
			for _, v := range AllVariants() {
				seen[v] = true
			}
			continue
		case !slices.Contains(AllVariants(), name):
			return nil, bad("unknown variant %q", name)
		case seen[name]:
			return nil, bad("%q given twice", name)
		}
		seen[name] = true
	}
	var out []string
	for _, v := range AllVariants() {
		if seen[v] {
			out = append(out, v)
		}
	}
	return out, nil
}

// runs reports whether the run includes any of names.
func (c Config) runs(names ...string) bool {
	for _, n := range names {
		if slices.Contains(c.Variants, n) {
			return true
		}
	}
	return false
}

// variantSuffix names a variant's resources (stream, tables, queues).
var variantSuffix = map[string]string{VariantBaseline: "b", VariantCheckpointDecides: "c", VariantGapless: "g"}

// group is the consumer group of both mappings of a run.
const group = "demo"

// functionName is the function the mappings name in their OnFailure messages.
const functionName = "ConsumerFunction"

// variant is one run of the workload: the mapping alone, or gapless.
type variant struct {
	e       *env
	name    string
	gapless bool
	dir     string // the variant's files inside the report directory

	stream, checkpointTable, ledgerTable string
	targetURL, parkedURL, failureURL     string
	// failureBucket is the mapping's S3 on-failure destination (Config.OnFailure s3; "" otherwise).
	failureBucket string

	recs     []loadgen.Payload
	expected map[string][]byte // id -> exact payload bytes
	writes   *ledgerOfWrites
	target   *loadgen.Tally
	parked   *loadgen.Tally
	parkBad  atomic.Int64 // parked messages whose payload is not the produced one
	parkMsgs atomic.Int64
	// parkedByReconciler: ids of the verified parked messages the reconciler sent.
	parkedByReconciler idSet
	// drainErrs counts failed receives of the drains (their messages come back later).
	drainErrs atomic.Int64
	// lateDrained counts messages that were in flight when the queue first looked empty.
	lateDrained atomic.Int64

	fnDDB, fnSQS, recDDB, recSQS *faultproxy.Proxy
	// trim gives the stream its retention under --expire (nil otherwise); heldShard is the shard
	// whose invocations are held until heldUntil; the stream trims until trimUntil, and the
	// reconciler does not run before (expire.go).
	trim      *retention.Proxy
	heldShard string
	heldUntil time.Time
	trimUntil time.Time
	// raceSQS is the racing mapping's consumer's SQS proxy: its own, so the taps tell which
	// mapping sent a record.
	raceSQS           *faultproxy.Proxy
	fnMeter, recMeter *capacityMeter
	taps              []*sendTap
	sends             *sendJournal
	invs              *invocationJournal
	fn                functions

	mu       sync.Mutex
	mappings []*esm.Mapping
	ev       eventCounts
	rec      reconcilerCounts
	timeline []Sample
	verified atomic.Bool
	shardsOK atomic.Int64
	shardsN  atomic.Int64
	produced atomic.Int64
	start    time.Time
	splitAt  time.Time
	splitOf  string
	raceAt   time.Time
	// raceShard is the shard the second mapping races on (the highest initial shard id, which
	// the split leaves alone).
	raceShard string
	// gaveUp: the ranges the mappings gave up on (for the killers' fate).
	gaveUp givenUp
	// deliveredAt and parkedAt: when each id first arrived at the target and parked queues.
	deliveredAt, parkedAt firstSeen
	rss                   *rssTracker
	logFile               *os.File
	log                   *slog.Logger
}

type eventCounts struct {
	invocations, functionErrors, timeouts, partial, bisected, exhausted, expired, givenUp atomic.Int64
	destFailed                                                                            atomic.Int64
}

type reconcilerCounts struct {
	scheduled, scheduledErrors, sqsInvocations, messages, deleted, retried, crashes atomic.Int64
	tailReplayed                                                                    atomic.Int64 // scheduled passes' TailReplayed
}

func newVariant(e *env, name string, gapless bool) (*variant, error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "functions.log"))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	base := fmt.Sprintf("gapless-demo-%s-%s", e.runID, variantSuffix[name])
	v := &variant{
		e: e, name: name, gapless: gapless, dir: dir,
		stream: base, checkpointTable: base + "-checkpoint", ledgerTable: base + "-ledger",
		target: loadgen.NewTally(), parked: loadgen.NewTally(),
		logFile: f, log: slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})),
		rss: newRSSTracker(), sends: &sendJournal{}, invs: newInvocationJournal(),
	}
	spec := loadgen.Spec{Records: e.cfg.Records, Keys: e.cfg.Keys, PoisonRate: e.cfg.Faults.Poison, Seed: e.cfg.Seed}
	v.recs = loadgen.Records(spec)
	v.expected = make(map[string][]byte, len(v.recs))
	for _, p := range v.recs {
		b, err := json.Marshal(p) // what loadgen.Produce writes
		if err != nil {
			return nil, err
		}
		v.expected[p.ID] = b
	}
	return v, nil
}

// Sample is one point of the timeline: per shard, how many of its records are produced, behind
// the checkpoint mirror and behind the verified watermark (gapless), or behind the mapping's
// slowest lane (the mapping alone has no mirror).
type Sample struct {
	At     time.Duration          `json:"at"`
	Shards map[string]ShardSample `json:"shards"`
}

// ShardSample is one shard at one time, in records.
type ShardSample struct {
	Produced   int `json:"produced"`
	Checkpoint int `json:"checkpoint"`
	Watermark  int `json:"watermark"`
}

// run executes the variant and returns its result. It stops everything it started.
func (v *variant) run(ctx context.Context) (*VariantResult, error) {
	defer v.logFile.Close()
	start := time.Now()
	v.mu.Lock()
	v.start = start
	v.mu.Unlock()
	cfg := v.e.cfg
	v.e.progress.phase(v.name, "creating stream, tables and queues")
	if err := v.createResources(ctx); err != nil {
		return nil, err
	}
	// The stream goes when the variant ends: a reused stack would otherwise run into
	// kinesis-mock's account shard limit after a few runs. Tables and queues stay for inspection.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = v.e.direct.kin.DeleteStream(dctx, &kinesis.DeleteStreamInput{StreamName: aws.String(v.stream), EnforceConsumerDeletion: aws.Bool(true)})
	}()
	if err := v.startProxies(); err != nil {
		return nil, err
	}
	defer v.closeProxies()
	if cfg.Faults.Expire {
		if err := v.startRetention(ctx); err != nil {
			return nil, err
		}
		defer v.trim.Close()
	}
	fn, err := v.e.newFunctions(ctx, v)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.fn = fn
	v.mu.Unlock()
	defer fn.close()
	v.writes = newLedgerOfWrites(v.e.direct.kin)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}

	// Downstream: drain the target and parked queues continuously; after stopDrain, each loop
	// drains once more until its queue stays empty for 3 seconds. A receive is never cancelled
	// half way (its messages would stay invisible for the visibility timeout and look lost).
	stopDrain := make(chan struct{})
	var drains sync.WaitGroup
	drains.Go(func() { v.drainLoop(ctx, stopDrain, v.targetURL, v.target, v.deliveredAt.wrap(loadgen.PayloadID)) })
	drains.Go(func() { v.drainLoop(ctx, stopDrain, v.parkedURL, v.parked, v.parkedAt.wrap(v.decodeParked)) })
	drainsStopped := false
	endDrains := func() {
		if !drainsStopped {
			drainsStopped = true
			close(stopDrain)
			drains.Wait()
		}
	}
	defer endDrains()

	// The mapping, and the racing one: a second mapping with the same configuration and group
	// that invokes the function for one shard only (the seed's two clustered consumers on one
	// shard); its batches of the other shards are acknowledged without an invocation, as a
	// mapping acknowledges records its FilterCriteria drop.
	mcfg := v.mappingConfig()
	raceShard, err := v.lastShard(ctx)
	if err != nil {
		return nil, err
	}
	v.raceShard = raceShard
	startMapping := func(i int) error {
		lanes := fn.lanes(i)
		if i > 0 {
			real := lanes
			lanes = func(shardID string, lane int) (esm.Invoker, error) {
				if shardID != raceShard {
					return invokerFunc(func(context.Context, []byte) ([]byte, error) { return nil, nil }), nil
				}
				return real(shardID, lane)
			}
		}
		kin, opts := v.e.direct.kin, []esm.Option{esm.WithObserver(v.observer(i)), esm.WithLogger(v.log.With("mapping", i)),
			esm.WithShardDiscoveryInterval(500 * time.Millisecond)}
		if v.trim != nil {
			kin = newClients(v.e.awsCfg, v.trim.URL(), "", "", true).kin
			opts = append(opts, esm.WithTrimHorizon(v.trim.Horizon), esm.WithInvokeThrottle(v.held))
		}
		if v.failureBucket != "" {
			opts = append(opts, esm.WithS3Destination(v.e.direct.s3(v.e.ep.SQS), "arn:aws:s3:::"+v.failureBucket, v.failureURL))
		}
		if r := v.e.cfg.Faults.DestFail; r > 0 {
			opts = append(opts, esm.WithDestinationFault(esm.DestinationFailureRate(r, v.e.cfg.Seed+uint64(i))))
		}
		m, err := esm.New(kin, v.e.direct.sqs, lanes, mcfg, opts...)
		if err != nil {
			return err
		}
		v.mu.Lock()
		v.mappings = append(v.mappings, m)
		v.mu.Unlock()
		wg.Go(func() {
			if err := m.Run(runCtx); err != nil && runCtx.Err() == nil {
				fail(fmt.Errorf("demo: %s mapping %d: %w", v.name, i, err))
			}
		})
		return nil
	}
	if err := startMapping(0); err != nil {
		return nil, err
	}

	// The reconciler: on a short schedule and on the failure queue.
	if v.gapless {
		wg.Go(func() { v.scheduleLoop(runCtx) })
		wg.Go(func() { v.failureLoop(runCtx) })
	}

	// Production, with the split and the racing mapping on the way.
	produced := make(chan error, 1)
	raceAt := -1
	if cfg.Faults.Race {
		raceAt = len(v.recs) / 4
	}
	splitAt := -1
	if cfg.Faults.Split {
		splitAt = len(v.recs) / 2
	}
	v.e.progress.phase(v.name, "running")
	first := Sample{Shards: map[string]ShardSample{}}
	if shards, err := v.listShards(ctx); err == nil {
		for _, s := range shards {
			first.Shards[s.id] = ShardSample{}
		}
	}
	v.mu.Lock()
	v.timeline = append(v.timeline, first)
	v.mu.Unlock()
	if v.trim != nil {
		v.startExpireClock(runCtx)
	}
	// The producer is in wg too, so that the racing mapping it starts is counted before any Wait.
	wg.Go(func() {
		raced := false
		produced <- produce(runCtx, v.writes, v.stream, v.recs, cfg.Rate, splitAt,
			func(ctx context.Context) error {
				id, err := splitShard(ctx, v.e.direct.kin, v.stream)
				v.mu.Lock()
				v.splitAt, v.splitOf = time.Now(), id
				v.mu.Unlock()
				return err
			},
			func(done int) {
				v.produced.Store(int64(done))
				if raceAt >= 0 && !raced && done >= raceAt {
					raced = true
					v.mu.Lock()
					v.raceAt = time.Now()
					v.mu.Unlock()
					if err := startMapping(1); err != nil {
						fail(err)
					}
				}
			})
	})

	// Watch: samples, progress, completion.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	productionDone := false
	var laneLast map[string]map[int]string
	timedOut := false
wait:
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				// Interrupted (Ctrl-C): stop everything, report nothing.
				stopRun()
				wg.Wait()
				return nil, ctx.Err()
			}
			timedOut = true // the run's time bound: report what arrived
			break wait
		case err := <-errs:
			stopRun()
			wg.Wait()
			return nil, err
		case err := <-produced:
			if err != nil {
				stopRun()
				wg.Wait()
				return nil, err
			}
			productionDone = true
			laneLast = v.laneLast()
		case <-tick.C:
			v.sample(ctx, start)
			if productionDone && v.complete(ctx, laneLast) {
				break wait
			}
		}
	}
	stopRun()
	wg.Wait()
	v.sample(context.WithoutCancel(ctx), start)
	v.e.progress.phase(v.name, "draining the target and parked queues")
	endDrains()
	// The operator's redrive after forged parked messages arrived; the records' accounting is
	// already done (the redrive's deliveries are not counted), and its time is not the run's.
	took := time.Since(start)
	forged := v.forgeParked(context.WithoutCancel(ctx))
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	res := v.result(final, took, timedOut)
	res.ForgedParked = forged
	v.e.progress.done(v.name, res)
	return res, nil
}

func (v *variant) mappingConfig() esm.Config {
	cfg := v.e.cfg
	m := v.e.template
	m.StreamName = v.stream
	m.FunctionName = functionName
	m.StartingPosition = esm.TrimHorizon
	m.BatchSize = cfg.BatchSize
	m.BatchingWindow = cfg.BatchingWindow
	m.ParallelizationFactor = cfg.Parallelization
	m.ReportBatchItemFailures = true
	m.BisectBatchOnFunctionError = cfg.Bisect
	m.MaximumRetryAttempts = cfg.RetryAttempts
	m.MaximumRecordAge = cfg.MaxRecordAge
	m.FunctionTimeout = cfg.FunctionTimeout
	m.OnFailureQueueURL = v.failureURL
	if v.failureBucket != "" {
		m.OnFailureQueueURL = "" // the object's notification goes to the failure queue instead
	}
	m.PollInterval = time.Second
	if cfg.Filter != "" {
		m.FilterCriteria = []string{cfg.Filter}
	}
	return m
}

func (v *variant) createResources(ctx context.Context) error {
	c := v.e.direct
	if _, err := schema.EnsureStream(ctx, c.kin, v.stream, int32(v.e.cfg.Shards)); err != nil {
		return err
	}
	if err := schema.EnsureTables(ctx, c.ddb, schema.CheckpointTable(v.checkpointTable), schema.LedgerTable(v.ledgerTable)); err != nil {
		return err
	}
	if v.name == VariantCheckpointDecides {
		// The report's shared checkpoint: one item per shard, in a table keyed like the
		// Powertools one (internal/local/baseline creates both).
		if err := baseline.Ensure(ctx, c.ddb, v.decidesTable()); err != nil {
			return err
		}
	}
	var err error
	if v.targetURL, err = schema.EnsureQueue(ctx, c.sqs, schema.Queue{Name: v.stream + "-target"}); err != nil {
		return err
	}
	if v.parkedURL, err = schema.EnsureQueue(ctx, c.sqs, schema.Queue{Name: v.stream + "-parked", RetentionSeconds: schema.ParkedRetentionSeconds}); err != nil {
		return err
	}
	if v.failureURL, err = schema.EnsureQueue(ctx, c.sqs, schema.Queue{Name: v.stream + "-failure"}); err != nil {
		return err
	}
	if v.e.cfg.OnFailure == OnFailureS3 {
		v.failureBucket = v.stream + "-failures"
		return schema.EnsureBucket(ctx, c.s3(v.e.ep.SQS), v.failureBucket)
	}
	return nil
}

// startProxies puts a fault proxy in front of DynamoDB and SQS for the consumer, and another
// pair for the reconciler (so the consumer's requests per batch are its own), with a capacity
// meter between each DynamoDB proxy and the emulator.
func (v *variant) startProxies() error {
	f := v.e.cfg.Faults
	seed := int64(v.e.cfg.Seed)
	ddbRules := []faultproxy.Rule{
		{Match: faultproxy.Service("DynamoDB_20120810"), Fault: faultproxy.Throttle, Rate: f.DDBThrottle},
		{Match: faultproxy.Service("DynamoDB_20120810"), Fault: faultproxy.ServerError, Rate: f.DDBError},
		{Match: faultproxy.Ops("DynamoDB_20120810.PutItem", "DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.BatchWriteItem",
			"DynamoDB_20120810.DeleteItem", "DynamoDB_20120810.TransactWriteItems"), Fault: faultproxy.DropAfterForward, Rate: f.DDBDrop},
	}
	sqsRules := []faultproxy.Rule{
		{Match: faultproxy.Service("AmazonSQS"), Fault: faultproxy.Throttle, Rate: f.SQSThrottle},
		{Match: faultproxy.Service("AmazonSQS"), Fault: faultproxy.ServerError, Rate: f.SQSError},
		{Match: faultproxy.Ops("AmazonSQS.SendMessage", "AmazonSQS.SendMessageBatch"), Fault: faultproxy.DropAfterForward, Rate: f.SQSDrop},
	}
	var err error
	if v.fnMeter, err = startCapacityMeter(v.e.ep.DynamoDB); err != nil {
		return err
	}
	if v.recMeter, err = startCapacityMeter(v.e.ep.DynamoDB); err != nil {
		return err
	}
	if v.fnDDB, err = faultproxy.Start(v.fnMeter.URL(), faultproxy.WithSeed(seed)); err != nil {
		return err
	}
	if v.recDDB, err = faultproxy.Start(v.recMeter.URL(), faultproxy.WithSeed(seed+1)); err != nil {
		return err
	}
	// Behind each function's SQS proxy, a tap journals the records that reached the target
	// queue (for the duplicates by cause).
	tap := func(source string) (string, error) {
		t, err := startSendTap(v.e.ep.SQS, v.targetURL, source, v.sends)
		if err != nil {
			return "", err
		}
		v.taps = append(v.taps, t)
		return t.URL(), nil
	}
	var fnTap, raceTap, recTap string
	if fnTap, err = tap(sourceConsumer); err != nil {
		return err
	}
	if raceTap, err = tap(sourceRacer); err != nil {
		return err
	}
	if recTap, err = tap(sourceReconciler); err != nil {
		return err
	}
	if v.fnSQS, err = faultproxy.Start(fnTap, faultproxy.WithSeed(seed+2)); err != nil {
		return err
	}
	if v.recSQS, err = faultproxy.Start(recTap, faultproxy.WithSeed(seed+3)); err != nil {
		return err
	}
	if v.raceSQS, err = faultproxy.Start(raceTap, faultproxy.WithSeed(seed+4)); err != nil {
		return err
	}
	for _, p := range []*faultproxy.Proxy{v.fnDDB, v.recDDB} {
		p.SetRules(ddbRules...)
	}
	v.fnSQS.SetRules(sqsRules...)
	v.raceSQS.SetRules(sqsRules...)
	// The reconciler's SQS proxy also tells the functions when the reconciler sends a record
	// (a replay is in progress: the moment the kill fault waits for). The rule never fires.
	watch := faultproxy.Rule{Fault: faultproxy.Throttle, Rate: 0, Match: func(r *faultproxy.Request) bool {
		if r.Action() == "SendMessage" || r.Action() == "SendMessageBatch" {
			if fn := v.functionsOrNil(); fn != nil {
				fn.replaySending()
			}
		}
		return false
	}}
	v.recSQS.SetRules(append([]faultproxy.Rule{watch}, sqsRules...)...)
	return nil
}

// decidesTable is the checkpoint-decides variant's shared checkpoint table.
func (v *variant) decidesTable() string { return v.stream + "-decides" }

func (v *variant) functionsOrNil() functions {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fn
}

func (v *variant) closeProxies() {
	for _, p := range []*faultproxy.Proxy{v.fnDDB, v.recDDB, v.fnSQS, v.recSQS, v.raceSQS} {
		if p != nil {
			_ = p.Close()
		}
	}
	for _, t := range v.taps {
		t.Close()
	}
	for _, m := range []*capacityMeter{v.fnMeter, v.recMeter} {
		if m != nil {
			m.Close()
		}
	}
}

// functionEnv is the configuration the variant's functions get.
func (v *variant) functionEnv(chaosState string) functionEnv {
	cfg := v.e.cfg
	return functionEnv{
		awsCfg: v.e.awsCfg, group: group, stream: v.stream,
		checkpointTable: v.checkpointTable, ledgerTable: v.ledgerTable,
		targetURL: v.targetURL, parkedURL: v.parkedURL, kinesisURL: v.kinesisURL(), s3URL: v.e.ep.SQS,
		consumerDDB: v.fnDDB.URL(), consumerSQS: v.fnSQS.URL(), racerSQS: v.raceSQS.URL(),
		reconcilerDDB: v.recDDB.URL(), reconcilerSQS: v.recSQS.URL(),
		maxRecordAttempts: cfg.MaxRecordAttempts, deadlineMargin: consumerDeadlineMargin(cfg.FunctionTimeout),
		settleAfter: cfg.SettleAfter, maxRecordAge: cfg.MaxRecordAge, chaos: cfg.chaosConfig(chaosState), log: v.log,
		decidesTable: v.decidesTable(), filter: cfg.Filter, failureBucket: v.failureBucket,
		consumerFunction: functionName, lanes: cfg.Parallelization,
	}
}

func (v *variant) observer(mapping int) esm.Observer {
	return func(e esm.Event) {
		if mapping > 0 && e.ShardID != v.raceShard {
			return // the racing mapping does not invoke the function for this shard
		}
		v.invs.observe(mapping, e)
		switch e.Type {
		case esm.EventBatchInvoked:
			v.ev.invocations.Add(1)
		case esm.EventFunctionError:
			v.ev.functionErrors.Add(1)
			if errors.Is(e.Err, esm.ErrFunctionTimeout) {
				v.ev.timeouts.Add(1)
			}
		case esm.EventPartialFailure:
			v.ev.partial.Add(1)
		case esm.EventBisected:
			v.ev.bisected.Add(1)
		case esm.EventRetriesExhausted:
			v.gaveUp.note(e)
			v.ev.exhausted.Add(1)
			v.ev.givenUp.Add(int64(e.Size))
		case esm.EventRecordsExpired:
			v.gaveUp.note(e)
			v.ev.expired.Add(1)
			v.ev.givenUp.Add(int64(e.Size))
		case esm.EventDestinationDeliveryFailed:
			v.ev.destFailed.Add(1)
		case esm.EventShardFinished:
			v.fn.shardFinished(mapping, e.ShardID)
		}
	}
}
