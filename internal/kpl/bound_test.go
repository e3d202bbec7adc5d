package kpl

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// tiny is an aggregate of n user records with empty data and one partition key: about 6 bytes
// a user record, the densest the format allows (1 MiB holds ~175,000).
func tiny(n int) []byte {
	recs := make([]UserRecord, n)
	for i := range recs {
		recs[i] = UserRecord{PartitionKey: "k"}
	}
	return encode(recs)
}

// allocated is the number of bytes f allocates on the heap (runtime.MemStats.TotalAlloc, which
// only grows: a garbage collection during f does not hide what f allocated).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDeaggregateBoundsUserRecords: an aggregate of 200,000 tiny user records is refused before
// any user record is built (ErrTooManyRecords, a kind of ErrCorrupt: the consumer parks the
// Kinesis record with its raw bytes), and refusing it allocates next to nothing; one at the
// bound is de-aggregated.
func TestDeaggregateBoundsUserRecords(t *testing.T) {
	agg := tiny(200_000)
	var err error
	heap := allocated(func() { _, err = Deaggregate(agg) })
	if !errors.Is(err, ErrTooManyRecords) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("200,000 user records: err %v, want ErrTooManyRecords wrapping ErrCorrupt", err)
	}
	t.Logf("aggregate of %d bytes, 200,000 user records: refused, %d bytes allocated", len(agg), heap)
	if heap > 64<<10 {
		t.Errorf("refusing the aggregate allocated %d bytes, want under 64 KiB (it must not build the user records)", heap)
	}
	users, err := Deaggregate(tiny(MaxUserRecords))
	if err != nil || len(users) != MaxUserRecords {
		t.Fatalf("%d user records (the bound): %d, %v", MaxUserRecords, len(users), err)
	}
	if _, err := DeaggregateMax(tiny(11), 10); !errors.Is(err, ErrTooManyRecords) {
		t.Errorf("DeaggregateMax(11 records, 10): %v, want ErrTooManyRecords", err)
	}
}

// TestDeaggregatePartitionKeyLength: Kinesis allows partition keys of 1 to 256 characters; an
// aggregate whose key table holds a longer one cannot have come from a KPL that Kinesis
// accepted keys from, and its user record would carry a key no Kinesis record can: the
// aggregate is corrupt (and parked), not de-aggregated.
func TestDeaggregatePartitionKeyLength(t *testing.T) {
	for _, c := range []struct {
		name string
		key  string
		ok   bool
	}{
		{"256 characters", strings.Repeat("k", 256), true},
		{"256 characters of 3 bytes", strings.Repeat("€", 256), true},
		{"257 characters", strings.Repeat("k", 257), false},
		{"300 bytes", strings.Repeat("k", 300), false},
	} {
		agg := encode([]UserRecord{{PartitionKey: "short", Data: []byte("a")}, {PartitionKey: c.key, Data: []byte("b")}})
		_, err := Deaggregate(agg)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, ErrCorrupt):
			t.Errorf("%s: err %v, want ErrCorrupt", c.name, err)
		}
	}
}

// BenchmarkDeaggregateOversized reports what refusing a 200,000-record aggregate costs
// (go test -bench DeaggregateOversized -benchmem ./internal/kpl).
func BenchmarkDeaggregateOversized(b *testing.B) {
	agg := tiny(200_000)
	b.ReportAllocs()
	b.SetBytes(int64(len(agg)))
	for b.Loop() {
		if _, err := Deaggregate(agg); !errors.Is(err, ErrTooManyRecords) {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeaggregateAtBound is the heap of an aggregate at the bound, for comparison.
func BenchmarkDeaggregateAtBound(b *testing.B) {
	agg := tiny(MaxUserRecords)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Deaggregate(agg); err != nil {
			b.Fatal(err)
		}
	}
}
