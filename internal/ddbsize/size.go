// Package ddbsize computes the DynamoDB size of items and attribute values by the published
// rules: the ledger sizes its entries with it, and the local meter its capacity units.
package ddbsize

import (
	"math"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Size rules, from "DynamoDB item sizes and formats"
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html):
//   - the size of an item is the sum of the lengths of its attribute names and values;
//   - String: UTF-8 bytes; Binary: raw bytes (not the base64 text on the wire);
//   - Number: approximately 1 byte per two significant digits (leading and trailing zeros
//     trimmed) + 1 byte;
//   - Null and Boolean: 1 byte;
//   - List and Map: 3 bytes of overhead + the sizes of the elements + 1 byte per element
//     (a map element also counts its name).
//
// Sets (SS, NS, BS) are the sum of their elements; the page states no extra overhead for them.

// ItemSize is the DynamoDB size in bytes of an item: attribute names plus values.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + ValueSize(v)
	}
	return n
}

// ValueSize is the DynamoDB size in bytes of one attribute value, without its name.
func ValueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return NumberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + ValueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += 1 + len(name) + ValueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += NumberSize(e)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	}
	return 0
}

// NumberSize is the approximate size of a DynamoDB Number given as its decimal text:
// ceil(significant digits / 2) + 1. Sign, decimal point, exponent and leading and trailing
// zeros are not significant.
func NumberSize(s string) int {
	// Keep the mantissa only: stop at an exponent marker.
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			s = s[:i]
			break
		}
	}
	first, last := -1, -1
	for i := 0; i < len(s); i++ {
		if s[i] >= '1' && s[i] <= '9' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 { // zero
		return 1 + 1
	}
	digits := 0
	for i := first; i <= last; i++ {
		if s[i] >= '0' && s[i] <= '9' {
			digits++
		}
	}
	return (digits+1)/2 + 1
}

// WriteUnits is the write capacity for writing one item of the given size: one unit per 1 KB
// or part of it, at least one ("DynamoDB read and write operations",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
func WriteUnits(size int) float64 {
	if size <= 0 {
		return 1
	}
	return math.Ceil(float64(size) / 1024)
}

// ReadUnits is the read capacity for reading the given number of bytes in one request: one
// unit per 4 KB or part of it (half for an eventually consistent read), at least one unit
// (half) even when nothing is found, per the same page.
func ReadUnits(size int, consistent bool) float64 {
	u := math.Ceil(float64(size) / 4096)
	if u < 1 {
		u = 1
	}
	if !consistent {
		u /= 2
	}
	return u
}
