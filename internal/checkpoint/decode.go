package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// decode turns a checkpoint item into a State. Every attribute is type-checked; a wrong type
// or an unparsable value is an error wrapping ErrCorrupt, never a silent zero. (Hand-written
// rather than attributevalue.UnmarshalMap: the positions must be cross-checked against their
// encodings and the timestamps parsed, which tags cannot express.)
func decode(item map[string]types.AttributeValue) (State, error) {
	d := decoder{item: item}
	var st State
	pk := d.str(schema.PartitionKey, true)
	group, stream, ok := strings.Cut(pk, recordid.Separator)
	if d.err == nil && !ok {
		d.fail(schema.PartitionKey, "%q is not group%sstream", pk, recordid.Separator)
	}
	st.Shard = recordid.Shard{Group: group, Stream: stream, ShardID: d.str(schema.SortKey, true)}
	st.Checkpoint = d.position(attrCheckpoint, attrCheckpointEnc)
	st.Watermark = d.position(attrWatermark, attrWatermarkEnc)
	st.CheckpointAt = d.instant(attrCheckpointAt)
	st.WatermarkAt = d.instant(attrWatermarkAt)
	st.ScopeFrom = d.instant(attrScopeFrom)
	st.VerifiedAsOf = d.instant(attrVerifiedAsOf)
	st.Empty = d.empty()
	st.Parents = d.list(attrParents)
	st.Closed = d.bool(attrClosed)
	if st.EndingSeq = d.str(attrEndingSeq, false); st.EndingSeq != "" {
		if err := seqnum.Validate(st.EndingSeq); err != nil {
			d.fail(attrEndingSeq, "%v", err)
		}
	}
	for _, f := range st.Counters.fields() {
		*f.v = d.int(f.attr)
	}
	if d.err != nil {
		return State{}, d.err
	}
	return st, nil
}

// decoder collects the first error, so decode reads straight through.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(attr, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: attribute %s: %s", ErrCorrupt, attr, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) str(attr string, required bool) string {
	av, present := d.item[attr]
	if !present {
		if required {
			d.fail(attr, "missing")
		}
		return ""
	}
	v, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		d.fail(attr, "type %T, want S", av)
		return ""
	}
	return v.Value
}

// position reads a raw/encoded pair; the encoded value (the one conditions compare) is the
// authority and the raw one must agree with it.
func (d *decoder) position(rawAttr, encAttr string) string {
	enc := d.str(encAttr, false)
	raw := d.str(rawAttr, false)
	if enc == "" {
		if raw != "" {
			d.fail(encAttr, "missing while %s is %q", rawAttr, raw)
		}
		return ""
	}
	seq, err := seqnum.Decode(enc)
	if err != nil {
		d.fail(encAttr, "%v", err)
		return ""
	}
	if raw != seq {
		d.fail(rawAttr, "%q disagrees with %s (%q)", raw, encAttr, seq)
		return ""
	}
	return seq
}

func (d *decoder) instant(attr string) time.Time {
	s := d.str(attr, false)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.fail(attr, "%v", err)
	}
	return t
}

func (d *decoder) list(attr string) []string {
	av, present := d.item[attr]
	if !present {
		return nil
	}
	l, ok := av.(*types.AttributeValueMemberL)
	if !ok {
		d.fail(attr, "type %T, want L", av)
		return nil
	}
	out := make([]string, 0, len(l.Value))
	for i, e := range l.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			d.fail(attr, "element %d has type %T, want S", i, e)
			return nil
		}
		out = append(out, s.Value)
	}
	return out
}

func (d *decoder) bool(attr string) bool {
	av, present := d.item[attr]
	if !present {
		return false
	}
	b, ok := av.(*types.AttributeValueMemberBOOL)
	if !ok {
		d.fail(attr, "type %T, want BOOL", av)
		return false
	}
	return b.Value
}

func (d *decoder) int(attr string) int64 {
	av, present := d.item[attr]
	if !present {
		return 0
	}
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		d.fail(attr, "type %T, want N", av)
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		d.fail(attr, "%v", err)
	}
	return v
}
