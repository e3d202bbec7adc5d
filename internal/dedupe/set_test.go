package dedupe

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

const testShardID = "shardId-000000000000"

// seedSeq is a real sequence number from the seed report; its neighbours there differ by
// multiples of 2^80.
const seedSeq = "49584571934843771141903627621780519911929601359651799042"

var kinesisStep = new(big.Int).Lsh(big.NewInt(1), 80)

// seqAt returns seedSeq + k·2^80.
func seqAt(k int64) string {
	v, _ := new(big.Int).SetString(seedSeq, 10)
	return v.Add(v, new(big.Int).Mul(big.NewInt(k), kinesisStep)).String()
}

func rid(seq string, sub uint32) recordid.ID {
	return recordid.ID{ShardID: testShardID, Seq: seq, Sub: sub}
}

func TestSetEncodingExamples(t *testing.T) {
	t.Parallel()
	max129 := strings.Repeat("9", 129)
	tests := []struct {
		name string
		in   []recordid.ID
		want []recordid.ID // nil: same as in
		size int           // expected encoded length; 0: don't check
	}{
		{name: "empty", in: nil, want: []recordid.ID{}, size: 2},
		{name: "zero sequence", in: []recordid.ID{rid("0", 0)}, size: 4},
		{name: "one id", in: []recordid.ID{rid(seedSeq, 0)}},
		{name: "seed spacing costs 3 bytes per id",
			in:   []recordid.ID{rid(seqAt(0), 0), rid(seqAt(1), 0), rid(seqAt(2), 0), rid(seqAt(4), 0)},
			size: 2 + (2 + 24 + 1) + 3*3},
		{name: "sub-indexes of one aggregate",
			in:   []recordid.ID{rid(seqAt(0), 0), rid(seqAt(0), 1), rid(seqAt(0), 2), rid(seqAt(0), 7)},
			size: 2 + 27 + 3*2},
		{name: "max sub-index", in: []recordid.ID{rid("5", 0), rid("5", math.MaxUint32), rid("6", math.MaxUint32)}},
		{name: "largest sequence", in: []recordid.ID{rid("1", 0), rid(max129, 3)}},
		{name: "unsorted with duplicates",
			in:   []recordid.ID{rid("30", 1), rid("10", 0), rid("30", 1), rid("20", 5), rid("10", 0)},
			want: []recordid.ID{rid("10", 0), rid("20", 5), rid("30", 1)}},
		{name: "string order differs from numeric order",
			in:   []recordid.ID{rid("9", 0), rid("10", 0), rid("100", 0)},
			want: []recordid.ID{rid("9", 0), rid("10", 0), rid("100", 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = tt.in
			}
			enc, err := AppendSet(nil, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if tt.size != 0 && len(enc) != tt.size {
				t.Errorf("encoded %d bytes, want %d: %x", len(enc), tt.size, enc)
			}
			got, err := DecodeSet(enc, testShardID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round trip\n got %v\nwant %v", got, want)
			}
		})
	}
}

func TestAppendSetRejectsInvalidSequences(t *testing.T) {
	t.Parallel()
	for _, seq := range []string{"", "01", "12a", "-1", strings.Repeat("1", 130)} {
		_, err := AppendSet(nil, []recordid.ID{rid("1", 0), rid(seq, 0)})
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, seqnum.ErrInvalid) {
			t.Errorf("AppendSet(%q) = %v, want ErrInvalid and seqnum.ErrInvalid", seq, err)
		}
	}
}

func TestAppendSetDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	in := []recordid.ID{rid("3", 0), rid("1", 0), rid("2", 0)}
	orig := slices.Clone(in)
	if _, err := AppendSet(nil, in); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in, orig) {
		t.Fatalf("input changed to %v", in)
	}
}

func TestDecodeSetRejects(t *testing.T) {
	t.Parallel()
	valid, _ := AppendSet(nil, []recordid.ID{rid(seqAt(0), 0), rid(seqAt(1), 0), rid(seqAt(1), 3)})
	tests := []struct {
		name, in, msg string
	}{
		{"nil", "", "empty set"},
		{"bad version", "\x02\x00", "version"},
		{"truncated count", "\x01", "truncated varint"},
		{"count larger than input", "\x01\x05\x00\x00", "cannot fit"},
		{"truncated magnitude", "\x01\x01\x80\x01\x05", "truncated"},
		{"leading zero magnitude byte", "\x01\x01\x80\x01\x00\x01\x00", "non-canonical"},
		{"trailing zero magnitude byte", "\x01\x01\x80\x01\x01\x00\x00", "non-canonical"},
		{"zero value with zero bytes", "\x01\x01\x05\x00", "zero value"},
		{"value longer than 56 bytes", "\x01\x01\xc0\x1c" + strings.Repeat("\x01", 57) + "\x00", "longer than any"},
		{"sequence above 129 digits", "\x01\x01\x80\x1c" + strings.Repeat("\xff", 56) + "\x00", "129 digits"},
		{"sum above 129 digits", "\x01\x02\x80\x1c" + strings.Repeat("\x11", 56) + "\x00\x80\x1c" + strings.Repeat("\x11", 56) + "\x00", "129 digits"},
		{"sum overflows 448 bits", "\x01\x02\x80\x1c\x01" + strings.Repeat("\x00", 54) + "\x01\x00\x80\x1c" + strings.Repeat("\xff", 56) + "\x00", "129 digits"},
		{"sub-index above 2^32-1", "\x01\x01\x00\x80\x80\x80\x80\x10", "sub-index"},
		{"same-sequence sub overflow", "\x01\x02\x00\xff\xff\xff\xff\x0f\x00\x00", "sub-index after"},
		{"non-minimal varint", "\x01\x01\x00\x80\x00", "non-minimal"},
		{"varint overflow", "\x01\x01\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", "overflows 64 bits"},
		{"trailing bytes", string(valid) + "\x00", "trailing"},
		{"truncated valid", string(valid[:len(valid)-1]), "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, err := DecodeSet([]byte(tt.in), testShardID)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("DecodeSet(%x) = %v, %v; want ErrCorrupt mentioning %q", tt.in, ids, err, tt.msg)
			}
		})
	}
}

// genSeq draws canonical sequence numbers of every length 1..129.
func genSeq() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		n := rapid.IntRange(1, seqnum.MaxDigits).Draw(t, "len")
		if n == 1 {
			return string(rune('0' + rapid.IntRange(0, 9).Draw(t, "d")))
		}
		var b strings.Builder
		b.WriteByte(byte('1' + rapid.IntRange(0, 8).Draw(t, "lead")))
		for i := 1; i < n; i++ {
			b.WriteByte(byte('0' + rapid.IntRange(0, 9).Draw(t, "d")))
		}
		return b.String()
	})
}

// genSub favours small sub-indexes but reaches the extremes.
func genSub() *rapid.Generator[uint32] {
	return rapid.OneOf(rapid.Uint32Range(0, 3), rapid.Uint32(), rapid.Just(uint32(math.MaxUint32)))
}

// genIDs draws id sets in three shapes: unrelated sequences of any length, Kinesis-like runs
// (a base plus small multiples of 2^80, with KPL sub-indexes) and dense runs of neighbours.
func genIDs() *rapid.Generator[[]recordid.ID] {
	anyIDs := rapid.Custom(func(t *rapid.T) []recordid.ID {
		n := rapid.IntRange(0, 40).Draw(t, "n")
		ids := make([]recordid.ID, n)
		for i := range ids {
			ids[i] = rid(genSeq().Draw(t, "seq"), genSub().Draw(t, "sub"))
		}
		return ids
	})
	run := func(step func(t *rapid.T) *big.Int) *rapid.Generator[[]recordid.ID] {
		return rapid.Custom(func(t *rapid.T) []recordid.ID {
			base, _ := new(big.Int).SetString(genSeq().Draw(t, "base"), 10)
			n := rapid.IntRange(0, 200).Draw(t, "n")
			limit, _ := new(big.Int).SetString(strings.Repeat("9", 129), 10)
			ids := make([]recordid.ID, 0, n)
			for range n {
				if base.Cmp(limit) > 0 {
					break
				}
				subs := rapid.IntRange(1, 3).Draw(t, "subs")
				for s := range subs {
					ids = append(ids, rid(base.String(), uint32(s)))
				}
				base = new(big.Int).Add(base, step(t))
			}
			rapid.Permutation(ids).Draw(t, "order")
			return ids
		})
	}
	kinesis := run(func(t *rapid.T) *big.Int {
		return new(big.Int).Mul(big.NewInt(rapid.Int64Range(1, 4).Draw(t, "k")), kinesisStep)
	})
	dense := run(func(t *rapid.T) *big.Int { return big.NewInt(rapid.Int64Range(0, 300).Draw(t, "d")) })
	return rapid.OneOf(anyIDs, kinesis, dense)
}

func TestSetRoundTripProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ids := genIDs().Draw(t, "ids")
		enc, err := AppendSet([]byte("prefix"), ids)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatal("AppendSet lost dst")
		}
		enc = enc[len("prefix"):]
		want := slices.Clone(ids)
		slices.SortFunc(want, recordid.Compare)
		want = slices.Compact(want)
		if want == nil {
			want = []recordid.ID{}
		}
		if n := encodedSize(want); n != len(enc) {
			t.Fatalf("encodedSize = %d, encoding has %d bytes", n, len(enc))
		}
		got, err := DecodeSet(enc, testShardID)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round trip\n got %v\nwant %v", got, want)
		}
	})
}

// checkDecodeArbitrary is the property for any input bytes: no panic; an error wraps
// ErrCorrupt; a success re-encodes to exactly the input (every set has one encoding) and
// yields valid, strictly increasing ids.
func checkDecodeArbitrary(t interface{ Fatalf(string, ...any) }, b []byte) {
	ids, err := DecodeSet(b, testShardID)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeSet(%x) error %v does not wrap ErrCorrupt", b, err)
		}
		return
	}
	for i, id := range ids {
		if err := id.Validate(); err != nil {
			t.Fatalf("DecodeSet(%x) yielded invalid id %v: %v", b, id, err)
		}
		if i > 0 && recordid.Compare(ids[i-1], id) >= 0 {
			t.Fatalf("DecodeSet(%x) yielded unordered ids %v, %v", b, ids[i-1], id)
		}
	}
	again, err := AppendSet(nil, ids)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("DecodeSet(%x) re-encodes to %x", b, again)
	}
}

func TestDecodeArbitraryBytesProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var b []byte
		if rapid.Bool().Draw(t, "mutate") {
			// Mutations of valid encodings reach deeper than random bytes.
			ids := genIDs().Draw(t, "ids")
			b, _ = AppendSet(nil, ids)
			for range rapid.IntRange(1, 4).Draw(t, "edits") {
				if len(b) == 0 {
					break
				}
				i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
				switch rapid.IntRange(0, 2).Draw(t, "op") {
				case 0:
					b[i] = rapid.Byte().Draw(t, "byte")
				case 1:
					b = append(b[:i], b[i+1:]...)
				case 2:
					b = slices.Insert(b, i, rapid.Byte().Draw(t, "byte"))
				}
			}
		} else {
			b = rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		}
		checkDecodeArbitrary(t, b)
	})
}

func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, ids := range [][]recordid.ID{
		nil,
		{rid("0", 0)},
		{rid(seqAt(0), 0), rid(seqAt(1), 0), rid(seqAt(1), 1), rid(seqAt(3), 0)},
		{rid("1", math.MaxUint32), rid(strings.Repeat("9", 129), 0)},
	} {
		b, _ := AppendSet(nil, ids)
		seeds = append(seeds, b)
	}
	return append(seeds, []byte{}, []byte{1}, []byte{1, 1, 0xC0, 0x07, 0xff}, []byte{1, 0x80})
}

// FuzzDecodeSet: go test -run '^$' -fuzz FuzzDecodeSet ./internal/dedupe
func FuzzDecodeSet(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecodeArbitrary(t, b) })
}

// FuzzSetRoundTrip builds an id set from arbitrary bytes (each id: a length byte, that many
// magnitude bytes, a sub-index byte) and checks that it survives encoding and decoding:
// go test -run '^$' -fuzz FuzzSetRoundTrip ./internal/dedupe
func FuzzSetRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 7, 0, 1, 7, 1, 3, 1, 2, 3, 0})
	f.Add(append([]byte{54}, bytes.Repeat([]byte{0xff}, 55)...))
	limit, _ := new(big.Int).SetString(strings.Repeat("9", 129), 10)
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids []recordid.ID
		for len(data) > 0 {
			n := min(int(data[0])%56, len(data)-1)
			v := new(big.Int).SetBytes(data[1 : 1+n])
			data = data[1+n:]
			if v.Cmp(limit) > 0 {
				v.Mod(v, limit)
			}
			var sub uint32
			if len(data) > 0 {
				sub = uint32(data[0]) * 0x01010101
				data = data[1:]
			}
			ids = append(ids, rid(v.String(), sub))
		}
		enc, err := AppendSet(nil, ids)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeSet(enc, testShardID)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(ids)
		slices.SortFunc(want, recordid.Compare)
		want = slices.Compact(want)
		if len(got) != len(want) || (len(got) > 0 && !slices.Equal(got, want)) {
			t.Fatalf("round trip\n got %v\nwant %v", got, want)
		}
	})
}

// TestNumAgainstBig checks the fixed-width arithmetic against math/big.
func TestNumAgainstBig(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		a, b := genSeq().Draw(t, "a"), genSeq().Draw(t, "b")
		da, ok := parseDec(a)
		if !ok || !da.valid() {
			t.Fatalf("parseDec(%s) failed", a)
		}
		db, _ := parseDec(b)
		if got := string(da.appendDecimal(nil)); got != a {
			t.Fatalf("decimal round trip of %s = %s", a, got)
		}
		ba, _ := new(big.Int).SetString(a, 10)
		bb, _ := new(big.Int).SetString(b, 10)
		if got, want := da.cmp(&db), ba.Cmp(bb); got != want {
			t.Fatalf("cmp(%s, %s) = %d, want %d", a, b, got, want)
		}
		na := da.toNum()
		if got := new(big.Int).SetBytes(numBytesBE(&na)); got.Cmp(ba) != 0 {
			t.Fatalf("toNum(%s) = %s", a, got)
		}
		if back := na.toDec(); back != da {
			t.Fatalf("toDec(toNum(%s)) = %s", a, back.appendDecimal(nil))
		}
		sum, ok := da.add(&db)
		if want := new(big.Int).Add(ba, bb).String(); !ok || string(sum.appendDecimal(nil)) != want || sum.valid() != (len(want) <= 129) {
			t.Fatalf("add(%s, %s) = %s, %v", a, b, sum.appendDecimal(nil), ok)
		}
		if ba.Cmp(bb) >= 0 {
			d := da.sub(&db)
			if string(d.appendDecimal(nil)) != new(big.Int).Sub(ba, bb).String() {
				t.Fatalf("sub(%s, %s) = %s", a, b, d.appendDecimal(nil))
			}
			v := d.toNum()
			l, z := v.span()
			mag := new(big.Int).Sub(ba, bb).Bytes()
			trailing := 0
			for i := len(mag) - 1; i >= 0 && mag[i] == 0; i-- {
				trailing++
			}
			if l+z != len(mag) || z != trailing {
				t.Fatalf("span of %x = (%d, %d), want (%d, %d)", mag, l, z, len(mag)-trailing, trailing)
			}
		}
	})
}

func numBytesBE(n *num) []byte {
	out := make([]byte, numBytes)
	for k := range numBytes {
		out[numBytes-1-k] = n.byteAt(k)
	}
	return out
}

func TestParseDecRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "12a", "-1", strings.Repeat("1", 130)} {
		if _, ok := parseDec(s); ok {
			t.Errorf("parseDec(%q) accepted", s)
		}
	}
	if d := maxSeqNum.toDec(); string(d.appendDecimal(nil)) != strings.Repeat("9", 129) {
		t.Fatal("maxSeqNum is not 10^129-1")
	}
}
