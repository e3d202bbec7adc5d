package dedupe

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// HoldScanAPI is the DynamoDB call ListHolds makes (dynamodb:Scan on the ledger table).
type HoldScanAPI interface {
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ HoldScanAPI = (*dynamodb.Client)(nil)

// HoldListing is what ListHolds found.
type HoldListing struct {
	// Holds are the group's held keys, in scan order. A key that is not valid UTF-8 or too long
	// is stored hashed (the claim rule): its Key is "sha256:<hex>" and Hashed is true.
	Holds []ListedHold
	// Scanned is how many ledger items the scan read; Complete is false when it stopped at the
	// limit before the end of the table (Holds is then a lower bound).
	Scanned  int
	Complete bool
}

// ListedHold is one held key as ListHolds reads it.
type ListedHold struct {
	HoldState
	Hashed bool
}

// ListHolds lists the key holds of group in the ledger table. Each hold is its own partition
// (pk "H|group|key", see hold.go), so no Query reaches them all: it is a Scan whose
// FilterExpression keeps the group's hold items (sk "H" and a pk with the group's hold
// prefixes). A Scan reads, and is billed for, every item of the table, filtered or not ("A
// filter expression is applied after a Scan finishes but before the results are returned.
// Therefore, a Scan consumes the same amount of read capacity, regardless of whether a filter
// expression is present", DynamoDB developer guide, "Scanning tables in DynamoDB",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Scan.html): maxScanned > 0
// bounds the items read (Scan's Limit, "the maximum number of items to evaluate"), and the
// listing says whether it reached the end. Operator use only (gapless status); the functions
// never call it.
func ListHolds(ctx context.Context, client HoldScanAPI, table, group string, maxScanned int) (HoldListing, error) {
	plain, err := holdPartitionKey(group, "")
	if err != nil {
		return HoldListing{}, fmt.Errorf("dedupe: list holds: %w", err)
	}
	hashed := holdHashedPrefix + recordid.Separator + group + recordid.Separator
	in := &dynamodb.ScanInput{
		TableName:        aws.String(table),
		FilterExpression: aws.String("#sk = :sk AND (begins_with(#pk, :plain) OR begins_with(#pk, :hashed))"),
		ExpressionAttributeNames: map[string]string{
			"#pk": schema.PartitionKey, "#sk": schema.SortKey,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":sk":     &types.AttributeValueMemberS{Value: holdSortKey},
			":plain":  &types.AttributeValueMemberS{Value: plain},
			":hashed": &types.AttributeValueMemberS{Value: hashed},
		},
	}
	var out HoldListing
	for {
		if maxScanned > 0 {
			if out.Scanned >= maxScanned {
				return out, nil
			}
			in.Limit = aws.Int32(int32(min(maxScanned-out.Scanned, 1<<30)))
		}
		page, err := client.Scan(ctx, in)
		if err != nil {
			return out, fmt.Errorf("dedupe: list holds of %s: %w", group, err)
		}
		out.Scanned += int(page.ScannedCount)
		for _, it := range page.Items {
			h, err := listedHold(it, plain, hashed)
			if err != nil {
				return out, fmt.Errorf("dedupe: list holds of %s: %w", group, err)
			}
			out.Holds = append(out.Holds, h)
		}
		if len(page.LastEvaluatedKey) == 0 {
			out.Complete = true
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// listedHold reads a hold item found by ListHolds.
func listedHold(it map[string]types.AttributeValue, plain, hashed string) (ListedHold, error) {
	pk, _ := it[schema.PartitionKey].(*types.AttributeValueMemberS)
	if pk == nil {
		return ListedHold{}, fmt.Errorf("%w: hold without pk", ErrCorrupt)
	}
	var h ListedHold
	if rest, ok := strings.CutPrefix(pk.Value, hashed); ok {
		h.Key, h.Hashed = "sha256:"+rest, true
	} else {
		h.Key = strings.TrimPrefix(pk.Value, plain)
	}
	var err error
	if h.Head, err = holdHead(it); err != nil {
		return ListedHold{}, fmt.Errorf("hold %s: %w", pk.Value, err)
	}
	if l, ok := it[attrHeld].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			s, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				return ListedHold{}, fmt.Errorf("hold %s: %w: held entry not a string", pk.Value, ErrCorrupt)
			}
			id, err := recordid.Parse(s.Value)
			if err != nil {
				return ListedHold{}, fmt.Errorf("hold %s: %w: %w", pk.Value, ErrCorrupt, err)
			}
			h.Held = append(h.Held, id)
		}
	}
	if n, ok := it[attrApplied].(*types.AttributeValueMemberN); ok {
		h.Applied, _ = strconv.Atoi(n.Value)
	}
	return h, nil
}
