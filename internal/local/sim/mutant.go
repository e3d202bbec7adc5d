package sim

import (
	"context"
	"strings"

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
	return m.ddbClient.UpdateItem(ctx, in, o...)
}
