package sim

import (
	"context"
	"maps"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// dedupeAPI is what the ledger and the checkpoint store need of a DynamoDB client.
type dedupeAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// holdsAPI is what the key-hold store needs.
type holdsAPI interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// mutantDDB drops chosen writes of the consumer: it answers them as applied and stores
// nothing (a test-only defect).
type mutantDDB struct {
	ddbClient
	mutation string
}

func (m mutantDDB) drop(item map[string]types.AttributeValue) bool {
	sk, _ := sattr(item, "sk")
	switch m.mutation {
	case MutationDropMarker:
		return strings.Contains(sk, "#M#")
	case MutationDropLedger:
		return strings.Contains(sk, "#B#")
	}
	return false
}

func (m mutantDDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if m.drop(in.Item) {
		return &dynamodb.PutItemOutput{}, nil
	}
	return m.ddbClient.PutItem(ctx, in, o...)
}

func (m mutantDDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if sk, _ := sattr(in.Key, "sk"); m.mutation == MutationDropHold && sk == "H" {
		// Answered as if the key were not held before (the record becomes the head); nothing
		// is stored.
		ok, err := evalCond(aws.ToString(in.ConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, nil)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, condFailed(nil, in.ReturnValuesOnConditionCheckFailure)
		}
		item, err := applyUpdate(aws.ToString(in.UpdateExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, clone(in.Key))
		if err != nil {
			return nil, err
		}
		return &dynamodb.UpdateItemOutput{Attributes: item}, nil
	}
	if m.mutation == MutationCountOnDirection && in.ExpressionAttributeNames["#spans"] == "lostSpans" {
		// checkpoint.Store.CountLoss's write, with the condition it had before a span was named
		// by the watermark it follows: the advance moves the watermark forward (a count in place
		// has no condition at all). The span is still added to lostSpans, so a second count of
		// it shows as more counts than spans.
		c := *in
		c.ExpressionAttributeValues = maps.Clone(in.ExpressionAttributeValues)
		delete(c.ExpressionAttributeValues, ":prev")
		delete(c.ExpressionAttributeValues, ":span")
		c.ConditionExpression = nil
		if _, ok := c.ExpressionAttributeValues[":enc"]; ok {
			c.ConditionExpression = aws.String("attribute_not_exists(#enc) OR #enc < :enc")
		} else {
			delete(c.ExpressionAttributeNames, "#enc")
		}
		in = &c
	}
	return m.ddbClient.UpdateItem(ctx, in, o...)
}

// mutantCheckpoints (MutationCloseBeforeCount) is the reconciler's checkpoint store with the
// order of a closed shard's last two writes reversed: the count of the span that expired before
// the shard's end (the advance to its ending sequence number) is preceded by the mark that makes
// the shard final, so a death between them leaves a final shard with its loss uncounted.
type mutantCheckpoints struct {
	*checkpoint.Store
	endingSeq func(shardID string) string
}

func (m mutantCheckpoints) CountLoss(ctx context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error) {
	if end := m.endingSeq(shard.ShardID); end != "" && l.To == end {
		if err := m.Store.MarkClosed(ctx, shard, end); err != nil {
			return checkpoint.Result{}, err
		}
	}
	return m.Store.CountLoss(ctx, shard, l)
}

// blindReplayer runs replays without Batch.MappingSettled: the replay does not leave to the
// mapping what a mapping run still has in hand (MutationFailureRangeWithoutLanes).
type blindReplayer struct{ p *pipeline.Pipeline }

func (b blindReplayer) Run(ctx context.Context, batch pipeline.Batch) (pipeline.Result, error) {
	batch.MappingSettled = time.Time{}
	return b.p.Run(ctx, batch)
}
