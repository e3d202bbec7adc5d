package dedupe

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
)

// TestWrittenTimeStaysInsideTheItemBudget: every item of an entry that completes a marker
// carries attrWritten, and the item budget (WithMaxItemBytes) counts it: at every budget from
// 200 to 2,000 bytes no written item is larger than the budget. (It was added after the parts
// were cut, and items went up to ten bytes over.)
func TestWrittenTimeStaysInsideTheItemBudget(t *testing.T) {
	t.Parallel()
	for budget := 200; budget <= 2000; budget++ {
		var over []int
		record := func(items ...map[string]types.AttributeValue) {
			for _, it := range items {
				if n := ddbsize.ItemSize(it); n > budget {
					over = append(over, n)
				}
			}
		}
		fake := fakeDynamo{
			put: func(in *dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
				record(in.Item)
				return &dynamodb.PutItemOutput{}, nil
			},
			batch: func(in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
				for _, reqs := range in.RequestItems {
					for _, r := range reqs {
						record(r.PutRequest.Item)
					}
				}
				return &dynamodb.BatchWriteItemOutput{}, nil
			},
		}
		l := New(fake, "t", WithMaxItemBytes(budget))
		if err := l.Record(context.Background(), testShard, Entry{First: seqAt(0), Last: seqAt(99), Source: SourceConsumer, Done: ids(0, 99), Nonce: "abcdabcdabcdabcd"}); err != nil {
			continue // budget too small for any part
		}
		if len(over) > 0 {
			t.Fatalf("budget %d: items of %v bytes written", budget, over)
		}
	}
}
