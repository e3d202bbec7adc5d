package ddbsize

import (
	"strings"
	"testing"

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
