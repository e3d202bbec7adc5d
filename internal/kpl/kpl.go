// Package kpl reads and writes the Kinesis Producer Library (KPL) aggregated record format: one
// Kinesis record carrying many user records.
//
// Format (awslabs/amazon-kinesis-producer, aggregation-format.md):
//
//	0               4                  N          N+15
//	+---+---+---+---+==================+---+...+---+
//	|  MAGIC NUMBER | PROTOBUF MESSAGE |    MD5    |
//	+---+---+---+---+==================+---+...+---+
//
// with the magic F3 89 9A C2, the 16-byte MD5 computed over the protobuf bytes, and the proto2
// messages
//
//	message AggregatedRecord {
//	  repeated string partition_key_table     = 1;
//	  repeated string explicit_hash_key_table = 2;
//	  repeated Record records                 = 3;
//	}
//	message Record {
//	  required uint64 partition_key_index     = 1;
//	  optional uint64 explicit_hash_key_index = 2;
//	  required bytes  data                    = 3;
//	  repeated Tag    tags                    = 4;   // "not yet implemented in the KPL and KCL APIs"
//	}
//
// The protobuf wire format is decoded by hand (varints and length-delimited fields only), so the
// package has no protobuf dependency. Input is untrusted: every length is checked against the
// buffer before use, and no input makes Deaggregate panic (see FuzzDeaggregate).
package kpl

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Magic is the 4-byte prefix of every KPL aggregated record.
var Magic = []byte{0xF3, 0x89, 0x9A, 0xC2}

// digestSize is the length of the MD5 trailer.
const digestSize = md5.Size

// MaxRecordSize is the largest Kinesis record data blob (1 MiB); Aggregate refuses to build an
// aggregate that Kinesis would reject.
const MaxRecordSize = 1 << 20

// maxPartitionKeyRunes is Kinesis's partition key limit (1 to 256 Unicode characters).
const maxPartitionKeyRunes = 256

var (
	// ErrNotAggregated is returned by Deaggregate for data that is not a KPL aggregate (no magic,
	// or too short to hold the magic and the MD5): the caller treats the Kinesis record as one
	// plain user record.
	ErrNotAggregated = errors.New("kpl: not an aggregated record")

	// ErrCorrupt is wrapped by every error for data that carries the magic but cannot be
	// de-aggregated: MD5 mismatch, malformed protobuf, a key index outside its table, or no
	// user records at all. The consumer treats the whole Kinesis record as one failed record
	// (and eventually parks it with its payload), never as a crash.
	ErrCorrupt = errors.New("kpl: corrupt aggregated record")

	// ErrInvalid is wrapped by Aggregate's errors for input it cannot encode.
	ErrInvalid = errors.New("kpl: invalid user records")

	// ErrTooManyRecords is wrapped (with ErrCorrupt) by Deaggregate's error for an aggregate
	// of more user records than the bound.
	ErrTooManyRecords = errors.New("kpl: aggregate holds more user records than the bound")
)

// MaxUserRecords is the most user records Deaggregate takes from one aggregate.
const MaxUserRecords = 50_000

// UserRecord is one user record inside an aggregate. ExplicitHashKey is empty when the record
// has none.
type UserRecord struct {
	PartitionKey    string
	ExplicitHashKey string
	Data            []byte
}

// IsAggregated reports whether data starts with the magic and is longer than the magic plus the
// MD5 trailer.
//
// A record with the magic that is not longer than that is a plain record, as in AWS's reference
// de-aggregators (awslabs/kinesis-aggregation go/v2/deaggregator/deaggregator.go and
// python/aws_kinesis_agg/deaggregator.py: `len(data_without_magic) <= DIGEST_SIZE` means "not
// aggregated", and the record is passed through unchanged).
func IsAggregated(data []byte) bool {
	return len(data) > len(Magic)+digestSize && bytes.HasPrefix(data, Magic)
}

// Deaggregate splits a KPL aggregated record into its user records, in aggregate order (the
// index of a user record in the result is its KPL sub-sequence number). An aggregate of more
// than MaxUserRecords user records, or with a partition key longer than Kinesis allows, is
// corrupt (ErrCorrupt; ErrTooManyRecords for the count): the caller parks the Kinesis record
// with its raw bytes rather than build what it frames.
//
// For data that is not an aggregate (see IsAggregated) it returns (nil, ErrNotAggregated). For
// an aggregate it cannot decode it returns an error wrapping ErrCorrupt that names the problem;
// it never returns an empty slice with a nil error.
//
// Two choices differ from AWS's reference de-aggregators (awslabs/kinesis-aggregation, Go and
// Python), deliberately, because gapless must account for every Kinesis record:
//   - MD5 mismatch: the references silently treat the record as plain and hand the raw binary to
//     the application; here it is ErrCorrupt, so the record fails, is retried and finally parked
//     with its payload. Plain text or JSON payloads cannot start with the magic (F3 89 9A C2 is
//     not valid UTF-8), so only binary payloads with a 2^-32 chance are affected, and they are
//     parked, not lost.
//   - An aggregate with zero user records: the references yield nothing, so the Kinesis record
//     disappears without a trace and its sequence number would never show up as done in the
//     ledger. The KPL never produces one; here it is ErrCorrupt.
//
// The Data slices of the result alias data (no copy); they are capped, so appending to one
// cannot overwrite its neighbours. Callers that keep a user record after changing data must
// copy it. Keys are copied into fresh strings.
func Deaggregate(data []byte) ([]UserRecord, error) { return DeaggregateMax(data, MaxUserRecords) }

// DeaggregateMax is Deaggregate with another bound on user records.
func DeaggregateMax(data []byte, maxRecords int) ([]UserRecord, error) {
	if !IsAggregated(data) {
		return nil, ErrNotAggregated
	}
	body := data[len(Magic) : len(data)-digestSize]
	sum := md5.Sum(body)
	if !bytes.Equal(sum[:], data[len(data)-digestSize:]) {
		return nil, fmt.Errorf("%w: MD5 mismatch over %d protobuf bytes", ErrCorrupt, len(body))
	}

	// Pass 1: check the framing of every top-level field and count them, so each table is
	// allocated once. Fields may come in any order, so the tables must be complete before
	// records are resolved.
	var nPK, nEHK, nRec int
	if err := walk(body, func(field uint64, wire int, _ []byte) error {
		switch field {
		case fieldPartitionKeyTable, fieldExplicitHashKeyTable, fieldRecords:
			if wire != wireBytes {
				return fmt.Errorf("AggregatedRecord field %d has wire type %d, want %d", field, wire, wireBytes)
			}
		}
		switch field {
		case fieldPartitionKeyTable:
			nPK++
		case fieldExplicitHashKeyTable:
			nEHK++
		case fieldRecords:
			nRec++
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if nRec == 0 {
		return nil, fmt.Errorf("%w: aggregate holds no user records", ErrCorrupt)
	}
	// Counted before anything is allocated: one 1 MiB record can frame ~175,000 empty user
	// records (~6 bytes each), and building them all (the user records here, the pipeline's
	// records and outcomes after) would take hundreds of MiB of heap for one Kinesis record.
	if nRec > maxRecords {
		return nil, fmt.Errorf("%w: %w: %d user records, the bound is %d", ErrCorrupt, ErrTooManyRecords, nRec, maxRecords)
	}

	// Pass 2: the key tables.
	pks := make([]string, 0, nPK)
	var ehks []string
	if nEHK > 0 {
		ehks = make([]string, 0, nEHK)
	}
	// A partition key longer than Kinesis allows (256 characters) was never accepted by Kinesis
	// from the KPL: the aggregate was not written by it, and its user records would carry keys
	// no Kinesis record can.
	if err := walk(body, func(field uint64, _ int, v []byte) error { // framing already checked
		switch field {
		case fieldPartitionKeyTable:
			if len(v) > maxPartitionKeyRunes && utf8.RuneCount(v) > maxPartitionKeyRunes {
				return fmt.Errorf("partition key %d has %d characters, Kinesis allows %d", len(pks), utf8.RuneCount(v), maxPartitionKeyRunes)
			}
			pks = append(pks, string(v))
		case fieldExplicitHashKeyTable:
			ehks = append(ehks, string(v))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}

	// Pass 3: the records.
	out := make([]UserRecord, 0, nRec)
	err := walk(body, func(field uint64, _ int, v []byte) error {
		if field != fieldRecords {
			return nil
		}
		i := len(out)
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("record %d: %v", i, err)
		}
		if r.pk >= uint64(len(pks)) {
			return fmt.Errorf("record %d: partition_key_index %d out of range of %d partition keys", i, r.pk, len(pks))
		}
		u := UserRecord{PartitionKey: pks[r.pk], Data: r.data}
		if r.hasEHK {
			if r.ehk >= uint64(len(ehks)) {
				return fmt.Errorf("record %d: explicit_hash_key_index %d out of range of %d explicit hash keys", i, r.ehk, len(ehks))
			}
			u.ExplicitHashKey = ehks[r.ehk]
		}
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return out, nil
}

// Aggregate encodes records as one KPL aggregated record (magic, protobuf, MD5), sharing equal
// partition and explicit hash keys through the key tables as the KPL does. It is the producer
// side, used by tests, fixtures and the demo.
//
// It refuses (with an error wrapping ErrInvalid) an empty list (the KPL never emits an empty
// aggregate and Deaggregate rejects one), a partition key that Kinesis would reject (empty or
// longer than 256 characters) and a result larger than MaxRecordSize.
func Aggregate(records []UserRecord) ([]byte, error) {
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: an aggregate needs at least one user record", ErrInvalid)
	}
	for i, r := range records {
		if r.PartitionKey == "" || utf8.RuneCountInString(r.PartitionKey) > maxPartitionKeyRunes {
			return nil, fmt.Errorf("%w: record %d: partition key must have 1 to %d characters, has %d",
				ErrInvalid, i, maxPartitionKeyRunes, utf8.RuneCountInString(r.PartitionKey))
		}
	}
	out := encode(records)
	if len(out) > MaxRecordSize {
		return nil, fmt.Errorf("%w: aggregate of %d user records is %d bytes, over the %d-byte Kinesis record limit",
			ErrInvalid, len(records), len(out), MaxRecordSize)
	}
	return out, nil
}

// encode is Aggregate without validation (tests also use it to build odd but decodable input).
func encode(records []UserRecord) []byte {
	type rec struct{ pk, ehk uint64 }
	var (
		pkIndex  = map[string]uint64{}
		ehkIndex = map[string]uint64{}
		pks      []string
		ehks     []string
		idx      = make([]rec, len(records))
	)
	for i, r := range records {
		n, ok := pkIndex[r.PartitionKey]
		if !ok {
			n = uint64(len(pks))
			pkIndex[r.PartitionKey] = n
			pks = append(pks, r.PartitionKey)
		}
		idx[i].pk = n
		if r.ExplicitHashKey != "" {
			n, ok := ehkIndex[r.ExplicitHashKey]
			if !ok {
				n = uint64(len(ehks))
				ehkIndex[r.ExplicitHashKey] = n
				ehks = append(ehks, r.ExplicitHashKey)
			}
			idx[i].ehk = n
		}
	}

	recSize := func(i int) int {
		n := sizeTag(fieldPartitionKeyIndex) + sizeVarint(idx[i].pk)
		if records[i].ExplicitHashKey != "" {
			n += sizeTag(fieldExplicitHashKeyIndex) + sizeVarint(idx[i].ehk)
		}
		return n + sizeBytesField(fieldData, len(records[i].Data))
	}
	size := len(Magic) + digestSize
	for _, k := range pks {
		size += sizeBytesField(fieldPartitionKeyTable, len(k))
	}
	for _, k := range ehks {
		size += sizeBytesField(fieldExplicitHashKeyTable, len(k))
	}
	for i := range records {
		size += sizeBytesField(fieldRecords, recSize(i))
	}

	b := make([]byte, 0, size)
	b = append(b, Magic...)
	for _, k := range pks {
		b = appendBytesField(b, fieldPartitionKeyTable, []byte(k))
	}
	for _, k := range ehks {
		b = appendBytesField(b, fieldExplicitHashKeyTable, []byte(k))
	}
	for i, r := range records {
		b = appendTag(b, fieldRecords, wireBytes)
		b = appendVarint(b, uint64(recSize(i)))
		b = appendTag(b, fieldPartitionKeyIndex, wireVarint)
		b = appendVarint(b, idx[i].pk)
		if r.ExplicitHashKey != "" {
			b = appendTag(b, fieldExplicitHashKeyIndex, wireVarint)
			b = appendVarint(b, idx[i].ehk)
		}
		b = appendBytesField(b, fieldData, r.Data)
	}
	sum := md5.Sum(b[len(Magic):])
	return append(b, sum[:]...)
}

// record is a decoded Record message before its indexes are resolved.
type record struct {
	pk, ehk     uint64
	hasEHK      bool
	data        []byte
	hasPK, hasD bool
}

func decodeRecord(b []byte) (record, error) {
	var r record
	err := walk(b, func(field uint64, wire int, v []byte) error {
		switch field {
		case fieldPartitionKeyIndex, fieldExplicitHashKeyIndex:
			if wire != wireVarint {
				return fmt.Errorf("Record field %d has wire type %d, want %d", field, wire, wireVarint)
			}
			n, _, _ := readVarint(v) // walk hands varint fields over as their encoded bytes
			if field == fieldPartitionKeyIndex {
				r.pk, r.hasPK = n, true
			} else {
				r.ehk, r.hasEHK = n, true
			}
		case fieldData:
			if wire != wireBytes {
				return fmt.Errorf("Record field %d has wire type %d, want %d", field, wire, wireBytes)
			}
			r.data, r.hasD = v, true // proto: the last occurrence of a singular field wins
		}
		return nil // tags (field 4) and unknown fields are skipped
	})
	switch {
	case err != nil:
		return r, err
	case !r.hasPK:
		return r, errors.New("required partition_key_index missing")
	case !r.hasD:
		return r, errors.New("required data missing")
	}
	return r, nil
}
