package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// kinesisAPI lists only the Kinesis calls the reconciler makes; *kinesis.Client satisfies it.
type kinesisAPI interface {
	ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(context.Context, *kinesis.GetShardIteratorInput, ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(context.Context, *kinesis.GetRecordsInput, ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

var _ kinesisAPI = (*kinesis.Client)(nil)

// errTrimmed reports that GetShardIterator refused a position because the records after it
// have expired: proof that an unverified record was trimmed.
var errTrimmed = errors.New("position older than the trim horizon")

// errNoRecord reports that kinesis-local refused a sequence number it holds no record for (it
// refuses any number that is not a record, e.g. a shard's starting or ending sequence number):
// not proof that anything expired.
var errNoRecord = errors.New("no record with that sequence number")

// shardReader reads one shard from a starting position, pacing GetRecords calls so that the
// reconciler leaves most of the shard's read capacity to the event-source mapping: a shard
// serves 5 GetRecords calls and 2 MB per second to all its polling consumers together (Kinesis
// Data Streams quotas). The reader waits at least interval between calls, and after a call that
// returned B bytes at least B/bytesPerSec, so a 10 MB page is not followed by another at once.
type shardReader struct {
	kin         kinesisAPI
	stream      string
	streamARN   string // when set, used instead of stream (see Config.StreamARN)
	shardID     string
	interval    time.Duration
	bytesPerSec int64
	limit       int32
	// closed: the shard is known to be closed, so an empty page is never its end: only a nil
	// NextShardIterator is (GetRecords returns empty pages mid-shard).
	closed bool

	iterator *string
	nextAt   time.Time // earliest time of the next GetRecords call
	ended    bool      // NextShardIterator was nil: the shard is closed and read to its end
	calls    int       // GetRecords calls made
	// emptyAt: when the last page was empty and reported how far behind current time it is
	// (MillisBehindLatest > 0), the time of the portion of the shard it read (the call's start
	// minus MillisBehindLatest, so at or before it): no record after the pages before it arrived
	// earlier. Zero after a page with records, or an empty page at the tip (0).
	emptyAt time.Time
}

// open positions the reader: typ AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER seq, or
// TRIM_HORIZON when seq is empty.
func (r *shardReader) open(ctx context.Context, typ types.ShardIteratorType, seq string) error {
	in := &kinesis.GetShardIteratorInput{ShardId: aws.String(r.shardID)}
	in.StreamName, in.StreamARN = streamRef(r.stream, r.streamARN)
	if seq == "" {
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	} else {
		in.ShardIteratorType = typ
		in.StartingSequenceNumber = aws.String(seq)
	}
	out, err := r.kin.GetShardIterator(ctx, in)
	if err != nil {
		if seq != "" {
			var inval *types.InvalidArgumentException
			var nf *types.ResourceNotFoundException
			switch {
			case errors.As(err, &inval):
				return fmt.Errorf("%w: shard %s %s %s: %v", errTrimmed, r.shardID, typ, seq, err)
			case errors.As(err, &nf) && strings.Contains(nf.ErrorMessage(), "Unable to find record"):
				return fmt.Errorf("%w: shard %s %s %s: %v", errNoRecord, r.shardID, typ, seq, err)
			}
		}
		return fmt.Errorf("reconcile: GetShardIterator %s %s: %w", r.shardID, in.ShardIteratorType, err)
	}
	r.iterator = out.ShardIterator
	r.ended = r.iterator == nil
	return nil
}

// Kinesis answers InvalidArgumentException for a StartingSequenceNumber it cannot serve
// because the records after it expired (the only error the GetShardIterator API reference
// documents for a bad position; consumers report it for expired checkpoints, as handled in
// harlow/kinesis-consumer#175; internal/local/retention answers the same locally). kinesis-mock
// (kinesis-local) answers ResourceNotFoundException "Unable to find record with provided
// SequenceNumber" for any number it holds no record for; a ResourceNotFoundException for a
// missing stream or shard is neither.

// next returns the next page of records. caughtUp is true when the page is empty and the reader
// is at the end of a closed shard (ended: NextShardIterator nil) or, for a shard not known to
// be closed, at the tip (MillisBehindLatest 0: "record processing is caught up").
func (r *shardReader) next(ctx context.Context) (recs []types.Record, caughtUp bool, err error) {
	if r.ended || r.iterator == nil {
		return nil, true, nil
	}
	if wait := time.Until(r.nextAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-t.C:
		}
	}
	start := time.Now()
	r.calls++
	in := &kinesis.GetRecordsInput{ShardIterator: r.iterator}
	if r.streamARN != "" {
		in.StreamARN = aws.String(r.streamARN)
	}
	if r.limit > 0 {
		in.Limit = aws.Int32(r.limit)
	}
	out, err := r.kin.GetRecords(ctx, in)
	if err != nil {
		return nil, false, fmt.Errorf("reconcile: GetRecords %s: %w", r.shardID, err)
	}
	var bytes int64
	for _, rec := range out.Records {
		bytes += int64(len(rec.Data)) + int64(len(aws.ToString(rec.PartitionKey)))
	}
	pause := r.interval
	if r.bytesPerSec > 0 {
		if d := time.Duration(bytes * int64(time.Second) / r.bytesPerSec); d > pause {
			pause = d
		}
	}
	r.nextAt = start.Add(pause)
	r.iterator = out.NextShardIterator
	if r.iterator == nil {
		r.ended = true
	}
	behind := aws.ToInt64(out.MillisBehindLatest)
	switch {
	case len(out.Records) > 0:
		r.emptyAt = time.Time{}
	case behind > 0:
		if at := start.Add(-time.Duration(behind) * time.Millisecond); at.After(r.emptyAt) {
			r.emptyAt = at
		}
	}
	return out.Records, len(out.Records) == 0 && (r.ended || (!r.closed && behind == 0)), nil
}
