package ddbmeter

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func bigItem(n int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "p"},
		"sk": &types.AttributeValueMemberS{Value: "s"},
		"b":  &types.AttributeValueMemberB{Value: make([]byte, n)},
	}
}

func TestUsage(t *testing.T) {
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "p"}, "sk": &types.AttributeValueMemberS{Value: "s"}}
	ccf := &types.ConditionalCheckFailedException{Message: aws.String("no")}
	tests := []struct {
		name string
		in   any
		out  any
		err  error
		want OpStats
	}{
		{"put 2000 bytes", &dynamodb.PutItemInput{Item: bigItem(2000)}, &dynamodb.PutItemOutput{}, nil,
			OpStats{ItemsWritten: 1, BytesWritten: 2007, WriteUnits: 2}},
		{"put with failed condition still costs", &dynamodb.PutItemInput{Item: bigItem(10)}, nil, ccf,
			OpStats{ItemsWritten: 1, BytesWritten: 17, WriteUnits: 1}},
		{"put failing otherwise costs nothing", &dynamodb.PutItemInput{Item: bigItem(10)}, nil, errors.New("throttled"),
			OpStats{}},
		{"update estimates key plus values and names", &dynamodb.UpdateItemInput{Key: key,
			ExpressionAttributeNames:  map[string]string{"#c": "checkpoint"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberS{Value: "12345"}}},
			&dynamodb.UpdateItemOutput{}, nil,
			OpStats{ItemsWritten: 1, BytesWritten: 6 + 10 + 5, WriteUnits: 1}},
		{"update uses returned attributes when larger", &dynamodb.UpdateItemInput{Key: key},
			&dynamodb.UpdateItemOutput{Attributes: bigItem(3000)}, nil,
			OpStats{ItemsWritten: 1, BytesWritten: 3007, WriteUnits: 3}},
		{"delete key", &dynamodb.DeleteItemInput{Key: key}, &dynamodb.DeleteItemOutput{}, nil,
			OpStats{ItemsWritten: 1, BytesWritten: 6, WriteUnits: 1}},
		{"batch write minus unprocessed", &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
			"t": {{PutRequest: &types.PutRequest{Item: bigItem(1500)}}, {PutRequest: &types.PutRequest{Item: bigItem(100)}},
				{DeleteRequest: &types.DeleteRequest{Key: key}}}}},
			&dynamodb.BatchWriteItemOutput{UnprocessedItems: map[string][]types.WriteRequest{
				"t": {{PutRequest: &types.PutRequest{Item: bigItem(100)}}}}}, nil,
			OpStats{ItemsWritten: 2, BytesWritten: 1507 + 6, WriteUnits: 2 + 1}},
		{"transact write doubles", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{Item: bigItem(10)}}}}, &dynamodb.TransactWriteItemsOutput{}, nil,
			OpStats{ItemsWritten: 1, BytesWritten: 17, WriteUnits: 2}},
		{"get eventually consistent", &dynamodb.GetItemInput{Key: key}, &dynamodb.GetItemOutput{Item: bigItem(5000)}, nil,
			OpStats{ItemsRead: 1, BytesRead: 5007, ReadUnits: 1}},
		{"get strongly consistent", &dynamodb.GetItemInput{Key: key, ConsistentRead: aws.Bool(true)}, &dynamodb.GetItemOutput{Item: bigItem(5000)}, nil,
			OpStats{ItemsRead: 1, BytesRead: 5007, ReadUnits: 2}},
		{"get not found still costs", &dynamodb.GetItemInput{Key: key}, &dynamodb.GetItemOutput{}, nil,
			OpStats{ReadUnits: 0.5}},
		{"query sums items before rounding", &dynamodb.QueryInput{ConsistentRead: aws.Bool(true)},
			&dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{bigItem(1000), bigItem(1000), bigItem(1000)}}, nil,
			OpStats{ItemsRead: 3, BytesRead: 3021, ReadUnits: 1}},
		{"query empty", &dynamodb.QueryInput{}, &dynamodb.QueryOutput{}, nil, OpStats{ReadUnits: 0.5}},
		{"batch get rounds each item", &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			"t": {ConsistentRead: aws.Bool(true)}}},
			&dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{"t": {bigItem(100), bigItem(100)}}}, nil,
			OpStats{ItemsRead: 2, BytesRead: 214, ReadUnits: 2}},
		{"describe table costs nothing", &dynamodb.DescribeTableInput{}, &dynamodb.DescribeTableOutput{}, nil, OpStats{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Usage(tt.in, tt.out, tt.err); got != tt.want {
				t.Fatalf("Usage = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}
