package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/onfailure"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

const (
	group       = "simgroup"
	streamName  = "simstream"
	cpTable     = "checkpoints"
	ledgerTable = "ledger"
	naiveTable  = "naive-checkpoints"
)

// Mutations put a known defect back, for proving the simulator finds it. Test-only: they
// change what the simulator wires, never a product package.
const (
	// MutationCheckpointDecides runs the seed report's consumer (internal/local/baseline
	// CheckpointDecides: a lost compare-and-set checkpoint race skips the batch) instead of
	// gapless's; the reconciler still runs but has no mirror to reconcile behind.
	MutationCheckpointDecides = "checkpoint-decides"
	// MutationDropMarker drops every in-flight marker write of the consumer (the PutItem is
	// answered as applied but nothing is stored).
	MutationDropMarker = "drop-marker"
	// MutationDropLedger drops every ledger entry write of the consumer: batches are recorded
	// nowhere, so the reconciler replays them (duplicates) and nothing is lost.
	MutationDropLedger = "drop-ledger"
	// MutationDropHold (with ON_PARK=hold-key) drops every key-hold write: a parked record
	// holds nothing.
	MutationDropHold = "drop-hold"
	// MutationCloseBeforeCount marks a closed shard closed before the write counting the span
	// of it that expired unseen (the reconciler's checkpoint store, mutantCheckpoints): a pass
	// that dies between the two leaves the shard final and its loss uncounted.
	MutationCloseBeforeCount = "close-before-count"
	// MutationCountOnDirection makes the write counting an expired span conditional on the
	// watermark moving forward only (mutantDDB): a span two reconcilers find (a scheduled pass
	// and a failure-queue replay) is counted by both.
	MutationCountOnDirection = "count-on-direction"
	// MutationHoldQueueOrder (ON_PARK=hold-key, with redrive) lists a held key's records in the
	// order the redrive session received their messages, not the order they were parked in
	// (queueOrderHolds): the hold walk trusts the queue order.
	MutationHoldQueueOrder = "hold-queue-order"
	// MutationFailureRangeWithoutLanes builds the failure-queue reconciler without the mapping's
	// ParallelizationFactor (no WithLanes), and its replays without leaving to the mapping what
	// a mapping run still has in hand (Batch.MappingSettled, which alone keeps most of another
	// lane's records out of reach): a given-up batch's range is replayed in every lane, not only
	// in the batch's.
	MutationFailureRangeWithoutLanes = "failure-range-without-lanes"
)

// Config is one run's shape. Zero fields get Defaults' values.
type Config struct {
	Seed              uint64
	Shards            int
	Records           int
	Keys              int
	Split             bool // split a shard halfway through production
	Parallelization   int
	BatchSize         int
	MaxRetry          int // the mapping's MaximumRetryAttempts
	Bisect            bool
	MaxRecordAttempts int
	Poison            float64 // share of records Process always fails
	Killer            float64 // share of records whose Process kills the sandbox
	Retention         time.Duration
	Produce           time.Duration // production (and fault) time; faults stop at its end
	FaultTime         time.Duration // faults stop this long after the start instead (0: Produce)
	Heal              time.Duration // fault-free time after it for the system to converge
	MaxExtra          time.Duration // how much longer a run may go on for its records to be accounted for
	Settle            time.Duration
	MaxRecordAge      time.Duration // the mapping's MaximumRecordAge, given to the reconciler too
	Schedule          time.Duration // reconciler pass interval
	Faults            Faults
	Mutation          string
	HoldKey           bool          // ON_PARK=hold-key: a parked record holds its key; per-key order is checked
	Redrive           bool          // with HoldKey: an operator redrive session at 4, 6 and 8 minutes
	BatchSink         bool          // the consumer and replays hand the records over in waves (pipeline.WithBatchSink), as the deployed bridge does
	SinkWait          time.Duration // with BatchSink: how long each wave takes, so that slow runs save their progress between waves
	Suppress          map[int]bool  // fault ordinals not applied (shrinking)
}

var debug = os.Getenv("SIM_DEBUG") != ""

// ShortRetention is the retention of one run in four.
var ShortRetention = 6 * time.Minute

// Defaults returns the shape of a run for seed: a few hundred records over three shards with a
// split, two lanes per shard, every fault kind on; the seed also picks a short retention for
// one run in four.
func Defaults(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 3))
	c := Config{
		Seed: seed, Shards: 3, Records: 200 + r.IntN(200), Keys: 8 + r.IntN(24), Split: r.IntN(2) == 0,
		Parallelization: 1 + r.IntN(3), BatchSize: []int{5, 10, 25}[r.IntN(3)], MaxRetry: r.IntN(4), Bisect: r.IntN(2) == 0,
		MaxRecordAttempts: 2 + r.IntN(3), Poison: 0.01, Killer: 0.005, Retention: 24 * time.Hour,
		Produce: 2 * time.Minute, Heal: 8 * time.Minute, MaxExtra: 60 * time.Minute, Settle: 2 * time.Minute, Schedule: time.Minute, MaxRecordAge: 2 * time.Minute,
		Faults: Faults{Fail: 0.03, Lost: 0.03, Die: 0.01, Hang: 0.002, Partial: 0.02, Process: 0.03, NoDest: 0.3},
	}
	c.HoldKey = r.IntN(3) == 0
	if c.HoldKey && c.MaxRetry < c.MaxRecordAttempts {
		// hold-key's stated precondition (doctor check onpark.hold-key-retries): the mapping
		// retries a record at least MAX_RECORD_ATTEMPTS times, so it is parked (its key held)
		// before the mapping can give up on it.
		c.MaxRetry = c.MaxRecordAttempts
	}
	if r.IntN(4) == 0 {
		// Short, but longer than the reconciler's tail rule (MaxRecordAge + Settle = 4m), as a
		// deployed stack is (24h retention; at most 12h + settle): records are trimmed only
		// when a shard really falls behind. ShortRetention overrides it.
		c.Retention = ShortRetention
	}
	c.Redrive = c.HoldKey && r.IntN(2) == 0
	// From a stream of its own, so that the draws above (and the runs of seeds recorded before
	// the batch form was simulated) keep their values.
	bs := rand.New(rand.NewPCG(seed, 8))
	c.BatchSink = bs.IntN(2) == 0
	if c.BatchSink && bs.IntN(2) == 0 {
		c.SinkWait = time.Second // each wave that leaves another passes pipeline.DefaultProgressEvery
	}
	return c
}

// WithMutation returns cfg with the defect put back and the run shaped so that the defect's
// path is taken: key holds on for drop-hold; for the loss-counting defects a split (a closed
// shard) and a retention below the reconciler's tail rule (MaxRecordAge + Settle), so that
// spans expire unseen in most runs.
func WithMutation(cfg Config, mutation string) Config {
	cfg.Mutation = mutation
	if mutation != "" {
		cfg.BatchSink = false // the per-record form, in which each shape was found to take the defect's path
	}
	switch mutation {
	case MutationDropHold:
		cfg.HoldKey = true
	case MutationHoldQueueOrder:
		cfg.HoldKey, cfg.Redrive = true, true
		if cfg.MaxRetry < cfg.MaxRecordAttempts {
			cfg.MaxRetry = cfg.MaxRecordAttempts // hold-key's precondition, as Defaults keeps it
		}
	case MutationCountOnDirection:
		cfg.Split, cfg.Retention = true, 5*time.Minute
	case MutationFailureRangeWithoutLanes:
		// Lanes for the replay to ignore; batches given up at their first failure, so that the
		// failure queue replays often; lanes held up by hangs (a 10 s function timeout each), so
		// that one lane is behind when another gives a batch up.
		cfg.Parallelization, cfg.MaxRetry, cfg.HoldKey, cfg.Redrive = 3, 0, false, false
		cfg.Faults.Hang = 0.02
	case MutationCloseBeforeCount:
		// Faults go on while the spans expire (after the retention), so that a pass can die
		// between the two writes.
		cfg.Split, cfg.Retention, cfg.FaultTime = true, 5*time.Minute, 9*time.Minute
		cfg.Faults.Die, cfg.Faults.NoDest = 0.1, 0.9
	}
	return cfg
}

// Result is what a run found.
type Result struct {
	Seed       uint64
	Violations []string       // broken invariants, one line each
	Counts     map[string]int // records by outcome, duplicates by cause
	Faults     []string       // the fault schedule applied
	Sites      map[string]*SiteStats
	Trace      uint64 // hash of the grant order (same seed, same trace)
	Grants     int
	Virtual    time.Duration // virtual time until every record was accounted for (or the run gave up)
}

// Failed reports whether an invariant broke.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

type world struct {
	cfg        Config
	s          *Sched
	ddb        *Dynamo
	q          *SQS
	kin        *Kinesis
	parkedURL  string
	failureURL string
	log        *slog.Logger

	mu     sync.Mutex
	seen   map[string][]string    // record id -> who applied its effect, in order
	seenAt map[string][]time.Time // record id -> when, in the same order
	first  map[string]time.Time   // record id -> the time of its first effect
	lanes  *laneLog               // the mapping's lane releases (the lane oracle)
}

func recKey(shardID, seq string) string { return shardID + "/" + seq }

var (
	errPoison    = errors.New("sim: poison record")
	errTransient = errors.New("sim: transient business-logic failure")
)

// traits reads the record's test traits: a poison record always fails Process; a killer
// record makes the sandbox running it die (the runtime crashes) every time.
// The producer writes the record with encoding/json from a map (keys sorted, no spaces), so
// the traits are read as the exact bytes it writes: decoding every record at every Process
// call was a few percent of a run.
func traits(data []byte) (poison, killer bool) {
	return bytes.Contains(data, []byte(`"poison":true`)), bytes.Contains(data, []byte(`"killer":true`))
}

func (w *world) see(id, by string) {
	w.mu.Lock()
	if _, ok := w.first[id]; !ok {
		w.first[id] = time.Now()
	}
	w.seen[id] = append(w.seen[id], by)
	w.seenAt[id] = append(w.seenAt[id], time.Now())
	w.mu.Unlock()
}

// process is the business logic: it records the effect (the sink saw the record).
func (w *world) process(ctx context.Context, r pipeline.Record) error {
	if err := w.s.gate(ctx, "Process", r.ID.ShardID+"|"+r.ID.Seq); err != nil {
		return err
	}
	a := actorOf(ctx)
	id := recKey(r.ID.ShardID, r.ID.Seq)
	poison, killer := traits(r.Data)
	if killer {
		w.s.kill(a, "Process of a killer record "+id)
		return errDied
	}
	if poison {
		return errPoison
	}
	fail := a.faulty && w.s.chanceOf(a, w.cfg.Faults.Process, a.name+": Process fails "+id)
	if fail {
		if w.s.chanceOf(a, 0.5, a.name+": ... after its effect") {
			w.see(id, a.kind+"(effect,error)")
		}
		return errTransient
	}
	w.see(id, a.kind)
	return nil
}

// sinkChunk is the batch form's request size, SendMessageBatch's 10 entries as the bridge's.
const sinkChunk = 10

// sink is the batch form of process (pipeline.BatchFunc): after SinkWait (the wave's requests
// in flight) it sends a wave's records one after another, as a bridge's requests complete, so a
// killer takes the sandbox down in the middle of a wave: the records before it have had their
// effect, the ones after it have not.
func (w *world) sink(ctx context.Context, recs []pipeline.Record) []error {
	errs := make([]error, len(recs))
	if w.cfg.SinkWait > 0 && !sleep(ctx, w.cfg.SinkWait) {
		for j := range errs {
			errs[j] = ctx.Err() // not sent
		}
		return errs
	}
	for j, r := range recs {
		if errs[j] = w.process(ctx, r); errors.Is(errs[j], errDied) {
			for k := j + 1; k < len(recs); k++ {
				errs[k] = errDied
			}
			break
		}
	}
	return errs
}

func (w *world) ddbFor(mutation bool) any {
	c := ddbClient{s: w.s, m: w.ddb}
	if !mutation {
		return c
	}
	switch w.cfg.Mutation {
	case MutationDropMarker, MutationDropLedger, MutationDropHold, MutationCountOnDirection:
		return mutantDDB{c, w.cfg.Mutation}
	}
	return c
}

func (w *world) pipeline(ddb any, source string) (*pipeline.Pipeline, *checkpoint.Store, error) {
	d := ddb.(dedupeAPI)
	cps := checkpoint.New(d, cpTable)
	ledger := pipeline.DedupeLedger{L: dedupe.New(d, ledgerTable, dedupe.WithLogger(w.log))}
	opts := []pipeline.Option{pipeline.WithLogger(w.log), pipeline.WithClaimer(ledger)}
	if w.cfg.HoldKey {
		opts = append(opts, pipeline.WithHoldKey(pipeline.HoldStore{H: dedupe.NewHolds(d.(holdsAPI), ledgerTable)}))
	}
	if w.cfg.BatchSink {
		opts = append(opts, pipeline.WithBatchSink(w.sink, sinkChunk))
	}
	p, err := pipeline.New(ledger, pipeline.CheckpointStore{S: cps}, park.New(sqsClient{s: w.s, m: w.q}, w.parkedURL), w.process,
		pipeline.Config{MaxRecordAttempts: w.cfg.MaxRecordAttempts, MaxConcurrency: 2, DeadlineMargin: 2 * time.Second}, opts...)
	return p, cps, err
}

// lane is one lane's sandbox: a consumer built at cold start, rebuilt after a death.
type lane struct {
	w         *world
	name      string
	n         int
	h         func(context.Context, json.RawMessage) (any, error)
	functionT time.Duration
}

func (l *lane) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	l.n++
	a := &actor{name: fmt.Sprintf("c/%s/%04d", l.name, l.n), faulty: true, mortal: true, kind: "consumer"}
	ictx, cancel := context.WithCancel(ctx)
	a.cancel, a.done = cancel, ictx.Done()
	defer cancel()
	ictx = withActor(ictx, a)
	if l.h == nil {
		h, err := l.w.consumer()
		if err != nil {
			return nil, err
		}
		l.h = h
	}
	resp, err := l.h(ictx, payload)
	if l.w.s.isDead(a) {
		l.h = nil // the next invocation is a cold start
		return nil, errors.New("Runtime.ExitError: the sandbox died")
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

func (w *world) consumer() (func(context.Context, json.RawMessage) (any, error), error) {
	if w.cfg.Mutation == MutationCheckpointDecides {
		h := baseline.CheckpointDecides(baseline.NewDynamoCheckpoints(ddbClient{s: w.s, m: w.ddb}, naiveTable), group, w.process)
		return func(ctx context.Context, raw json.RawMessage) (any, error) {
			var ev events.KinesisEvent
			if err := json.Unmarshal(raw, &ev); err != nil {
				return nil, err
			}
			return h(ctx, ev)
		}, nil
	}
	p, _, err := w.pipeline(w.ddbFor(true), pipeline.SourceConsumer)
	if err != nil {
		return nil, err
	}
	h := consumer.NewHandler(p, group, w.log, consumer.WithStream(streamName))
	return func(ctx context.Context, raw json.RawMessage) (any, error) { return h.HandleJSON(ctx, raw) }, nil
}

func (w *world) reconcileHandler() (*reconcile.Handler, error) {
	p, cps, err := w.pipeline(w.ddbFor(true), pipeline.SourceReconciler)
	if err != nil {
		return nil, err
	}
	var cpsAPI reconcile.Checkpoints = cps
	if w.cfg.Mutation == MutationCloseBeforeCount {
		cpsAPI = mutantCheckpoints{cps, w.kin.EndingSeq}
	}
	var replay reconcile.Replayer = p
	if w.cfg.Mutation == MutationFailureRangeWithoutLanes {
		replay = blindReplayer{p}
	}
	ropts := []reconcile.Option{reconcile.WithLogger(w.log)}
	if Census {
		ropts = append(ropts, reconcile.WithCensus(kinCensus{w.kin}))
	}
	r, err := reconcile.New(kinesisClient{s: w.s, m: w.kin}, cpsAPI, replay,
		reconcile.Config{Group: group, Stream: streamName, SettleAfter: w.cfg.Settle, MaxRecordAge: w.cfg.MaxRecordAge}, ropts...)
	if err != nil {
		return nil, err
	}
	opts := []reconcile.HandlerOption{reconcile.WithRelease(sqsClient{s: w.s, m: w.q})}
	// PARALLELIZATION_FACTOR: the deployed reconciler is configured with the mapping's, so
	// that a given-up range replays its batch's lane only.
	if w.cfg.Mutation != MutationFailureRangeWithoutLanes {
		opts = append(opts, reconcile.WithLanes(w.cfg.Parallelization))
	}
	return reconcile.NewHandler(r, nil, w.log, opts...), nil
}

// sleep waits d of virtual time or until ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run runs one whole-system simulation. It must be called inside a synctest bubble.
func Run(cfg Config) (res Result) {
	w := &world{cfg: cfg, s: newSched(cfg.Seed, cfg.Faults, cfg.Suppress), ddb: NewDynamo(), q: NewSQS(),
		log: slog.New(slog.DiscardHandler), seen: map[string][]string{}, seenAt: map[string][]time.Time{}, first: map[string]time.Time{}, lanes: newLaneLog()}
	w.kin = NewKinesis(streamName, cfg.Shards, cfg.Retention, rand.New(rand.NewPCG(cfg.Seed, 4)))
	w.ddb.CreateTable(cpTable, schema.PartitionKey, schema.SortKey)
	w.ddb.CreateTable(ledgerTable, schema.PartitionKey, schema.SortKey)
	w.ddb.CreateTable(naiveTable, baseline.AttrID, "")
	w.parkedURL = w.q.CreateQueue("parked")
	w.failureURL = w.q.CreateQueue("failure")
	start := time.Now()
	root, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	var wg sync.WaitGroup
	goActor := func(a *actor, f func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(withActor(root, a))
		}()
	}

	// Producer: records at random moments over the production time; a split halfway.
	goActor(&actor{name: "producer", kind: "producer"}, func(ctx context.Context) {
		r := rand.New(rand.NewPCG(cfg.Seed, 5))
		gap := cfg.Produce / time.Duration(cfg.Records)
		for i := range cfg.Records {
			if !sleep(ctx, time.Duration(r.Int64N(int64(2*gap)))+time.Millisecond) {
				return
			}
			if err := w.s.gate(ctx, "kinesis PutRecord", ""); err != nil {
				return
			}
			key := fmt.Sprintf("key-%d", r.IntN(cfg.Keys))
			data, _ := json.Marshal(map[string]any{"i": i, "key": key, "poison": r.Float64() < cfg.Poison, "killer": r.Float64() < cfg.Killer})
			w.kin.Put(key, data, time.Now())
			if cfg.Split && i == cfg.Records/2 {
				w.kin.Split()
			}
		}
	})
	// Retention: the trim horizon follows the clock.
	goActor(&actor{name: "retention", kind: "retention"}, func(ctx context.Context) {
		for sleep(ctx, 5*time.Second) {
			if w.s.gate(ctx, "kinesis trim", "") != nil {
				return
			}
			w.kin.Trim(time.Now())
		}
	})
	// The event-source mapping, its lanes invoking the real consumer.
	ecfg := esm.Config{StreamName: streamName, FunctionName: "consumer", StartingPosition: esm.TrimHorizon,
		BatchSize: cfg.BatchSize, ParallelizationFactor: cfg.Parallelization, ReportBatchItemFailures: true,
		BisectBatchOnFunctionError: cfg.Bisect, MaximumRetryAttempts: cfg.MaxRetry, FunctionTimeout: 10 * time.Second,
		OnFailureQueueURL: w.failureURL, PollInterval: time.Second, MaximumRecordAge: cfg.MaxRecordAge}
	// The mapping's calls have no product function on their stacks: their site is "?", named
	// here rather than read from the stack at each of its polls (most of a run's calls).
	mapping, err := esm.New(kinesisClient{s: w.s, m: w.kin, site: "?"}, sqsClient{s: w.s, m: w.q, site: "?"},
		func(shardID string, n int) (esm.Invoker, error) {
			return &lane{w: w, name: fmt.Sprintf("%s/%d", shardID[len(shardID)-3:], n)}, nil
		}, ecfg,
		esm.WithRetention(cfg.Retention), esm.WithShardDiscoveryInterval(5*time.Second), esm.WithObserver(w.lanes.observe),
		esm.WithDestinationFault(func(m onfailure.Message) error {
			if w.s.chance(cfg.Faults.NoDest, "on-failure message not delivered: "+m.KinesisBatchInfo.ShardID+" "+m.KinesisBatchInfo.StartSequenceNumber) {
				return errors.New("sim: destination not delivered")
			}
			return nil
		}))
	if err != nil {
		return Result{Seed: cfg.Seed, Violations: []string{"esm: " + err.Error()}}
	}
	goActor(&actor{name: "mapping", kind: "mapping"}, func(ctx context.Context) { _ = mapping.Run(ctx) })
	// The scheduled reconciler.
	goActor(&actor{name: "schedule", kind: "schedule"}, func(ctx context.Context) {
		var h *reconcile.Handler
		for n := 1; sleep(ctx, cfg.Schedule); n++ {
			if h == nil {
				if h, err = w.reconcileHandler(); err != nil {
					panic(err)
				}
			}
			a := &actor{name: fmt.Sprintf("r/%04d", n), faulty: true, mortal: true, kind: "reconciler"}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			a.cancel, a.done = cancel, rctx.Done()
			sum, err := h.HandleSchedule(withActor(rctx, a))
			if debug {
				fmt.Printf("%s %s pass: %+v err=%v dead=%v\n", time.Now().UTC().Format("15:04:05"), a.name, sum, err, w.s.isDead(a))
			}
			cancel()
			if w.s.isDead(a) {
				h = nil
			}
		}
	})
	// The failure queue's poller (Lambda's SQS mapping) and the reconciler's handler of it.
	goActor(&actor{name: "failure-poller", kind: "poller"}, func(ctx context.Context) {
		var h *reconcile.Handler
		q := sqsClient{s: w.s, m: w.q, site: "?"} // the poller is the simulator's own code
		for n := 1; sleep(ctx, 2*time.Second); n++ {
			out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.failureURL), MaxNumberOfMessages: 10, VisibilityTimeout: 120})
			if err != nil || len(out.Messages) == 0 {
				continue
			}
			ev := events.SQSEvent{}
			for _, m := range out.Messages {
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
					Body: aws.ToString(m.Body), EventSource: "aws:sqs", EventSourceARN: ARN(w.failureURL), Attributes: m.Attributes})
			}
			if h == nil {
				if h, err = w.reconcileHandler(); err != nil {
					panic(err)
				}
			}
			a := &actor{name: fmt.Sprintf("f/%04d", n), faulty: true, mortal: true, kind: "failure"}
			fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			a.cancel, a.done = cancel, fctx.Done()
			resp := h.HandleSQS(withActor(fctx, a), ev)
			cancel()
			if w.s.isDead(a) {
				h = nil
				continue // the messages become visible again
			}
			retry := map[string]bool{}
			for _, f := range resp.BatchItemFailures {
				retry[f.ItemIdentifier] = true
			}
			for _, m := range out.Messages {
				if !retry[aws.ToString(m.MessageId)] {
					_, _ = q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.failureURL), ReceiptHandle: m.ReceiptHandle})
				}
			}
		}
	})

	// The operator's redrive sessions (after the faults of production).
	if cfg.Redrive {
		// Each session is a process of its own: its store calls fail or lose their response as
		// any actor's do, and it can die (the operator's `gapless redrive` killed) or hang
		// between two calls (until the session's minute is up, then it is killed). A session
		// that dies is run again later: by the next session, or, after the last, by one more
		// two minutes on (once the messages it had received are visible again), five at most.
		goActor(&actor{name: "operator", kind: "operator"}, func(ctx context.Context) {
			sessions := []time.Duration{4 * time.Minute, 6 * time.Minute, 8 * time.Minute}
			for n := 0; n < len(sessions); n++ {
				if !sleep(ctx, time.Until(start.Add(sessions[n]))) {
					return
				}
				d, err := w.redriver(n)
				if err != nil {
					panic(err)
				}
				a := &actor{name: fmt.Sprintf("d/%04d", n), kind: "redrive", faulty: true, mortal: true, late: true}
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				a.cancel, a.done = cancel, rctx.Done()
				rep, err := d.Run(withActor(rctx, a))
				cancel()
				dead := w.s.isDead(a)
				if debug {
					fmt.Printf("%s %s redrive: %+v err=%v dead=%v\n", time.Now().UTC().Format("15:04:05"), a.name, rep, err, dead)
				}
				if dead && n == len(sessions)-1 && len(sessions) < 5 {
					sessions = append(sessions, time.Since(start)+2*time.Minute)
				}
			}
		})
	}

	// After the heal the run goes on (faults off) until every record is accounted for or
	// MaxExtra passes: how long that takes is the time to safety; what is still unaccounted
	// then is reported lost.
	faultEnd, end := start.Add(cfg.Produce), start.Add(cfg.Produce+cfg.Heal)
	if cfg.FaultTime > 0 {
		faultEnd = start.Add(cfg.FaultTime)
		if e := faultEnd.Add(2 * time.Minute); e.After(end) {
			end = e
		}
	}
	nextCheck := end
	w.s.loop(func() bool {
		now := time.Now()
		if !now.Before(faultEnd) {
			w.s.calm()
		}
		if now.Before(nextCheck) {
			return false
		}
		nextCheck = now.Add(time.Minute)
		return !w.check().Failed() || !now.Before(end.Add(cfg.MaxExtra))
	})
	settled := time.Since(start)
	stopAll()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	w.s.loop(func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	res = w.check()
	res.Virtual = settled
	return res
}

// check states the invariants over the final state.
func (w *world) check() Result {
	res := Result{Seed: w.cfg.Seed, Counts: map[string]int{}, Faults: w.s.Log, Sites: w.s.Sites, Trace: w.s.trace, Grants: w.s.grants}
	bad := func(f string, a ...any) { res.Violations = append(res.Violations, fmt.Sprintf(f, a...)) }

	parked := map[string][]park.Message{}
	for _, body := range w.q.Bodies(w.parkedURL) {
		m, err := park.Decode(body)
		if err != nil {
			bad("parked message does not decode: %v", err)
			continue
		}
		parked[recKey(m.ShardID, m.Seq)] = append(parked[recKey(m.ShardID, m.Seq)], m)
	}
	// everParked: every park of a record, including messages a redrive has since deleted (the
	// order oracle asks when a record was first parked).
	everParked := map[string][]park.Message{}
	parkedAt := map[string]time.Time{} // record id -> its first park
	for _, body := range w.q.Sent(w.parkedURL) {
		if m, err := park.Decode(body); err == nil {
			id := recKey(m.ShardID, m.Seq)
			everParked[id] = append(everParked[id], m)
			if t, ok := parkedAt[id]; !ok || m.ParkedAt.Before(t) {
				parkedAt[id] = m.ParkedAt
			}
		}
	}
	states := map[string]checkpoint.State{}
	if sts, err := checkpoint.New(w.ddb, cpTable).List(context.Background(), group, streamName); err != nil {
		bad("checkpoint list: %v", err)
	} else {
		for _, st := range sts {
			states[st.Shard.ShardID] = st
		}
	}
	for _, it := range w.ddb.Items(ledgerTable) {
		if sk, _ := sattr(it, "sk"); sk == "H" {
			res.Counts["key holds"]++
		}
	}
	// lostSpans: the spans each shard's counting writes named (checkpoint.Store.CountLoss adds
	// the span to the set with the count).
	spans := map[string]int{}
	for _, it := range w.ddb.Items(cpTable) {
		if pk, _ := sattr(it, "pk"); pk == group+recordid.Separator+streamName {
			sk, _ := sattr(it, "sk")
			if ss, ok := it["lostSpans"].(*types.AttributeValueMemberSS); ok {
				spans[sk] = len(ss.Value)
			}
		}
	}
	res.Counts["GetRecords across the trim horizon (calls)"], res.Counts["GetRecords across the trim horizon (records skipped)"] = w.kin.Crossed()
	all := w.kin.AllRecords()
	for _, shardID := range sortedKeys(all) {
		st := states[shardID]
		trimmedUnseen, acrossHorizon := 0, false
		var unseen []string
		for _, r := range all[shardID] {
			id := recKey(shardID, r.seq)
			res.Counts["produced"]++
			seen := w.seen[id]
			ps := parked[id]
			verified := st.Watermark != "" && seqnum.Compare(r.seq, st.Watermark) <= 0
			exact := false
			for _, m := range ps {
				if bytes.Equal(m.Data, r.data) {
					exact = true
				} else {
					bad("parked with a different payload: %s (%d bytes parked, %d produced)", id, len(m.Data), len(r.data))
				}
			}
			switch {
			case len(seen) > 0:
				res.Counts["processed"]++
				if len(seen) > 1 {
					res.Counts["duplicate records"]++
					c := append([]string(nil), seen...)
					sort.Strings(c)
					res.Counts[fmt.Sprintf("dup cause %v", c)]++
				}
				if exact {
					res.Counts["processed and parked"]++
				}
			case exact:
				res.Counts["parked"]++
			case w.kin.Trimmed(shardID, r.seq):
				trimmedUnseen++
				acrossHorizon = acrossHorizon || verified
				res.Counts["trimmed unseen"]++
				unseen = append(unseen, fmt.Sprintf("%s (arrived %s, verified %v)", r.seq, r.arrival.Format("15:04:05.000"), verified))
			case verified:
				bad("verified past an unaccounted record: %s (watermark %s): not processed, not parked, not trimmed", id, st.Watermark)
			default:
				poison, killer := traits(r.data)
				bad("lost: %s neither processed, parked nor trimmed (watermark %q, checkpoint %q, poison %v, killer %v, arrived %s)",
					id, st.Watermark, st.Checkpoint, poison, killer, r.arrival.Format("15:04:05.000"))
			}
		}
		// LostToRetention counts expired spans (one per watermark move past a trimmed range),
		// not records: a shard with records trimmed unseen must have a span counted; a span
		// counted on a shard where every trimmed record was processed or parked is a false
		// alarm (the reconciler fell behind the trim horizon, not the consumer).
		switch {
		case st.LostToRetention == 0 && trimmedUnseen > 0 && acrossHorizon:
			// The watermark moved past a record that was trimmed before anyone saw it: the
			// reconciler walked across the trim horizon (an iterator taken before the trim,
			// read after it) without noticing.
			bad("verified across the trim horizon: %s has %d records trimmed unseen, at least one behind the watermark, and LostToRetention 0 (watermark %q, checkpoint %q, closed %v): %v",
				shardID, trimmedUnseen, st.Watermark, st.Checkpoint, st.Closed, unseen)
		case st.LostToRetention == 0 && trimmedUnseen > 0:
			bad("loss not counted: %s has %d records trimmed unseen and LostToRetention 0 (watermark %q, checkpoint %q, closed %v): %v",
				shardID, trimmedUnseen, st.Watermark, st.Checkpoint, st.Closed, unseen)
		}
		if int(st.LostToRetention+st.ExpiredUnverified) > spans[shardID] {
			// A span is counted once whoever finds it: every count names its span (a span proven
			// done is counted ExpiredUnverified instead, by the same write).
			bad("loss counted twice: %s has LostToRetention %d and ExpiredUnverified %d for %d distinct spans (watermark %q)",
				shardID, st.LostToRetention, st.ExpiredUnverified, spans[shardID], st.Watermark)
		}
		res.Counts["expired unverified, proven done (counted)"] += int(st.ExpiredUnverified)
		if st.LostToRetention > 0 && trimmedUnseen == 0 {
			res.Counts["false loss alarms (spans counted, nothing lost)"] += int(st.LostToRetention)
		}
		res.Counts["lost to retention (counted)"] += int(st.LostToRetention)
		if w.cfg.HoldKey {
			w.checkOrder(shardID, all[shardID], everParked, bad)
		}
		w.checkLanes(shardID, all[shardID], parkedAt, bad)
	}
	return res
}

// behindLater reports whether heldBehind (a park message's HeldBehind, "shard:seq:n") names a
// record of shardID after seq.
func behindLater(shardID, seq, heldBehind string) bool {
	parts := strings.Split(heldBehind, ":")
	return len(parts) >= 2 && parts[0] == shardID && seqnum.Compare(parts[1], seq) > 0
}

// checkOrder (ON_PARK=hold-key) is the order oracle of docs/consumer.md: within a shard, no
// record is applied while an earlier record of its key is parked (parked before it and not
// applied by then).
func (w *world) checkOrder(shardID string, recs []krec, parked map[string][]park.Message, bad func(string, ...any)) {
	type head struct {
		seq string
		at  time.Time // parked at
		m   park.Message
	}
	heads := map[string]head{} // key -> its earliest parked record so far in the shard
	for _, r := range recs {
		id := recKey(shardID, r.seq)
		applied, ok := w.first[id]
		if h, held := heads[r.key]; held && ok && applied.After(h.at) {
			if ha, hok := w.first[recKey(shardID, h.seq)]; !hok || ha.After(applied) {
				inv := "out of order"
				switch {
				case behindLater(shardID, h.seq, h.m.HeldBehind):
					// The earlier record was parked behind a later record of its key (its key
					// already held by it) and the redrive applied the later one first.
					inv = "parked behind a later record"
				case len(w.seen[id]) > 0 && w.seen[id][0] == "redrive":
					// A redrive session applied the later record first: an invariant of its own
					// while the unconfirmed-take finding is open (docs/simulator.md, "Open
					// findings").
					inv = "applied out of order by a redrive"
				}
				bad("%s: key %s: %s applied at %s (by %v) while the earlier %s was parked (since %s, by %s after %d attempts, held behind %q: %s)",
					inv, r.key, id, applied.Format("15:04:05.000"), w.seen[id], h.seq, h.at.Format("15:04:05.000"), h.m.Source, h.m.Attempts, h.m.HeldBehind, h.m.LastError)
			}
		}
		for _, m := range parked[id] {
			if h, held := heads[r.key]; !held || m.ParkedAt.Before(h.at) {
				heads[r.key] = head{seq: r.seq, at: m.ParkedAt, m: m}
			}
		}
	}
}
