package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// attrVerifiedAsOf is where the shard's verification stood after its last walk: the arrival
// time of the oldest record behind the checkpoint that walk knew not verified, or the time of
// the walk when it knew none. A scheduled pass that hands the shards to other invocations
// measures every shard's verified lag from it, walked this pass or not.
const attrVerifiedAsOf = "verifiedAsOf"

// SetVerifiedAsOf records at as the shard's verifiedAsOf. It is a plain SET, not monotonic:
// a later walk may find an older record unverified (one the checkpoint passed since), and then
// the lag it reports must grow. One walker per shard writes it at a time (the work queue's
// message groups); a stale write from an abandoned walk can only make the lag look larger
// until the next walk. It creates the item when there is none.
func (s *Store) SetVerifiedAsOf(ctx context.Context, shard recordid.Shard, at time.Time) error {
	return s.setTime(ctx, "set verified-as-of", shard, "SET #t = :at", attrVerifiedAsOf, at)
}

// setTime writes at (RFC 3339) to the attribute attr of the shard's item with the update
// expression expr (#t names attr, :at the value), creating the item when there is none.
func (s *Store) setTime(ctx context.Context, op string, shard recordid.Shard, expr, attr string, at time.Time) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
	}
	if at.IsZero() {
		return fmt.Errorf("checkpoint: %s %s: zero time", op, shard)
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String(expr),
		ExpressionAttributeNames:  map[string]string{"#t": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": &types.AttributeValueMemberS{Value: at.UTC().Format(time.RFC3339Nano)}},
	})
	if err != nil {
		return fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
	}
	return nil
}
