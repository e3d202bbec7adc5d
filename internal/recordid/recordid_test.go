package recordid

import (
	"errors"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"shardId-000000000000:49584571934843771141903627621785355615208059945070100482:0", true},
		{"shardId-000000000001:7:12", true},
		{"shardId-000000000001:07:1", false},
		{"shardId-000000000001:7", false},
		{"shardId-000000000001:7:-1", false},
		{":7:1", false},
		{"s|x:7:1", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			id, err := Parse(tt.in)
			if !tt.ok {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q) err = %v, want ErrInvalid", tt.in, err)
				}
				return
			}
			if err != nil || id.String() != tt.in {
				t.Fatalf("Parse(%q) = %v, %v", tt.in, id, err)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	a := ID{ShardID: "s", Seq: "9", Sub: 5}
	b := ID{ShardID: "s", Seq: "10", Sub: 0}
	c := ID{ShardID: "s", Seq: "10", Sub: 1}
	if Compare(a, b) != -1 || Compare(b, c) != -1 || Compare(c, a) != 1 || Compare(c, c) != 0 {
		t.Fatal("Compare must order by numeric sequence, then sub-index")
	}
}

func TestShardValidate(t *testing.T) {
	if err := (Shard{"orders", "payments", "shardId-000000000000"}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Shard{{"", "s", "x"}, {"g|h", "s", "x"}, {"g", "s", ""}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: err = %v, want ErrInvalid", bad, err)
		}
	}
}
