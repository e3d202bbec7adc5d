package metrics

import (
	"bytes"
	"errors"
	"testing"
)

// TestEmitWithAddsDimensions: a per-shard line carries the emitter's dimension and the extra
// one, as one dimension set; a dimension given twice is refused.
func TestEmitWithAddsDimensions(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, Namespace, []Dimension{{DimensionGroup, "orders"}})
	if err := e.EmitWith([]Dimension{{DimensionShard, "shardId-000000000001"}}, Metric{Name: "VerifiedLagSeconds", Value: 42, Unit: Seconds}); err != nil {
		t.Fatal(err)
	}
	l, err := Parse(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if l.Dimensions[DimensionGroup] != "orders" || l.Dimensions[DimensionShard] != "shardId-000000000001" || len(l.Dimensions) != 2 ||
		l.Values["VerifiedLagSeconds"] != 42 || l.Units["VerifiedLagSeconds"] != Seconds {
		t.Errorf("line %+v", l)
	}
	if err := e.EmitWith([]Dimension{{DimensionGroup, "other"}}, Metric{Name: "X", Value: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate dimension: %v, want ErrInvalid", err)
	}
}
