package sim

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// An operator's redrive (`gapless redrive`, ON_PARK=hold-key runs with Config.Redrive): the
// real reconcile.Redriver over the parked queue, with the key holds, its pipeline running
// ON_PARK=continue over a fresh RedriveLedger, as the reconciler's main wires it.

// unordered is the parked queue as a redrive session receives it: a standard queue keeps no
// order ("Standard queues provide best-effort ordering": Amazon SQS Developer Guide, Amazon SQS
// standard queues), so each answer's messages come in a seeded order. It records, per
// partition key, the order in which the session received the records' messages.
type unordered struct {
	sqsClient
	rng *rand.Rand

	mu       sync.Mutex
	received map[string][]recordid.ID // partition key -> record ids in receive order
}

func (u *unordered) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := u.sqsClient.ReceiveMessage(ctx, in, o...)
	if err != nil {
		return out, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rng.Shuffle(len(out.Messages), func(i, j int) { out.Messages[i], out.Messages[j] = out.Messages[j], out.Messages[i] })
	for _, m := range out.Messages {
		pm, err := park.Decode(aws.ToString(m.Body))
		if err != nil {
			continue
		}
		id := recordid.ID{ShardID: pm.ShardID, Seq: pm.Seq}
		if !slices.Contains(u.received[pm.PartitionKey], id) {
			u.received[pm.PartitionKey] = append(u.received[pm.PartitionKey], id)
		}
	}
	return out, nil
}

// queueOrderHolds (MutationHoldQueueOrder) is the hold store with the defect of trusting the
// queue: a key's held records are listed in the order the session received their messages
// instead of the order they were parked in.
type queueOrderHolds struct {
	*dedupe.Holds
	q *unordered
}

func (h queueOrderHolds) Get(ctx context.Context, group, key string) (dedupe.HoldState, bool, error) {
	st, ok, err := h.Holds.Get(ctx, group, key)
	if err != nil || !ok {
		return st, ok, err
	}
	h.q.mu.Lock()
	order := slices.Clone(h.q.received[key])
	h.q.mu.Unlock()
	rank := func(id recordid.ID) int {
		if i := slices.Index(order, id); i >= 0 {
			return i
		}
		return len(order)
	}
	held := slices.Clone(st.Held[st.Applied:])
	slices.SortStableFunc(held, func(a, b recordid.ID) int { return rank(a) - rank(b) })
	st.Held = append(slices.Clone(st.Held[:st.Applied]), held...)
	if len(st.Held) > 0 {
		st.Head = st.Held[0]
	}
	return st, true, nil
}

// redriver builds one redrive session's Redriver.
func (w *world) redriver(n int) (*reconcile.Redriver, error) {
	d := ddbClient{s: w.s, m: w.ddb}
	ledger := pipeline.DedupeLedger{L: dedupe.New(d, ledgerTable, dedupe.WithLogger(w.log))}
	p, err := pipeline.New(reconcile.NewRedriveLedger(ledger), pipeline.CheckpointStore{S: checkpoint.New(d, cpTable)},
		park.New(sqsClient{s: w.s, m: w.q}, w.parkedURL), w.process,
		pipeline.Config{MaxRecordAttempts: w.cfg.MaxRecordAttempts, MaxConcurrency: 2, DeadlineMargin: 2 * time.Second},
		pipeline.WithLogger(w.log), pipeline.WithClaimer(ledger))
	if err != nil {
		return nil, err
	}
	q := &unordered{sqsClient: sqsClient{s: w.s, m: w.q}, rng: rand.New(rand.NewPCG(w.cfg.Seed, uint64(10+n))), received: map[string][]recordid.ID{}}
	var holds reconcile.RedriveHolds = dedupe.NewHolds(d, ledgerTable)
	if w.cfg.Mutation == MutationHoldQueueOrder {
		holds = queueOrderHolds{dedupe.NewHolds(d, ledgerTable), q}
	}
	return reconcile.NewRedriver(q, w.parkedURL, kinesisClient{s: w.s, m: w.kin}, p,
		reconcile.RedriveConfig{Group: group, Stream: streamName, MaxRecordAttempts: w.cfg.MaxRecordAttempts, VisibilityTimeout: time.Minute},
		reconcile.WithRedriveHolds(holds), reconcile.WithRedriveLogger(w.log))
}
