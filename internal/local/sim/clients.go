package sim

import (
	"context"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The clients the product packages are given: each method passes the fault layer (call) and
// then the model. They satisfy the consumer-side interfaces of internal/dedupe,
// internal/checkpoint, internal/park and internal/reconcile.

type ddbClient struct {
	s *Sched
	m *Dynamo
}

func (c ddbClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb PutItem", itemDetail(in.TableName, in.Item), true, func() (*dynamodb.PutItemOutput, error) { return c.m.PutItem(ctx, in) })
}

func (c ddbClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb UpdateItem", itemDetail(in.TableName, in.Key), true, func() (*dynamodb.UpdateItemOutput, error) { return c.m.UpdateItem(ctx, in) })
}

func (c ddbClient) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb DeleteItem", itemDetail(in.TableName, in.Key), true, func() (*dynamodb.DeleteItemOutput, error) { return c.m.DeleteItem(ctx, in) })
}

func (c ddbClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb GetItem", itemDetail(in.TableName, in.Key), false, func() (*dynamodb.GetItemOutput, error) { return c.m.GetItem(ctx, in) })
}

func (c ddbClient) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return call(ctx, c.s, "", "dynamodb Query", queryDetail(in), false, func() (*dynamodb.QueryOutput, error) { return c.m.Query(ctx, in) })
}

func (c ddbClient) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return call(ctx, c.s, "", "dynamodb Scan", "", false, func() (*dynamodb.ScanOutput, error) { return c.m.Scan(ctx, in) })
}

func (c ddbClient) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb BatchWriteItem", batchDetail(in), true, func() (*dynamodb.BatchWriteItemOutput, error) {
		return c.m.batchWrite(in, func(int) bool { return c.s.partial(ctx, "dynamodb BatchWriteItem") })
	})
}

func (c ddbClient) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return call(ctx, c.s, "", "dynamodb BatchGetItem", "", false, func() (*dynamodb.BatchGetItemOutput, error) {
		// A partial result hands keys back in UnprocessedKeys: those are not read.
		read := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{}}
		back := map[string]types.KeysAndAttributes{}
		for _, name := range sortedKeys(in.RequestItems) {
			ka := in.RequestItems[name]
			r, b := ka, ka
			r.Keys, b.Keys = nil, nil
			for _, k := range ka.Keys {
				if c.s.partial(ctx, "dynamodb BatchGetItem") {
					b.Keys = append(b.Keys, k)
				} else {
					r.Keys = append(r.Keys, k)
				}
			}
			read.RequestItems[name] = r
			if len(b.Keys) > 0 {
				back[name] = b
			}
		}
		out, err := c.m.BatchGetItem(ctx, read)
		if err != nil {
			return nil, err
		}
		if len(back) > 0 {
			out.UnprocessedKeys = back
		}
		return out, nil
	})
}

type sqsClient struct {
	s    *Sched
	m    *SQS
	site string // the calls' site when known without reading the stack ("?": the mapping's); "": read it
}

func (c sqsClient) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return call(ctx, c.s, c.site, "sqs SendMessage", aws.ToString(in.QueueUrl)+"|"+strconv.Itoa(len(aws.ToString(in.MessageBody))), true, func() (*sqs.SendMessageOutput, error) { return c.m.SendMessage(ctx, in) })
}

func (c sqsClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return call(ctx, c.s, c.site, "sqs ReceiveMessage", aws.ToString(in.QueueUrl), true, func() (*sqs.ReceiveMessageOutput, error) { return c.m.ReceiveMessage(ctx, in) })
}

func (c sqsClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return call(ctx, c.s, c.site, "sqs DeleteMessage", aws.ToString(in.ReceiptHandle), true, func() (*sqs.DeleteMessageOutput, error) { return c.m.DeleteMessage(ctx, in) })
}

func (c sqsClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return call(ctx, c.s, c.site, "sqs ChangeMessageVisibility", aws.ToString(in.ReceiptHandle), true, func() (*sqs.ChangeMessageVisibilityOutput, error) {
		return c.m.ChangeMessageVisibility(ctx, in)
	})
}

func (c sqsClient) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return call(ctx, c.s, c.site, "sqs GetQueueUrl", aws.ToString(in.QueueName), false, func() (*sqs.GetQueueUrlOutput, error) { return c.m.GetQueueUrl(ctx, in) })
}

type kinesisClient struct {
	s    *Sched
	m    *Kinesis
	site string // as sqsClient's
}

func (c kinesisClient) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return call(ctx, c.s, c.site, "kinesis DescribeStreamSummary", "", false, func() (*kinesis.DescribeStreamSummaryOutput, error) {
		return c.m.DescribeStreamSummary(ctx, in)
	})
}

func (c kinesisClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return call(ctx, c.s, c.site, "kinesis ListShards", "", false, func() (*kinesis.ListShardsOutput, error) { return c.m.ListShards(ctx, in) })
}

func (c kinesisClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	return call(ctx, c.s, c.site, "kinesis GetShardIterator", aws.ToString(in.ShardId)+"|"+string(in.ShardIteratorType)+"|"+aws.ToString(in.StartingSequenceNumber), false, func() (*kinesis.GetShardIteratorOutput, error) {
		return c.m.GetShardIterator(ctx, in)
	})
}

func (c kinesisClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	return call(ctx, c.s, c.site, "kinesis GetRecords", iterDetail(aws.ToString(in.ShardIterator)), false, func() (*kinesis.GetRecordsOutput, error) { return c.m.GetRecords(ctx, in) })
}

func digest(s string) string {
	h := fnv.New64a()
	h.Write([]byte(s))
	return strconv.FormatUint(h.Sum64(), 36)
}

func itemDetail(table *string, key map[string]types.AttributeValue) string {
	var b strings.Builder
	b.WriteString(aws.ToString(table))
	for _, k := range []string{"pk", "sk", "id"} {
		if v, ok := sattr(key, k); ok {
			// A sort key's tail after its kind is a random nonce (markers, entries): goroutines
			// draw nonces in any order, so the key leaves it out.
			if i := strings.IndexByte(v, '#'); i >= 0 {
				if j := strings.IndexByte(v[i+1:], '#'); j >= 0 {
					v = v[:i+1+j]
				}
			}
			b.WriteString("|" + v)
		}
	}
	return b.String()
}

func queryDetail(in *dynamodb.QueryInput) string {
	d := aws.ToString(in.TableName)
	for _, k := range []string{":pk", ":from"} {
		if v, ok := in.ExpressionAttributeValues[k].(*types.AttributeValueMemberS); ok {
			d += "|" + v.Value
		}
	}
	if in.ExclusiveStartKey != nil {
		d += "|" + itemDetail(nil, in.ExclusiveStartKey)
	}
	return d
}

func batchDetail(in *dynamodb.BatchWriteItemInput) string {
	var b strings.Builder
	for name, ws := range in.RequestItems {
		for _, w := range ws {
			if w.PutRequest != nil {
				b.WriteString(itemDetail(&name, w.PutRequest.Item))
			}
		}
	}
	return digest(b.String())
}

// iterDetail is an iterator's shard and position (not its issue time).
func iterDetail(it string) string {
	if i := strings.LastIndexByte(it, '|'); i > 0 {
		return it[:i]
	}
	return it
}
