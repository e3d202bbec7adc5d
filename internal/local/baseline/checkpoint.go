package baseline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// ErrCheckpointStore fails an invocation whose checkpoint could not be read or written.
var ErrCheckpointStore = errors.New("baseline: checkpoint store unavailable")

// CheckpointStore is the shared, per-shard checkpoint the report's consumers raced on (a
// compare-and-replace metadata store). Keys are "<group>:<stream>:<shardId>".
type CheckpointStore interface {
	// Get returns the stored sequence number of key, "" when key has none.
	Get(ctx context.Context, key string) (string, error)
	// Replace stores next under key when the stored value is still old ("" meaning absent) and
	// reports whether it did; false means another writer changed it first (a lost race).
	Replace(ctx context.Context, key, old, next string) (bool, error)
}

// CheckpointDecides returns the handler of the field report's consumer (spring-integration-aws
// 2.0.0.M2, batch checkpoint mode, several consumers on one shard), where the checkpoint
// decides what is processed:
//
//  1. read the shard's stored checkpoint (key "<group>:<stream>:<shardId>");
//  2. drop the records at or below it: "assumed processed by the other consumer"
//     (Stats.Filtered);
//  3. process the rest, as Bare does (in order, or partition keys concurrently);
//  4. compare-and-replace the checkpoint, from the value read in step 1 to the last record
//     processed before the lowest failure (the batch's last record when none failed), the way
//     the report's ShardCheckpointer did: a stored value at or past it, or one that changed
//     since step 1, loses the replace;
//  5. a lost replace skips the batch's remaining work: the handler returns success, so the
//     records that failed in step 3 are never retried — "another consumer is further on"
//     (Stats.RacesLost, Stats.Abandoned). A won replace reports the lowest failure as Bare does.
//
// Alone on a shard (one consumer, batches in order) it loses nothing. With two consumers on a
// shard — a ParallelizationFactor above 1, whose concurrent batches hold different partition
// keys of one shard, or a second mapping on the same stream and group — step 2 drops records
// nobody processed whenever another batch moved the checkpoint past them, and step 5 drops
// failed records: the report's ~40 of 4,500. It is kept here to show that failure, never to use.
func CheckpointDecides(store CheckpointStore, group string, process pipeline.ProcessFunc, opts ...Option) Handler {
	o := newOptions(opts)
	inner := o.handler(func(ctx context.Context, _ *events.KinesisEventRecord, r pipeline.Record) error {
		if err := call(ctx, process, r); err != nil {
			return err
		}
		o.stats.Processed.Add(1)
		return nil
	})
	return func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
		if len(ev.Records) == 0 {
			return events.KinesisEventResponse{}, nil
		}
		first := &ev.Records[0]
		key := CheckpointKey(group, streamOf(first.EventSourceArn), shardOf(first.EventID))
		stored, err := store.Get(ctx, key)
		if err != nil {
			return events.KinesisEventResponse{}, fmt.Errorf("%w: get %s: %w", ErrCheckpointStore, key, err)
		}
		rest := ev.Records
		if stored != "" {
			rest = make([]events.KinesisEventRecord, 0, len(ev.Records))
			for _, r := range ev.Records {
				if seqnum.Validate(r.Kinesis.SequenceNumber) == nil && seqnum.Compare(r.Kinesis.SequenceNumber, stored) <= 0 {
					o.stats.Filtered.Add(1)
					continue
				}
				rest = append(rest, r)
			}
		}
		if len(rest) == 0 {
			return events.KinesisEventResponse{}, nil
		}
		resp, err := inner(ctx, events.KinesisEvent{Records: rest})
		if err != nil {
			return resp, err
		}
		// The checkpoint goes to the last record before the lowest failure.
		target, failed := rest[len(rest)-1].Kinesis.SequenceNumber, 0
		if len(resp.BatchItemFailures) > 0 {
			lowest := resp.BatchItemFailures[0].ItemIdentifier
			target = ""
			for i, r := range rest {
				if r.Kinesis.SequenceNumber == lowest {
					failed = len(rest) - i
					break
				}
				target = r.Kinesis.SequenceNumber
			}
		}
		if target == "" {
			return resp, nil // the first record failed: nothing to checkpoint
		}
		won := false
		if stored == "" || seqnum.Compare(stored, target) < 0 {
			if won, err = store.Replace(ctx, key, stored, target); err != nil {
				return events.KinesisEventResponse{}, fmt.Errorf("%w: replace %s: %w", ErrCheckpointStore, key, err)
			}
		}
		if !won {
			o.stats.RacesLost.Add(1)
			o.stats.Abandoned.Add(int64(failed))
			o.log.WarnContext(ctx, "checkpoint replace lost: skipping the rest of the batch", "shard_id", shardOf(first.EventID),
				"sequence_number", target, "stored", stored, "abandoned", failed)
			return events.KinesisEventResponse{}, nil
		}
		return resp, nil
	}
}

// CheckpointKey is the report's metadata key of a shard: "<group>:<stream>:<shardId>".
func CheckpointKey(group, stream, shardID string) string {
	return group + ":" + stream + ":" + shardID
}

// streamOf is the stream name of a stream ARN (arn:aws:kinesis:region:account:stream/name).
func streamOf(arn string) string {
	if _, name, ok := strings.Cut(arn, ":stream/"); ok {
		return name
	}
	return arn
}

// Attribute names of DynamoCheckpoints' items (in a table keyed by AttrID, as Ensure makes).
const (
	AttrSequence = "sequence" // the raw sequence number
	AttrEncoded  = "encoded"  // seqnum.Encode of it: the value the condition compares
)

// DynamoCheckpoints is a CheckpointStore in a DynamoDB table with partition key AttrID (S), the
// table Ensure creates. Replace is a PutItem conditional on the stored encoded value, as the
// report's DynamoDbMetadataStore.replace is.
type DynamoCheckpoints struct {
	client DynamoAPI
	table  string
}

var _ CheckpointStore = (*DynamoCheckpoints)(nil)

// NewDynamoCheckpoints returns the store over table.
func NewDynamoCheckpoints(client DynamoAPI, table string) *DynamoCheckpoints {
	return &DynamoCheckpoints{client: client, table: table}
}

// Get reads the checkpoint with a consistent read; a missing item is "".
func (d *DynamoCheckpoints) Get(ctx context.Context, key string) (string, error) {
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: keyOf(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return "", err
	}
	v, ok := out.Item[AttrSequence].(*types.AttributeValueMemberS)
	if !ok {
		return "", nil
	}
	return v.Value, nil
}

// Replace writes next when the stored value is still old.
func (d *DynamoCheckpoints) Replace(ctx context.Context, key, old, next string) (bool, error) {
	enc, err := seqnum.Encode(next)
	if err != nil {
		return false, err
	}
	in := &dynamodb.PutItemInput{
		TableName: aws.String(d.table),
		Item: map[string]types.AttributeValue{
			AttrID:       &types.AttributeValueMemberS{Value: key},
			AttrSequence: &types.AttributeValueMemberS{Value: next},
			AttrEncoded:  &types.AttributeValueMemberS{Value: enc},
		},
		ExpressionAttributeNames: map[string]string{"#id": AttrID},
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
	}
	if old != "" {
		oldEnc, err := seqnum.Encode(old)
		if err != nil {
			return false, err
		}
		in.ConditionExpression = aws.String("#enc = :old")
		in.ExpressionAttributeNames = map[string]string{"#enc": AttrEncoded}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":old": &types.AttributeValueMemberS{Value: oldEnc}}
	}
	_, err = d.client.PutItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ccf):
		return false, nil
	default:
		return false, err
	}
}
