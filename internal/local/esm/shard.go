package esm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/ctxtime"
)

// getRecordsLimit is the most records one GetRecords call returns.
const getRecordsLimit = 10000

// shardRun reads one shard and feeds its records to the shard's lanes.
type shardRun struct {
	m       *Mapping
	id      string
	parents []string
	lanes   []*lane // fixed at construction
	atTip   atomic.Bool
}

func (m *Mapping) newShardRun(id string, parents []string) *shardRun {
	s := &shardRun{m: m, id: id, parents: parents}
	for i := range m.cfg.ParallelizationFactor {
		s.lanes = append(s.lanes, newLane(s, i))
	}
	return s
}

// run reads the shard from pos to its end (SHARD_END) and waits until every lane has finished
// its records. It returns nil only when the shard is finished.
func (s *shardRun) run(ctx context.Context, pos string) error {
	for _, l := range s.lanes {
		inv, err := s.m.lanes(s.id, l.idx)
		if err != nil {
			return fmt.Errorf("esm: invoker for lane %d of %s: %w", l.idx, s.id, err)
		}
		if inv == nil {
			return fmt.Errorf("esm: nil invoker for lane %d of %s", l.idx, s.id)
		}
		l.inv = inv
		s.m.setCheckpoint(s.id, l.idx, "")
	}
	s.m.emit(Event{Type: EventShardStarted, ShardID: s.id, Parents: s.parents})
	s.m.log.InfoContext(ctx, "esm: shard started", "shard_id", s.id, "position", pos, "parents", s.parents)

	var wg sync.WaitGroup
	for _, l := range s.lanes {
		wg.Go(func() { l.run(ctx) })
	}
	err := s.read(ctx, pos)
	for _, l := range s.lanes {
		l.close()
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.m.emit(Event{Type: EventShardFinished, ShardID: s.id})
	s.m.log.InfoContext(ctx, "esm: shard finished", "shard_id", s.id)
	return nil
}

// drained reports whether the reader is at the tip (or the end) and every lane is idle.
func (s *shardRun) drained() bool {
	if !s.atTip.Load() {
		return false
	}
	for _, l := range s.lanes {
		if !l.idle() {
			return false
		}
	}
	return true
}

func (s *shardRun) buffered() int {
	n := 0
	for _, l := range s.lanes {
		n += l.pending()
	}
	return n
}

// read polls the shard every PollInterval (Lambda polls each shard once per second; Kinesis
// allows 5 GetRecords calls per second per shard, shared by all readers) and routes each
// record to its lane. It returns nil at the end of a closed shard.
func (s *shardRun) read(ctx context.Context, pos string) error {
	m := s.m
	it, err := s.iterator(ctx, pos, "")
	if err != nil {
		return err
	}
	lastSeq := ""
	var lastRead time.Time
	for {
		if err := ctxtime.Sleep(ctx, time.Until(lastRead.Add(m.cfg.PollInterval))); err != nil {
			return err
		}
		for s.buffered() >= m.maxBuffered {
			if err := ctxtime.Sleep(ctx, m.cfg.PollInterval); err != nil {
				return err
			}
		}
		s.atTip.Store(false)
		lastRead = time.Now()
		out, err := m.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(getRecordsLimit)})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var expired *kintypes.ExpiredIteratorException
			if errors.As(err, &expired) {
				if it, err = s.iterator(ctx, pos, lastSeq); err != nil {
					return err
				}
				continue
			}
			// Throttling (ProvisionedThroughputExceededException) and other transient errors:
			// the SDK has retried already; wait for the next poll.
			m.log.WarnContext(ctx, "esm: GetRecords failed", "shard_id", s.id, "sequence_number", lastSeq, "error", err)
			continue
		}
		// Hand each lane its records of this read at once, as Lambda forms batches from what
		// it has read, rather than trickling them in one by one.
		perLane := make([][]*record, len(s.lanes))
		for _, r := range out.Records {
			rec, err := m.newRecord(s.id, r)
			if err != nil {
				return err
			}
			i := LaneOf(rec.key, len(s.lanes))
			perLane[i] = append(perLane[i], rec)
			lastSeq = rec.seq
		}
		for i, recs := range perLane {
			if len(recs) > 0 {
				s.lanes[i].push(recs...)
			}
		}
		if out.NextShardIterator == nil {
			// SHARD_END: the shard is closed and read to its last record.
			s.atTip.Store(true)
			return nil
		}
		it = out.NextShardIterator
		if len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
			s.atTip.Store(true)
		}
	}
}

// iterator returns a shard iterator at pos, or just after the sequence number after.
func (s *shardRun) iterator(ctx context.Context, pos, after string) (*string, error) {
	m := s.m
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(m.cfg.StreamName), ShardId: aws.String(s.id)}
	switch {
	case after != "":
		in.ShardIteratorType = kintypes.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(after)
	case pos == AtTimestamp:
		in.ShardIteratorType = kintypes.ShardIteratorTypeAtTimestamp
		in.Timestamp = aws.Time(m.cfg.StartingTimestamp)
	case pos == Latest:
		in.ShardIteratorType = kintypes.ShardIteratorTypeLatest
	default:
		in.ShardIteratorType = kintypes.ShardIteratorTypeTrimHorizon
	}
	for {
		out, err := m.kin.GetShardIterator(ctx, in)
		if err == nil {
			return out.ShardIterator, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var inval *kintypes.InvalidArgumentException
		if after != "" && errors.As(err, &inval) {
			// The records after the last one read have expired (Kinesis refuses a
			// StartingSequenceNumber it can no longer serve): like Lambda, which discards expired
			// records and continues with the stream, go on from the oldest record still held.
			m.log.WarnContext(ctx, "esm: records expired from the stream before they were read", "shard_id", s.id, "sequence_number", after, "error", err)
			in.ShardIteratorType, in.StartingSequenceNumber = kintypes.ShardIteratorTypeTrimHorizon, nil
			continue
		}
		m.log.WarnContext(ctx, "esm: GetShardIterator failed", "shard_id", s.id, "sequence_number", after, "error", err)
		if err := ctxtime.Sleep(ctx, m.cfg.PollInterval); err != nil {
			return nil, err
		}
	}
}
