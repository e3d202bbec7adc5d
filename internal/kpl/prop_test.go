package kpl

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// genRecords draws 1..64 user records whose keys come from a small pool, so tables get shared
// entries, with arbitrary bytes in keys and data.
func genRecords() *rapid.Generator[[]UserRecord] {
	return rapid.Custom(func(t *rapid.T) []UserRecord {
		key := rapid.StringOfN(rapid.Rune(), 1, maxPartitionKeyRunes, -1)
		pks := rapid.SliceOfN(key, 1, 8).Draw(t, "pks")
		ehks := rapid.SliceOfN(rapid.OneOf(rapid.Just(""), rapid.StringMatching(`0|[1-9][0-9]{0,38}`), rapid.String()), 1, 4).Draw(t, "ehks")
		n := rapid.IntRange(1, 64).Draw(t, "n")
		out := make([]UserRecord, n)
		for i := range out {
			out[i] = UserRecord{
				PartitionKey:    rapid.SampledFrom(pks).Draw(t, "pk"),
				ExplicitHashKey: rapid.SampledFrom(ehks).Draw(t, "ehk"),
				Data:            rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data"),
			}
		}
		return out
	})
}

func TestPropertyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genRecords().Draw(t, "records")
		agg, err := Aggregate(in)
		if err != nil {
			t.Fatalf("Aggregate: %v", err)
		}
		out, err := Deaggregate(agg)
		if err != nil {
			t.Fatalf("Deaggregate: %v", err)
		}
		if !recordsEqual(in, out) {
			t.Fatalf("round trip mismatch:\n in %+v\nout %+v", in, out)
		}
	})
}

// TestPropertyCorruptionDetected flips one bit anywhere in a valid aggregate: the result is never
// silently different user records. Either the change is caught (an error), or it hit the magic
// (not aggregated).
func TestPropertyCorruptionDetected(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genRecords().Draw(t, "records")
		agg, err := Aggregate(in)
		if err != nil {
			t.Fatalf("Aggregate: %v", err)
		}
		i := rapid.IntRange(0, len(agg)-1).Draw(t, "byte")
		agg[i] ^= 1 << rapid.IntRange(0, 7).Draw(t, "bit")
		out, err := Deaggregate(agg)
		switch {
		case i < len(Magic):
			if !errors.Is(err, ErrNotAggregated) {
				t.Fatalf("magic byte %d changed: got %v, want ErrNotAggregated", i, err)
			}
		case !errors.Is(err, ErrCorrupt):
			t.Fatalf("byte %d changed: got %d records, err %v; want ErrCorrupt", i, len(out), err)
		}
	})
}

func seedAggregates(f *testing.F) {
	valid, err := Aggregate([]UserRecord{
		{PartitionKey: "a", Data: []byte(`{"id":"order-0001"}`)},
		{PartitionKey: "b", ExplicitHashKey: "1234", Data: []byte{0, 1, 2}},
		{PartitionKey: "a", Data: nil},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])                                    // digest cut
	f.Add(frame(body(valid)[:len(body(valid))-3]))                 // truncated protobuf, valid MD5
	f.Add(append(append([]byte(nil), valid[:6]...), valid[7:]...)) // a byte removed
	bad := append([]byte(nil), valid...)
	bad[len(bad)-1] ^= 0xff
	f.Add(bad)                                                                                                      // MD5 mismatch
	f.Add(frame(msg(fStr(1, "a"), rec(fVarint(1, 9), fStr(3, "x")))))                                               // bad index
	f.Add(frame(msg(fStr(1, "a"), appendVarint(appendTag(nil, 3, wireBytes), 1<<62))))                              // huge length
	f.Add(frame(msg(fStr(1, "a"), fRaw(7, 3), rec(fVarint(1, 0), fStr(3, "x")))))                                   // group
	f.Add(frame(msg(fStr(1, "a"), fRaw(8, wireFixed64, 1, 2, 3, 4, 5, 6, 7, 8), rec(fVarint(1, 0), fStr(3, "x"))))) // unknown field
	f.Add(frame(fStr(1, "a")))                                                                                      // no records
	f.Add(frame(nil))
	f.Add(Magic)
	f.Add([]byte(`{"id":"order-0001","amount":12.5}`))
	f.Add([]byte{})
}

func FuzzDeaggregate(f *testing.F) {
	seedAggregates(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		recs, err := Deaggregate(data)
		if !bytes.Equal(orig, data) {
			t.Fatal("Deaggregate modified its input")
		}
		if err != nil {
			if recs != nil {
				t.Fatalf("records returned with error %v", err)
			}
			notAgg := errors.Is(err, ErrNotAggregated)
			if notAgg == IsAggregated(data) {
				t.Fatalf("IsAggregated = %v but err = %v", IsAggregated(data), err)
			}
			if !notAgg && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		if len(recs) == 0 {
			t.Fatal("no records and no error")
		}
		// Decoded records re-encode to an aggregate that decodes to the same records.
		again, err := Deaggregate(encode(recs))
		if err != nil {
			t.Fatalf("re-encoded aggregate does not decode: %v", err)
		}
		if !recordsEqual(recs, again) {
			t.Fatalf("re-encode changed records:\n%+v\n%+v", recs, again)
		}
	})
}

// BenchmarkDeaggregate: an aggregate of 1,000 user records of 100 bytes each, with every record
// on its own partition key (the common KPL case) and with 10 shared keys.
func BenchmarkDeaggregate(b *testing.B) {
	for _, keys := range []int{1000, 10} {
		recs := make([]UserRecord, 1000)
		for i := range recs {
			recs[i] = UserRecord{PartitionKey: fmt.Sprintf("partition-%04d", i%keys), Data: bytes.Repeat([]byte{byte(i)}, 100)}
		}
		agg, err := Aggregate(recs)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("records=1000/size=100/keys=%d", keys), func(b *testing.B) {
			b.SetBytes(int64(len(agg)))
			b.ReportAllocs()
			for b.Loop() {
				out, err := Deaggregate(agg)
				if err != nil || len(out) != 1000 {
					b.Fatalf("%d records, %v", len(out), err)
				}
			}
		})
	}
}

func BenchmarkAggregate(b *testing.B) {
	recs := make([]UserRecord, 1000)
	for i := range recs {
		recs[i] = UserRecord{PartitionKey: fmt.Sprintf("partition-%04d", i), Data: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Aggregate(recs); err != nil {
			b.Fatal(err)
		}
	}
}
