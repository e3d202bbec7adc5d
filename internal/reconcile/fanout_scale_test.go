package reconcile

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// groupQueue is workQueue with SQS FIFO's delivery rule: a message is handed out only while no
// other message of its group is in flight. TEST-ONLY.
type groupQueue struct {
	*workQueue
	inFlight map[string]bool
}

// receive takes the oldest message whose group has none in flight.
func (q *groupQueue) receive() (events.SQSMessage, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, m := range q.msgs {
		g := m.Attributes["MessageGroupId"]
		if q.inFlight[g] {
			continue
		}
		q.inFlight[g] = true
		q.msgs = append(q.msgs[:i:i], q.msgs[i+1:]...)
		return m, true
	}
	return events.SQSMessage{}, false
}

// finish ends m's flight: deleted, or (failed) back at the head of its group.
func (q *groupQueue) finish(m events.SQSMessage, failed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.inFlight, m.Attributes["MessageGroupId"])
	if failed {
		q.msgs = append([]events.SQSMessage{m}, q.msgs...)
	}
}

// The fan-out keeps up at scale, in virtual time (testing/synctest): 1,000 shards each written
// at 1 MB/s (one 1 MB record per second, processed by the consumer as it arrives: ledger entry
// and checkpoint every 10 s), a coordinator every 5 minutes, walkers under a concurrency bound
// of 1,000 with a 300 s function timeout, each shard read at the production pace (one
// GetRecords per second, 1 MiB/s; pages of at most 10 MB, Kinesis's limit per call). Every
// coordinator's group lag stays within one schedule period + settle + one walk (the function
// timeout), far below the verified-lag alarm's 3 hours, every shard is walked every period,
// and no record is replayed (all were processed). GAPLESS_SCALE_SHARDS changes the shard
// count (default 1,000, about a minute on 2 cores: `make scale`; under the race detector or
// -short, 100).
func TestFanOutKeepsUpAtScale(t *testing.T) {
	t.Parallel()
	shards := 1000
	if testing.Short() || raceDetector {
		shards = 100
	}
	if v := os.Getenv("GAPLESS_SCALE_SHARDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("GAPLESS_SCALE_SHARDS=%q: want a positive shard count", v)
		}
		shards = n
	}
	const (
		period      = 5 * time.Minute
		settle      = time.Minute
		timeout     = 300 * time.Second // the reconciler function's timeout
		periods     = 4
		recordBytes = 1_000_000
		batch       = 10 // records per consumer batch (ledger entry and checkpoint)
		alarmAt     = 3 * time.Hour
	)
	data := make([]byte, recordBytes) // one buffer for every record: memory stays small
	synctest.Test(t, func(t *testing.T) {
		var mss []*memShard
		for i := range shards {
			mss = append(mss, &memShard{id: fmt.Sprintf("shardId-%012d", i)})
		}
		kin := newMemKinesis(mss...)
		u := newUnit(t, kin, Config{SettleAfter: settle, PageLimit: 10, ReadInterval: time.Second, ReadBytesPerSecond: 1 << 20},
			WithClock(time.Now))
		q := &groupQueue{workQueue: &workQueue{}, inFlight: map[string]bool{}}
		h := NewHandler(u.r, nil, discard(), WithVerifyQueue(q.workQueue, verifyURL))
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		start := time.Now()
		var wg sync.WaitGroup

		// The producer and consumer: one record per shard per second; every batch records
		// a ledger entry and moves the checkpoint.
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				now := time.Now()
				kin.mu.Lock()
				for _, sh := range mss {
					sh.recs = append(sh.recs, kintypes.Record{SequenceNumber: aws.String(fakeSeq(n)), PartitionKey: aws.String("k"),
						Data: data, ApproximateArrivalTimestamp: aws.Time(now)})
				}
				kin.mu.Unlock()
				if (n+1)%batch == 0 {
					for _, sh := range mss {
						e := pipeline.Entry{Source: pipeline.SourceConsumer, Done: fakeIDs(sh.id, n+1-batch, n)}
						e.First, e.Last = e.Done[0].Seq, e.Done[batch-1].Seq
						if err := u.ledger.Record(ctx, ushard(sh.id), e); err != nil {
							t.Error(err)
						}
						u.cps.Edit(ushard(sh.id), func(st *checkpoint.State) { st.Checkpoint, st.CheckpointAt = fakeSeq(n), time.Now() })
					}
				}
				time.Sleep(time.Second)
			}
		})
		// The verify queue's event source: walkers, BatchSize 1, each invocation with the
		// function's timeout.
		var mu sync.Mutex
		walks := map[string]int{}
		for range shards {
			wg.Go(func() {
				for ctx.Err() == nil {
					m, ok := q.receive()
					if !ok {
						time.Sleep(2 * time.Second)
						continue
					}
					ictx, cancel := context.WithTimeout(ctx, timeout)
					resp := h.HandleSQS(ictx, events.SQSEvent{Records: []events.SQSMessage{m}})
					cancel()
					q.finish(m, len(resp.BatchItemFailures) > 0)
					mu.Lock()
					walks[m.Attributes["MessageGroupId"]]++
					mu.Unlock()
				}
			})
		}
		// The schedule.
		var lags []time.Duration
		for p := 1; p <= periods; p++ {
			time.Sleep(time.Until(start.Add(time.Duration(p) * period)))
			mu.Lock()
			before := len(walks)
			mu.Unlock()
			sum, err := h.HandleSchedule(ctx)
			if err != nil {
				t.Fatalf("pass %d: %v", p, err)
			}
			lag := time.Duration(sum.VerifiedLagSec * float64(time.Second))
			lags = append(lags, lag)
			if p > 1 && before < shards {
				t.Errorf("pass %d: %d of %d shards walked since the start", p, before, shards)
			}
			if sum.ShardsQueued != shards {
				t.Errorf("pass %d: %d shards queued, want %d", p, sum.ShardsQueued, shards)
			}
			if bound := period + settle + timeout; lag > bound || lag >= alarmAt {
				t.Errorf("pass %d: group verified lag %v, want at most one period + settle + one walk (%v)", p, lag, bound)
			}
		}
		stop()
		wg.Wait()
		// Every record the walks reached was verified, none replayed (all processed).
		if n := len(u.rec.counts()); n != 0 {
			t.Errorf("%d records replayed; all were processed", n)
		}
		var behind []string
		for _, sh := range mss {
			if st := u.cps.State(sh.id); st.Watermark == "" || st.VerifiedAsOf.IsZero() {
				behind = append(behind, sh.id)
			}
		}
		if len(behind) > 0 {
			t.Errorf("%d shards never verified (%v...)", len(behind), behind[0])
		}
		t.Logf("%d shards, %d passes every %v: group verified lag per pass %v", shards, periods, period, lags)
	})
}
