package demo

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestDecodeValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want types.AttributeValue
		err  bool
	}{
		{name: "S", in: `{"S":"héllo"}`, want: &types.AttributeValueMemberS{Value: "héllo"}},
		{name: "N", in: `{"N":"-12.50"}`, want: &types.AttributeValueMemberN{Value: "-12.50"}},
		{name: "B is base64 on the wire", in: `{"B":"AAEC"}`, want: &types.AttributeValueMemberB{Value: []byte{0, 1, 2}}},
		{name: "BOOL", in: `{"BOOL":true}`, want: &types.AttributeValueMemberBOOL{Value: true}},
		{name: "NULL", in: `{"NULL":true}`, want: &types.AttributeValueMemberNULL{Value: true}},
		{name: "SS", in: `{"SS":["a","bc"]}`, want: &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}},
		{name: "NS", in: `{"NS":["1","22"]}`, want: &types.AttributeValueMemberNS{Value: []string{"1", "22"}}},
		{name: "BS", in: `{"BS":["AA==","AQI="]}`, want: &types.AttributeValueMemberBS{Value: [][]byte{{0}, {1, 2}}}},
		{name: "L", in: `{"L":[{"S":"x"},{"N":"1"}]}`, want: &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "x"}, &types.AttributeValueMemberN{Value: "1"}}}},
		{name: "M", in: `{"M":{"k":{"BOOL":false}}}`, want: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": &types.AttributeValueMemberBOOL{Value: false}}}},
		{name: "empty M", in: `{"M":{}}`, want: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
		{name: "two types", in: `{"S":"a","N":"1"}`, err: true},
		{name: "unknown type", in: `{"X":"a"}`, err: true},
		{name: "bad base64", in: `{"B":"!!"}`, err: true},
		{name: "S not a string", in: `{"S":1}`, err: true},
		{name: "bad element", in: `{"L":[{"Q":1}]}`, err: true},
		{name: "not an object", in: `"S"`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeValue(json.RawMessage(tt.in))
			if tt.err {
				if !errors.Is(err, errValue) {
					t.Fatalf("decodeValue(%s) error = %v, want errValue", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeValue(%s): %v", tt.in, err)
			}
			if ddbsize.ValueSize(got) != ddbsize.ValueSize(tt.want) {
				t.Fatalf("size %d, want %d", ddbsize.ValueSize(got), ddbsize.ValueSize(tt.want))
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Fatalf("decodeValue(%s) = %s, want %s", tt.in, gj, wj)
			}
		})
	}
}

func TestRequestUsageStatus(t *testing.T) {
	t.Parallel()
	put := []byte(`{"TableName":"t","Item":{"pk":{"S":"a"},"sk":{"S":"b"}}}`)
	tests := []struct {
		name      string
		status    int
		resp      string
		wantUnits float64
		wantErrs  int64
	}{
		{name: "done", status: 200, resp: `{}`, wantUnits: 1},
		{name: "conditional check failed still costs", status: 400,
			resp: `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"no"}`, wantUnits: 1, wantErrs: 1},
		{name: "throttled costs nothing", status: 400,
			resp: `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}`, wantErrs: 1},
		{name: "server error costs nothing", status: 500, resp: `{}`, wantErrs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := requestUsage("PutItem", put, tt.status, []byte(tt.resp))
			if u.WriteUnits != tt.wantUnits || u.Errors != tt.wantErrs || u.Calls != 1 {
				t.Fatalf("usage = %+v, want %v units, %d errors, 1 call", u, tt.wantUnits, tt.wantErrs)
			}
		})
	}
}

// TestMeterMatchesSDKMiddleware sends the same calls through the capacity meter (sizing the
// JSON bodies) and through ddbmeter's SDK middleware (sizing the typed inputs): both must agree.
func TestMeterMatchesSDKMiddleware(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := stacktest.LedgerTable(t)
	meter, err := startCapacityMeter(stackEndpoints().DynamoDB)
	if err != nil {
		t.Fatal(err)
	}
	defer meter.Close()
	sdk := ddbmeter.New()
	client := dynamodb.NewFromConfig(stacktest.Config(t), sdk.Options(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(meter.URL())
	})
	key := func(pk, sk string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}
	}
	big := make([]byte, 3000) // more than one write unit
	item := key("p", "1")
	item["s"] = &types.AttributeValueMemberS{Value: "some text"}
	item["n"] = &types.AttributeValueMemberN{Value: "123456789012345678901234567890"}
	item["b"] = &types.AttributeValueMemberB{Value: big}
	item["ok"] = &types.AttributeValueMemberBOOL{Value: true}
	item["none"] = &types.AttributeValueMemberNULL{Value: true}
	item["l"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "x"}, &types.AttributeValueMemberN{Value: "7"}}}
	item["m"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "v"}}}
	item["ss"] = &types.AttributeValueMemberSS{Value: []string{"a", "b"}}
	item["ns"] = &types.AttributeValueMemberNS{Value: []string{"1", "2"}}
	item["bs"] = &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}}

	steps := []struct {
		name string
		call func() error
	}{
		{"PutItem", func() error {
			_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
			return err
		}},
		{"PutItem conditional failure", func() error {
			_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key("p", "1"),
				ConditionExpression: aws.String("attribute_not_exists(pk)")})
			var ccf *types.ConditionalCheckFailedException
			if !errors.As(err, &ccf) {
				return errors.New("want a conditional check failure, got " + errString(err))
			}
			return nil
		}},
		{"UpdateItem", func() error {
			_, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("p", "2"),
				UpdateExpression:          aws.String("SET #c = :c, #d = :d"),
				ExpressionAttributeNames:  map[string]string{"#c": "counter", "#d": "data"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberN{Value: "1"}, ":d": &types.AttributeValueMemberB{Value: big}},
				ReturnValues:              types.ReturnValueAllNew})
			return err
		}},
		{"BatchWriteItem", func() error {
			_, err := client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: {
				{PutRequest: &types.PutRequest{Item: key("p", "3")}},
				{PutRequest: &types.PutRequest{Item: item2(key("p", "4"), big)}},
			}}})
			return err
		}},
		{"Query", func() error {
			_, err := client.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :p"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: "p"}}, ConsistentRead: aws.Bool(true)})
			return err
		}},
		{"GetItem", func() error {
			_, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("p", "1")})
			return err
		}},
		{"DeleteItem", func() error {
			_, err := client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("p", "3")})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	got, want := meter.Snapshot(), sdk.Snapshot()
	for _, op := range []string{"PutItem", "UpdateItem", "BatchWriteItem", "Query", "GetItem", "DeleteItem"} {
		g, w := got.Ops[op], want.Ops[op]
		if w.Attempts == 0 {
			t.Errorf("%s: the SDK middleware saw no call", op)
		}
		if g.Attempts != w.Attempts || g.ItemsWritten != w.ItemsWritten || g.BytesWritten != w.BytesWritten ||
			!near(g.WriteUnits, w.WriteUnits) || g.ItemsRead != w.ItemsRead || g.BytesRead != w.BytesRead || !near(g.ReadUnits, w.ReadUnits) {
			t.Errorf("%s: meter %+v, SDK middleware %+v", op, g, w)
		}
	}
	if got.Total.WriteUnits < 5 {
		t.Fatalf("total write units %v: the large items were not sized", got.Total.WriteUnits)
	}
}

func item2(k map[string]types.AttributeValue, b []byte) map[string]types.AttributeValue {
	k["b"] = &types.AttributeValueMemberB{Value: b}
	return k
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
