package kpl

import (
	"errors"
	"fmt"
	"math/bits"
)

// Field numbers of the KPL messages.
const (
	fieldPartitionKeyTable    = 1 // AggregatedRecord
	fieldExplicitHashKeyTable = 2
	fieldRecords              = 3

	fieldPartitionKeyIndex    = 1 // Record
	fieldExplicitHashKeyIndex = 2
	fieldData                 = 3
)

// Protobuf wire types (protobuf.dev/programming-guides/encoding). Groups (3, 4) are deprecated
// and the KPL messages have none: they are rejected rather than skipped.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// maxFieldNumber is the largest protobuf field number (2^29 - 1).
const maxFieldNumber = 1<<29 - 1

var errVarint = errors.New("truncated or overlong varint")

// readVarint decodes a base-128 varint from the start of b and returns the value and the number
// of bytes read. It fails on truncation, on more than 10 bytes and on values above 2^64-1.
func readVarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 { // the 10th byte holds bit 63 only
			return 0, 0, errVarint
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errVarint
}

// walk calls fn for every field of the message b, in order, with its number, wire type and
// value: the payload for length-delimited fields, the encoded bytes for the others. It checks
// every length against the buffer and stops at the first error (its own or fn's).
func walk(b []byte, fn func(field uint64, wire int, v []byte) error) error {
	for off := 0; off < len(b); {
		start := off
		tag, n, err := readVarint(b[off:])
		if err != nil {
			return fmt.Errorf("field tag at offset %d: %v", start, err)
		}
		off += n
		field, wire := tag>>3, int(tag&7)
		if field == 0 || field > maxFieldNumber {
			return fmt.Errorf("invalid field number %d at offset %d", field, start)
		}
		var v []byte
		switch wire {
		case wireVarint:
			_, n, err := readVarint(b[off:])
			if err != nil {
				return fmt.Errorf("field %d at offset %d: %v", field, start, err)
			}
			v = b[off : off+n : off+n]
			off += n
		case wireFixed64, wireFixed32:
			n := 8
			if wire == wireFixed32 {
				n = 4
			}
			if len(b)-off < n {
				return fmt.Errorf("field %d at offset %d: %d-byte value truncated (%d bytes left)", field, start, n, len(b)-off)
			}
			v = b[off : off+n : off+n]
			off += n
		case wireBytes:
			l, n, err := readVarint(b[off:])
			if err != nil {
				return fmt.Errorf("field %d at offset %d: length: %v", field, start, err)
			}
			off += n
			if l > uint64(len(b)-off) { // compared as uint64: a huge length cannot wrap
				return fmt.Errorf("field %d at offset %d: declared length %d exceeds the %d bytes left", field, start, l, len(b)-off)
			}
			v = b[off : off+int(l) : off+int(l)]
			off += int(l)
		default:
			return fmt.Errorf("field %d at offset %d: unsupported wire type %d", field, start, wire)
		}
		if err := fn(field, wire, v); err != nil {
			return err
		}
	}
	return nil
}

func sizeVarint(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func sizeTag(field uint64) int { return sizeVarint(field << 3) }

func sizeBytesField(field uint64, n int) int { return sizeTag(field) + sizeVarint(uint64(n)) + n }

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, field uint64, wire int) []byte {
	return appendVarint(b, field<<3|uint64(wire))
}

func appendBytesField(b []byte, field uint64, v []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}
