package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// frame wraps a raw protobuf body as an aggregate: magic, body, MD5 of body.
func frame(body []byte) []byte {
	sum := md5.Sum(body)
	out := append(append([]byte(nil), Magic...), body...)
	return append(out, sum[:]...)
}

// body returns the protobuf part of an aggregate.
func body(agg []byte) []byte { return agg[len(Magic) : len(agg)-digestSize] }

// msg concatenates encoded fields.
func msg(fields ...[]byte) []byte { return bytes.Join(fields, nil) }

func fVarint(field, v uint64) []byte {
	return appendVarint(appendTag(nil, field, wireVarint), v)
}

func fBytes(field uint64, v []byte) []byte { return appendBytesField(nil, field, v) }

func fStr(field uint64, s string) []byte { return fBytes(field, []byte(s)) }

// fRaw is a field tag with any wire type followed by raw bytes.
func fRaw(field uint64, wire int, raw ...byte) []byte {
	return append(appendTag(nil, field, wire), raw...)
}

// rec is an encoded Record message as field 3 of an AggregatedRecord.
func rec(fields ...[]byte) []byte { return fBytes(fieldRecords, msg(fields...)) }

func recordsEqual(a, b []UserRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].PartitionKey != b[i].PartitionKey || a[i].ExplicitHashKey != b[i].ExplicitHashKey || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	many := make([]UserRecord, 1000)
	for i := range many {
		many[i] = UserRecord{PartitionKey: fmt.Sprintf("pk-%d", i%7), Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	tests := []struct {
		name    string
		records []UserRecord
		pkTable int // expected partition key table size
	}{
		{"one record", []UserRecord{{PartitionKey: "a", Data: []byte("hello")}}, 1},
		{"empty data", []UserRecord{{PartitionKey: "a", Data: nil}, {PartitionKey: "b", Data: []byte{}}}, 2},
		{"binary data", []UserRecord{{PartitionKey: "a", Data: []byte{0, 0xff, 0xF3, 0x89, 0x9A, 0xC2}}}, 1},
		{"shared partition keys", []UserRecord{
			{PartitionKey: "x", Data: []byte("1")}, {PartitionKey: "y", Data: []byte("2")},
			{PartitionKey: "x", Data: []byte("3")}, {PartitionKey: "x", Data: []byte("4")}, {PartitionKey: "y", Data: []byte("5")},
		}, 2},
		{"explicit hash keys", []UserRecord{
			{PartitionKey: "x", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte("1")},
			{PartitionKey: "x", Data: []byte("2")},
			{PartitionKey: "y", ExplicitHashKey: "0", Data: []byte("3")},
			{PartitionKey: "y", ExplicitHashKey: "340282366920938463463374607431768211455", Data: []byte("4")},
		}, 2},
		{"many records", many, 7},
		{"unicode key of 256 characters", []UserRecord{{PartitionKey: strings.Repeat("é", 256), Data: []byte("x")}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agg, err := Aggregate(tt.records)
			if err != nil {
				t.Fatalf("Aggregate: %v", err)
			}
			if !IsAggregated(agg) {
				t.Fatal("IsAggregated(Aggregate(...)) = false")
			}
			got, err := Deaggregate(agg)
			if err != nil {
				t.Fatalf("Deaggregate: %v", err)
			}
			if !recordsEqual(got, tt.records) {
				t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, tt.records)
			}
			var pks int
			if err := walk(body(agg), func(f uint64, _ int, _ []byte) error {
				if f == fieldPartitionKeyTable {
					pks++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if pks != tt.pkTable {
				t.Errorf("partition key table has %d entries, want %d (equal keys must share an entry)", pks, tt.pkTable)
			}
		})
	}
}

func TestAggregateRejects(t *testing.T) {
	big := make([]byte, MaxRecordSize)
	tests := []struct {
		name    string
		records []UserRecord
		msg     string
	}{
		{"no records", nil, "at least one user record"},
		{"empty partition key", []UserRecord{{PartitionKey: "a"}, {PartitionKey: ""}}, "record 1: partition key"},
		{"partition key over 256 characters", []UserRecord{{PartitionKey: strings.Repeat("k", 257)}}, "has 257"},
		{"over the Kinesis record limit", []UserRecord{{PartitionKey: "a", Data: big}}, "Kinesis record limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Aggregate(tt.records)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Aggregate = %d bytes, %v; want error wrapping ErrInvalid containing %q", len(got), err, tt.msg)
			}
		})
	}
}

func TestDeaggregate(t *testing.T) {
	valid, err := Aggregate([]UserRecord{{PartitionKey: "a", Data: []byte("one")}, {PartitionKey: "b", Data: []byte("two")}})
	if err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		if i < 0 {
			i += len(c)
		}
		c[i] ^= 0x01
		return c
	}
	pkA := fStr(fieldPartitionKeyTable, "a")
	dataX := fStr(fieldData, "x")
	huge := append(appendTag(nil, fieldRecords, wireBytes), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01) // 2^64-1

	tests := []struct {
		name string
		in   []byte
		want []UserRecord // when err is nil
		err  error
		msg  string // substring of the error naming the problem
	}{
		// Not aggregated: the caller treats the record as plain.
		{name: "nil", in: nil, err: ErrNotAggregated},
		{name: "plain JSON", in: []byte(`{"id":"order-0001"}`), err: ErrNotAggregated},
		{name: "magic only", in: Magic, err: ErrNotAggregated},
		{name: "magic and 16 bytes (reference: plain)", in: frame(nil), err: ErrNotAggregated},
		{name: "magic and 15 bytes", in: append(append([]byte(nil), Magic...), make([]byte, 15)...), err: ErrNotAggregated},
		{name: "wrong magic", in: flip(valid, 0), err: ErrNotAggregated},

		// Decodable.
		{name: "valid", in: valid, want: []UserRecord{{PartitionKey: "a", Data: []byte("one")}, {PartitionKey: "b", Data: []byte("two")}}},
		{name: "tables after records", in: frame(msg(
			rec(fVarint(fieldPartitionKeyIndex, 1), fVarint(fieldExplicitHashKeyIndex, 0), dataX),
			pkA, fStr(fieldPartitionKeyTable, "b"), fStr(fieldExplicitHashKeyTable, "42"),
		)), want: []UserRecord{{PartitionKey: "b", ExplicitHashKey: "42", Data: []byte("x")}}},
		{name: "unknown fields of every skippable wire type", in: frame(msg(
			fVarint(15, 1<<63), fRaw(16, wireFixed64, 1, 2, 3, 4, 5, 6, 7, 8), fStr(17, "ignored"), fRaw(18, wireFixed32, 1, 2, 3, 4),
			pkA,
			rec(fVarint(99, 7), fVarint(fieldPartitionKeyIndex, 0), fRaw(100, wireFixed32, 9, 9, 9, 9),
				fBytes(4, msg(fStr(1, "tag-key"), fStr(2, "tag-value"))), // a Tag: skipped
				dataX, fRaw(maxFieldNumber, wireFixed64, 0, 0, 0, 0, 0, 0, 0, 0)),
		)), want: []UserRecord{{PartitionKey: "a", Data: []byte("x")}}},
		{name: "repeated singular field: last wins", in: frame(msg(pkA, fStr(fieldPartitionKeyTable, "b"),
			rec(fVarint(fieldPartitionKeyIndex, 0), fStr(fieldData, "first"), fVarint(fieldPartitionKeyIndex, 1), fStr(fieldData, "last")),
		)), want: []UserRecord{{PartitionKey: "b", Data: []byte("last")}}},
		{name: "non-minimal varint", in: frame(msg(pkA, rec(fRaw(fieldPartitionKeyIndex, wireVarint, 0x80, 0x80, 0x00), dataX))),
			want: []UserRecord{{PartitionKey: "a", Data: []byte("x")}}},

		// Corrupt: the consumer fails the whole Kinesis record.
		{name: "MD5 mismatch (body byte)", in: flip(valid, len(Magic)+2), err: ErrCorrupt, msg: "MD5 mismatch"},
		{name: "MD5 mismatch (digest byte)", in: flip(valid, -1), err: ErrCorrupt, msg: "MD5 mismatch"},
		{name: "zero records", in: frame(pkA), err: ErrCorrupt, msg: "no user records"},
		{name: "truncated protobuf", in: frame(body(valid)[:len(body(valid))-1]), err: ErrCorrupt, msg: "exceeds"},
		{name: "truncated tag varint", in: frame(msg(pkA, rec(fVarint(1, 0), dataX), []byte{0x80})), err: ErrCorrupt, msg: "field tag"},
		{name: "truncated fixed64", in: frame(msg(pkA, rec(fVarint(1, 0), dataX), fRaw(20, wireFixed64, 1, 2, 3))), err: ErrCorrupt, msg: "truncated"},
		{name: "truncated fixed32", in: frame(msg(pkA, rec(fVarint(1, 0), dataX), fRaw(20, wireFixed32, 1))), err: ErrCorrupt, msg: "truncated"},
		{name: "truncated inside a record", in: frame(msg(pkA, fBytes(fieldRecords, msg(fVarint(1, 0), []byte{0x1a, 0x05, 'x'})))), err: ErrCorrupt, msg: "record 0"},
		{name: "partition key index out of range", in: frame(msg(pkA, rec(fVarint(fieldPartitionKeyIndex, 1), dataX))), err: ErrCorrupt, msg: "partition_key_index 1 out of range of 1"},
		{name: "huge partition key index", in: frame(msg(pkA, rec(fVarint(fieldPartitionKeyIndex, 1<<63), dataX))), err: ErrCorrupt, msg: "out of range"},
		{name: "explicit hash key index out of range", in: frame(msg(pkA, fStr(fieldExplicitHashKeyTable, "1"),
			rec(fVarint(fieldPartitionKeyIndex, 0), fVarint(fieldExplicitHashKeyIndex, 1), dataX))), err: ErrCorrupt, msg: "explicit_hash_key_index 1 out of range of 1"},
		{name: "explicit hash key index without a table", in: frame(msg(pkA,
			rec(fVarint(fieldPartitionKeyIndex, 0), fVarint(fieldExplicitHashKeyIndex, 0), dataX))), err: ErrCorrupt, msg: "out of range of 0"},
		{name: "second record bad, first good", in: frame(msg(pkA, rec(fVarint(1, 0), dataX), rec(fVarint(1, 3), dataX))), err: ErrCorrupt, msg: "record 1"},
		{name: "missing partition key index", in: frame(msg(pkA, rec(dataX))), err: ErrCorrupt, msg: "partition_key_index missing"},
		{name: "missing data", in: frame(msg(pkA, rec(fVarint(fieldPartitionKeyIndex, 0)))), err: ErrCorrupt, msg: "data missing"},
		{name: "huge declared length 2^64-1", in: frame(msg(pkA, huge)), err: ErrCorrupt, msg: "declared length 18446744073709551615"},
		{name: "huge declared length 2^31", in: frame(msg(pkA, appendVarint(appendTag(nil, 3, wireBytes), 1<<31))), err: ErrCorrupt, msg: "exceeds"},
		{name: "declared length one past the end", in: frame(msg(pkA, appendVarint(appendTag(nil, 1, wireBytes), 2), []byte("b"))), err: ErrCorrupt, msg: "exceeds the 1 bytes left"},
		{name: "varint over 10 bytes", in: frame(msg(pkA, rec(fRaw(1, wireVarint, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), dataX))), err: ErrCorrupt, msg: "varint"},
		{name: "varint over 64 bits", in: frame(msg(pkA, rec(fRaw(1, wireVarint, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), dataX))), err: ErrCorrupt, msg: "varint"},
		{name: "group start rejected", in: frame(msg(pkA, fRaw(5, 3), rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "wire type 3"},
		{name: "group end rejected", in: frame(msg(pkA, rec(fVarint(1, 0), dataX, fRaw(5, 4)))), err: ErrCorrupt, msg: "wire type 4"},
		{name: "wire type 6", in: frame(msg(pkA, fRaw(5, 6), rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "wire type 6"},
		{name: "wire type 7", in: frame(msg(pkA, fRaw(5, 7), rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "wire type 7"},
		{name: "field number 0", in: frame(msg(pkA, []byte{0x02, 0x00}, rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "field number 0"},
		{name: "field number over 2^29-1", in: frame(msg(pkA, fRaw(maxFieldNumber+1, wireVarint, 0), rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "invalid field number"},
		{name: "records field as varint", in: frame(msg(pkA, fVarint(fieldRecords, 1))), err: ErrCorrupt, msg: "AggregatedRecord field 3 has wire type 0"},
		{name: "key table as fixed32", in: frame(msg(fRaw(fieldPartitionKeyTable, wireFixed32, 'a', 'b', 'c', 'd'), rec(fVarint(1, 0), dataX))), err: ErrCorrupt, msg: "field 1 has wire type 5"},
		{name: "partition key index as bytes", in: frame(msg(pkA, rec(fStr(fieldPartitionKeyIndex, "0"), dataX))), err: ErrCorrupt, msg: "Record field 1 has wire type 2"},
		{name: "data as varint", in: frame(msg(pkA, rec(fVarint(fieldPartitionKeyIndex, 0), fVarint(fieldData, 5)))), err: ErrCorrupt, msg: "Record field 3 has wire type 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Deaggregate(tt.in)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("Deaggregate: %v", err)
				}
				if !recordsEqual(got, tt.want) {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("Deaggregate = %+v, %v; want error wrapping %v", got, err, tt.err)
			}
			if got != nil {
				t.Errorf("records %+v returned with an error", got)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not name the problem %q", err, tt.msg)
			}
			if errors.Is(err, ErrNotAggregated) == IsAggregated(tt.in) {
				t.Errorf("ErrNotAggregated = %v but IsAggregated = %v", errors.Is(err, ErrNotAggregated), IsAggregated(tt.in))
			}
		})
	}
}

func TestDeaggregateDataAliasesInput(t *testing.T) {
	agg, err := Aggregate([]UserRecord{{PartitionKey: "a", Data: []byte("first")}, {PartitionKey: "a", Data: []byte("second")}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := Deaggregate(agg)
	if err != nil {
		t.Fatal(err)
	}
	// Capped: appending to one record's data must not overwrite the next record's bytes.
	if cap(recs[0].Data) != len(recs[0].Data) {
		t.Errorf("cap(Data) = %d, want %d", cap(recs[0].Data), len(recs[0].Data))
	}
	_ = append(recs[0].Data, "XXXXXXXXXXXXXXXX"...)
	if string(recs[1].Data) != "second" {
		t.Errorf("append to record 0 changed record 1 to %q", recs[1].Data)
	}
	// Aliased: the documented contract (no copy) is real.
	i := bytes.Index(agg, []byte("first"))
	agg[i] = 'F'
	if string(recs[0].Data) != "First" {
		t.Errorf("Data does not alias the input: %q", recs[0].Data)
	}
	// Keys are copies.
	j := bytes.IndexByte(agg[len(Magic):], 'a') + len(Magic)
	agg[j] = 'z'
	if recs[0].PartitionKey != "a" {
		t.Errorf("PartitionKey aliases the input: %q", recs[0].PartitionKey)
	}
}

func TestReadVarint(t *testing.T) {
	tests := []struct {
		in   []byte
		want uint64
		n    int
		ok   bool
	}{
		{[]byte{0}, 0, 1, true},
		{[]byte{0x7f}, 127, 1, true},
		{[]byte{0x80, 0x01}, 128, 2, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1<<64 - 1, 10, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 0, 0, false},
		{[]byte{0x80}, 0, 0, false},
		{nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("% x", tt.in), func(t *testing.T) {
			v, n, err := readVarint(tt.in)
			if (err == nil) != tt.ok || v != tt.want || n != tt.n {
				t.Fatalf("readVarint = %d, %d, %v; want %d, %d, ok=%v", v, n, err, tt.want, tt.n, tt.ok)
			}
			if tt.ok {
				if enc := appendVarint(nil, v); sizeVarint(v) != len(enc) || (n == len(enc) && !bytes.Equal(enc, tt.in)) {
					t.Errorf("appendVarint(%d) = % x (size %d)", v, enc, sizeVarint(v))
				}
			}
		})
	}
}
