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

// attrScopeFrom is the time from which records of the group's stream are the event-source
// mapping's responsibility when it starts at LATEST (docs/reconciler.md, "A lineage the mapping
// never checkpointed"). The reconciler writes it once; it never moves.
const attrScopeFrom = "scopeFrom"

// SetScopeFrom records at on the shard's item as the time the group's responsibility for the
// stream starts, unless the item already holds one (if_not_exists: the first write wins and the
// value never moves, so repeating it is harmless). It creates the item when there is none.
func (s *Store) SetScopeFrom(ctx context.Context, shard recordid.Shard, at time.Time) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("checkpoint: set scope %s: %w", shard, err)
	}
	if at.IsZero() {
		return fmt.Errorf("checkpoint: set scope %s: zero time", shard)
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String("SET #scope = if_not_exists(#scope, :at)"),
		ExpressionAttributeNames:  map[string]string{"#scope": attrScopeFrom},
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": &types.AttributeValueMemberS{Value: at.UTC().Format(time.RFC3339Nano)}},
	})
	if err != nil {
		return fmt.Errorf("checkpoint: set scope %s: %w", shard, err)
	}
	return nil
}
