// Package esm is a local stand-in for AWS Lambda's Kinesis event-source mapping: it polls a
// Kinesis stream and invokes a function with batches the way Lambda's poller does, including
// its failure handling (partial batch responses, bisection, retries, record age, OnFailure
// messages), ParallelizationFactor lanes and resharding. The demo and end-to-end tests use it
// against the local stack; it is not part of the deployed product. docs/esm.md lists each rule,
// the AWS documentation it follows, and the known differences.
package esm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// Invoker runs the function once. *rie.Instance satisfies it; tests use in-process handlers.
// The ctx carries the function timeout as its deadline; an error is a function error.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// kinesisAPI is the part of *kinesis.Client the mapping calls.
type kinesisAPI interface {
	DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
	ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(context.Context, *kinesis.GetShardIteratorInput, ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

// sqsAPI is the part of *sqs.Client the mapping calls (for OnFailure messages).
type sqsAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var (
	_ kinesisAPI = (*kinesis.Client)(nil)
	_ sqsAPI     = (*sqs.Client)(nil)
)

// ErrAlreadyRunning is returned by a second call of Run.
var ErrAlreadyRunning = errors.New("esm: mapping already ran")

// Option configures a Mapping.
type Option func(*Mapping)

// WithObserver reports every Event to fn.
func WithObserver(fn Observer) Option { return func(m *Mapping) { m.observe = fn } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(m *Mapping) { m.log = l } }

// WithStopWhenDrained makes Run return nil once every shard has been read to its end or to the
// tip of the stream and every lane is idle (for tests and the demo).
func WithStopWhenDrained() Option { return func(m *Mapping) { m.drain = true } }

// WithClock replaces time.Now for record ages and message timestamps (tests).
func WithClock(now func() time.Time) Option { return func(m *Mapping) { m.now = now } }

// WithShardDiscoveryInterval sets how often ListShards looks for new shards (default 1s).
func WithShardDiscoveryInterval(d time.Duration) Option {
	return func(m *Mapping) { m.discovery = d }
}

// WithRetryDelay sets the pause before a failed batch is retried (default 100ms).
func WithRetryDelay(d time.Duration) Option { return func(m *Mapping) { m.retryDelay = d } }

// WithRetention sets the stream's data retention period (default: the stream's
// RetentionPeriodHours from DescribeStreamSummary). Records read but not yet done that become
// older than this have expired from the stream: Lambda stops retrying them and moves on
// (see lane.trimmed). Tests and the demo set a short period to match internal/local/retention.
func WithRetention(d time.Duration) Option { return func(m *Mapping) { m.retention = d } }

// WithTrimHorizon replaces the retention period by the stream's own trim horizon: records that
// arrived before horizon() have expired (see lane.trimmed). The demo passes
// internal/local/retention's Proxy.Horizon, so the mapping drops exactly what the stream it reads
// has trimmed, also after the proxy's horizon stops moving.
func WithTrimHorizon(horizon func() time.Time) Option {
	return func(m *Mapping) { m.horizon = horizon }
}

// WithInvokeThrottle makes invocations of a shard's batches wait while throttled(shardID) is
// true, as when Lambda cannot invoke the function (throttling, reserved concurrency 0): "it
// retries until the records expire or exceed the maximum age configured on the event source
// mapping", without consuming MaximumRetryAttempts
// (https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html, "Before
// invocation"). The demo's retention fault holds one shard's consumer back this way.
func WithInvokeThrottle(throttled func(shardID string) bool) Option {
	return func(m *Mapping) { m.throttled = throttled }
}

// WithMaxBuffered bounds the records read but not yet done per shard; the reader pauses above
// it (default 100,000).
func WithMaxBuffered(n int) Option { return func(m *Mapping) { m.maxBuffered = n } }

// WithDestinationFault makes OnFailure deliveries fail as they can on AWS (a permission denied,
// a misconfigured or deleted destination, a size limit): when fn returns an error for a
// message, the message is not sent, DestinationDeliveryFailures counts it and the records are
// discarded all the same (see deliver). For tests and the demo's --dest-fail.
func WithDestinationFault(fn func(onfailure.Message) error) Option {
	return func(m *Mapping) { m.destFault = fn }
}

// Mapping is one event-source mapping: one stream, one function.
type Mapping struct {
	kin     kinesisAPI
	sqs     sqsAPI
	lanes   func(shardID string, lane int) (Invoker, error)
	cfg     Config
	observe Observer
	log     *slog.Logger
	now     func() time.Time
	filter  *filter.Filter // cfg.FilterCriteria, parsed

	drain       bool
	retention   time.Duration    // stream retention; 0 until describe reads it
	horizon     func() time.Time // WithTrimHorizon; nil: now - retention
	throttled   func(shardID string) bool
	discovery   time.Duration
	retryDelay  time.Duration
	maxBuffered int

	// Set by Run from the stream's ARN.
	streamARN, region, account, functionARN, identityARN string

	destFault        func(onfailure.Message) error
	deliveryFailures atomic.Int64
	s3dest           *s3Destination // WithS3Destination (s3dest.go)

	mu          sync.Mutex
	ran         bool
	checkpoints map[string][]string
}

// New returns a mapping. lanes is called once per lane when a shard starts (lane in
// 0..ParallelizationFactor-1) and returns that lane's invoker; each lane invokes serially, so
// one *rie.Instance per lane never sees overlapping invocations. The caller owns the invokers
// (EventShardFinished tells when a shard's lanes are done). sqs may be nil without
// OnFailureQueueURL. Zero Config fields with a default get it (see Config).
func New(kin kinesisAPI, sqsClient sqsAPI, lanes func(shardID string, lane int) (Invoker, error), cfg Config, opts ...Option) (*Mapping, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	flt, err := cfg.filter()
	if err != nil {
		return nil, err
	}
	if kin == nil || lanes == nil {
		return nil, fmt.Errorf("%w: a Kinesis client and a lane factory are required", ErrConfig)
	}
	if cfg.OnFailureQueueURL != "" && sqsClient == nil {
		return nil, fmt.Errorf("%w: OnFailureQueueURL needs an SQS client", ErrConfig)
	}
	m := &Mapping{
		kin: kin, sqs: sqsClient, lanes: lanes, cfg: cfg,
		log:         slog.New(slog.DiscardHandler),
		now:         time.Now,
		discovery:   time.Second,
		retryDelay:  100 * time.Millisecond,
		maxBuffered: 100000,
		checkpoints: map[string][]string{},
		filter:      flt,
	}
	for _, o := range opts {
		o(m)
	}
	if m.discovery <= 0 || m.maxBuffered <= 0 || m.retryDelay < 0 {
		return nil, fmt.Errorf("%w: discovery interval and buffer bound must be positive", ErrConfig)
	}
	if err := m.validS3Destination(); err != nil {
		return nil, err
	}
	return m, nil
}

// DestinationDeliveryFailures is the count of OnFailure messages that could not be delivered
// (their records were discarded without a trace in the destination): Lambda's
// DestinationDeliveryFailures metric.
func (m *Mapping) DestinationDeliveryFailures() int64 { return m.deliveryFailures.Load() }

// Config returns the effective configuration (defaults applied).
func (m *Mapping) Config() Config { return m.cfg }

// Checkpoints returns each started shard's lane checkpoints ("" for a lane with none yet).
func (m *Mapping) Checkpoints() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]string, len(m.checkpoints))
	for k, v := range m.checkpoints {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func (m *Mapping) emit(e Event) {
	if m.observe == nil {
		return
	}
	e.Time = m.now()
	m.observe(e)
}

// Run polls the stream and invokes the function until ctx ends (returning ctx's error) or,
// with WithStopWhenDrained, until everything is drained (returning nil). A Mapping runs once.
func (m *Mapping) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ran {
		m.mu.Unlock()
		return ErrAlreadyRunning
	}
	m.ran = true
	m.mu.Unlock()

	if err := m.describe(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	started := map[string]*shardRun{}
	finished := map[string]bool{}
	finishedCh := make(chan string, 64)
	fatal := make(chan error, 1)
	initial := true
	tick := time.NewTicker(m.discovery)
	defer tick.Stop()

	for {
		shards, err := m.listShards(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			m.log.WarnContext(ctx, "esm: ListShards failed", "error", err)
		default:
			known := make(map[string]bool, len(shards))
			for _, s := range shards {
				known[aws.ToString(s.ShardId)] = true
			}
			for _, s := range shards {
				id := aws.ToString(s.ShardId)
				if started[id] != nil || finished[id] {
					continue
				}
				closed := s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil
				if initial && m.cfg.StartingPosition == Latest && closed {
					// LATEST: nothing new will ever arrive in a shard closed before we started.
					finished[id] = true
					continue
				}
				parents := parentsOf(s)
				ready := true
				for _, p := range parents {
					// A parent no longer listed has expired from the stream: nothing to wait for.
					if known[p] && !finished[p] {
						ready = false
					}
				}
				if !ready {
					continue
				}
				pos := m.cfg.StartingPosition
				if !initial && pos == Latest {
					// A shard that appeared while running is read from its first record.
					pos = TrimHorizon
				}
				sr := m.newShardRun(id, parents)
				started[id] = sr
				wg.Go(func() {
					err := sr.run(ctx, pos)
					if err != nil && ctx.Err() == nil {
						select {
						case fatal <- err:
						default:
						}
						return
					}
					if err == nil {
						select {
						case finishedCh <- id:
						case <-ctx.Done():
						}
					}
				})
			}
			initial = false
			if m.drain && m.drained(shards, started, finished) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fatal:
			return err
		case id := <-finishedCh:
			finished[id] = true
			delete(started, id)
		case <-tick.C:
		}
	}
}

// drained reports whether every listed shard is finished, or started, read to the tip and
// idle. A listed shard not yet started (waiting for its parents) is not drained.
func (m *Mapping) drained(shards []kintypes.Shard, started map[string]*shardRun, finished map[string]bool) bool {
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if finished[id] {
			continue
		}
		sr := started[id]
		if sr == nil || !sr.drained() {
			return false
		}
	}
	return true
}

func parentsOf(s kintypes.Shard) []string {
	var ps []string
	for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
		if p != nil && *p != "" {
			ps = append(ps, *p)
		}
	}
	return ps
}

// describe learns the stream ARN, and from it the region and account for the event records,
// the function ARN and the OnFailure message.
func (m *Mapping) describe(ctx context.Context) error {
	out, err := m.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(m.cfg.StreamName)})
	if err != nil {
		return fmt.Errorf("esm: describe stream %s: %w", m.cfg.StreamName, err)
	}
	m.streamARN = aws.ToString(out.StreamDescriptionSummary.StreamARN)
	// arn:aws:kinesis:<region>:<account>:stream/<name>
	parts := strings.SplitN(m.streamARN, ":", 6)
	if len(parts) != 6 || parts[2] != "kinesis" {
		return fmt.Errorf("esm: stream %s has an unexpected ARN %q", m.cfg.StreamName, m.streamARN)
	}
	m.region, m.account = parts[3], parts[4]
	if m.retention <= 0 {
		m.retention = time.Duration(aws.ToInt32(out.StreamDescriptionSummary.RetentionPeriodHours)) * time.Hour
	}
	m.functionARN = fmt.Sprintf("arn:%s:lambda:%s:%s:function:%s", parts[1], m.region, m.account, m.cfg.FunctionName)
	m.identityARN = fmt.Sprintf("arn:%s:iam::%s:role/%s-role", parts[1], m.account, m.cfg.FunctionName)
	return nil
}

func (m *Mapping) listShards(ctx context.Context) ([]kintypes.Shard, error) {
	var shards []kintypes.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(m.cfg.StreamName)}
	for {
		out, err := m.kin.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("esm: list shards of %s: %w", m.cfg.StreamName, err)
		}
		shards = append(shards, out.Shards...)
		if out.NextToken == nil || *out.NextToken == "" {
			return shards, nil
		}
		// NextToken and StreamName are mutually exclusive in ListShards.
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

func (m *Mapping) setCheckpoint(shardID string, lane int, seq string) {
	m.mu.Lock()
	cps := m.checkpoints[shardID]
	if cps == nil {
		cps = make([]string, m.cfg.ParallelizationFactor)
		m.checkpoints[shardID] = cps
	}
	cps[lane] = seq
	m.mu.Unlock()
}
