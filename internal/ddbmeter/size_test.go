package ddbmeter

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestValueSize(t *testing.T) {
	tests := []struct {
		name string
		v    types.AttributeValue
		want int
	}{
		{"string ascii", &types.AttributeValueMemberS{Value: "abc"}, 3},
		{"string utf-8 counts bytes", &types.AttributeValueMemberS{Value: "é€"}, 5},
		{"empty string", &types.AttributeValueMemberS{Value: ""}, 0},
		{"binary raw bytes", &types.AttributeValueMemberB{Value: make([]byte, 100)}, 100},
		{"number one digit", &types.AttributeValueMemberN{Value: "7"}, 2},
		{"number two digits", &types.AttributeValueMemberN{Value: "12"}, 2},
		{"number three digits", &types.AttributeValueMemberN{Value: "123"}, 3},
		{"number trailing zeros trimmed", &types.AttributeValueMemberN{Value: "1000000"}, 2},
		{"number leading zeros and sign", &types.AttributeValueMemberN{Value: "-000123"}, 3},
		{"number decimal point", &types.AttributeValueMemberN{Value: "12.345"}, 4},
		{"number zero", &types.AttributeValueMemberN{Value: "0"}, 2},
		{"number exponent ignored", &types.AttributeValueMemberN{Value: "1.5E+10"}, 2},
		{"number 38 digits", &types.AttributeValueMemberN{Value: strings.Repeat("9", 38)}, 20},
		{"bool", &types.AttributeValueMemberBOOL{Value: true}, 1},
		{"null", &types.AttributeValueMemberNULL{Value: true}, 1},
		{"empty list", &types.AttributeValueMemberL{}, 3},
		{"list of two strings", &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "ab"}, &types.AttributeValueMemberS{Value: "c"}}}, 3 + (1 + 2) + (1 + 1)},
		{"empty map", &types.AttributeValueMemberM{}, 3},
		{"map counts element names", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": &types.AttributeValueMemberS{Value: "vv"}}}, 3 + 1 + 1 + 2},
		{"nested list in map", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberBOOL{Value: false}}}}},
			3 + 1 + 1 + (3 + 1 + 1)},
		{"string set", &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}, 3},
		{"number set", &types.AttributeValueMemberNS{Value: []string{"1", "123"}}, 2 + 3},
		{"binary set", &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}}, 3},
		{"nil", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValueSize(tt.v); got != tt.want {
				t.Fatalf("ValueSize = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestItemSize(t *testing.T) {
	item := map[string]types.AttributeValue{
		"pk":        &types.AttributeValueMemberS{Value: "L|g|s|shardId-0"}, // 2 + 15
		"expiresAt": &types.AttributeValueMemberN{Value: "1700000000"},      // 9 + (ceil(2/2)+1)=2
		"ids":       &types.AttributeValueMemberB{Value: make([]byte, 10)},  // 3 + 10
	}
	if got, want := ItemSize(item), 17+11+13; got != want {
		t.Fatalf("ItemSize = %d, want %d", got, want)
	}
}

func TestUnits(t *testing.T) {
	tests := []struct {
		name      string
		got, want float64
	}{
		{"write 1 byte", WriteUnits(1), 1},
		{"write 1024 bytes", WriteUnits(1024), 1},
		{"write 1025 bytes", WriteUnits(1025), 2},
		{"write 0 bytes still one unit", WriteUnits(0), 1},
		{"read strongly 4096", ReadUnits(4096, true), 1},
		{"read strongly 4097", ReadUnits(4097, true), 2},
		{"read eventually 4097", ReadUnits(4097, false), 1},
		{"read eventually nothing found", ReadUnits(0, false), 0.5},
		{"read strongly nothing found", ReadUnits(0, true), 1},
		{"read eventually 10 KB", ReadUnits(10*1024, false), 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

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
