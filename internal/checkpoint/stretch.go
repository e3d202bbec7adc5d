package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Attributes of a shard's progress through a stretch of empty GetRecords pages (SetEmptyThrough).
const (
	attrEmptyAfter   = "emptyAfter"   // the verified watermark the stretch follows (spanStart: none)
	attrEmptyThrough = "emptyThrough" // emptyTimeLayout: no record after it arrived before this time
)

// emptyTimeLayout is fixed-width, so that the condition's string comparison orders times.
const emptyTimeLayout = "2006-01-02T15:04:05.000000000Z"

// EmptyThrough is how far a reader has read a shard past its verified watermark without finding
// a record: no record after the watermark After ("" when the shard has none) arrived before
// Through. It holds only while the watermark is still After (State.EmptyThroughFor).
type EmptyThrough struct {
	After   string
	Through time.Time
}

// EmptyThroughFor returns the stored progress through empty pages when it extends the shard's
// current watermark; ok is false when there is none or it was recorded after another watermark.
func (st State) EmptyThroughFor() (t time.Time, ok bool) {
	if st.Empty.Through.IsZero() || st.Empty.After != st.Watermark {
		return time.Time{}, false
	}
	return st.Empty.Through, true
}

// SetEmptyThrough records e on the shard's item, only while the stored watermark is still exactly
// e.After, and only forward: a Through at or before the one stored for the same watermark is
// left alone. It reports whether the write happened; a failed condition is not an error.
func (s *Store) SetEmptyThrough(ctx context.Context, shard recordid.Shard, e EmptyThrough) (bool, error) {
	const op = "set empty through"
	if err := shard.Validate(); err != nil {
		return false, fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
	}
	if e.Through.IsZero() {
		return false, fmt.Errorf("checkpoint: %s %s: zero time", op, shard)
	}
	after := Loss{After: e.After}.key()
	names := map[string]string{"#enc": attrWatermarkEnc, "#ea": attrEmptyAfter, "#et": attrEmptyThrough}
	values := map[string]types.AttributeValue{
		":ea": &types.AttributeValueMemberS{Value: after},
		":et": &types.AttributeValueMemberS{Value: e.Through.UTC().Format(emptyTimeLayout)},
	}
	cond := "attribute_not_exists(#enc)"
	if e.After != "" {
		prev, err := seqnum.Encode(e.After)
		if err != nil {
			return false, fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
		}
		cond = "#enc = :prev"
		values[":prev"] = &types.AttributeValueMemberS{Value: prev}
	}
	cond += " AND (attribute_not_exists(#et) OR #ea <> :ea OR #et < :et)"
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(shard),
		UpdateExpression:          aws.String("SET #ea = :ea, #et = :et"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &failed):
		return false, nil
	}
	return false, fmt.Errorf("checkpoint: %s %s: %w", op, shard, err)
}

// empty reads the attributes SetEmptyThrough writes.
func (d *decoder) empty() EmptyThrough {
	through := d.str(attrEmptyThrough, false)
	if through == "" {
		return EmptyThrough{}
	}
	t, err := time.Parse(emptyTimeLayout, through)
	if err != nil {
		d.fail(attrEmptyThrough, "%v", err)
		return EmptyThrough{}
	}
	after := d.str(attrEmptyAfter, true)
	if after == spanStart {
		after = ""
	} else if err := seqnum.Validate(after); err != nil {
		d.fail(attrEmptyAfter, "%v", err)
	}
	return EmptyThrough{After: after, Through: t}
}
