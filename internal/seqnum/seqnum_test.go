package seqnum

import (
	"errors"
	"math/big"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"zero", "0", true},
		{"one digit", "7", true},
		{"typical 56 digits", "49584571934843771141903627621785355615208059945070100482", true},
		{"129 digits", "1" + strings.Repeat("0", 128), true},
		{"empty", "", false},
		{"leading zero", "0123", false},
		{"sign", "-1", false},
		{"space", "12 3", false},
		{"letter", "12a", false},
		{"130 digits", "1" + strings.Repeat("0", 129), false},
		{"unicode digit", "١٢", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.in)
			if tt.ok && err != nil {
				t.Fatalf("Validate(%q) = %v, want nil", tt.in, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate(%q) = %v, want ErrInvalid", tt.in, err)
			}
		})
	}
}

// genSeq draws canonical sequence numbers of every length 1..129.
func genSeq() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		n := rapid.IntRange(1, MaxDigits).Draw(t, "len")
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

func TestEncodePreservesOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := genSeq().Draw(t, "a"), genSeq().Draw(t, "b")
		ea, eb := MustEncode(a), MustEncode(b)
		ba, _ := new(big.Int).SetString(a, 10)
		bb, _ := new(big.Int).SetString(b, 10)
		want := ba.Cmp(bb)
		if got := strings.Compare(ea, eb); got != want {
			t.Fatalf("encoded order %d, numeric order %d for %s vs %s", got, want, a, b)
		}
		if got := Compare(a, b); got != want {
			t.Fatalf("Compare = %d, numeric order %d for %s vs %s", got, want, a, b)
		}
		if d, err := Decode(ea); err != nil || d != a {
			t.Fatalf("Decode(Encode(%s)) = %q, %v", a, d, err)
		}
	})
}

func TestNext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genSeq().Draw(t, "a")
		n, err := Next(a)
		if len(a) == MaxDigits && strings.Trim(a, "9") == "" {
			if err == nil {
				t.Fatalf("Next(%s) should overflow", a)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if Compare(a, n) != -1 || MustEncode(a) >= MustEncode(n) {
			t.Fatalf("Next(%s) = %s is not greater", a, n)
		}
	})
}

func FuzzEncode(f *testing.F) {
	for _, s := range []string{"0", "9", "10", "49584571934843771141903627621785355615208059945070100482", "", "007", "x"} {
		f.Add(s, "1")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, errA := Encode(a)
		eb, errB := Encode(b)
		if errA != nil || errB != nil {
			if (errA != nil && !errors.Is(errA, ErrInvalid)) || (errB != nil && !errors.Is(errB, ErrInvalid)) {
				t.Fatalf("error does not wrap ErrInvalid: %v %v", errA, errB)
			}
			return
		}
		ba, _ := new(big.Int).SetString(a, 10)
		bb, _ := new(big.Int).SetString(b, 10)
		if strings.Compare(ea, eb) != ba.Cmp(bb) {
			t.Fatalf("order broken for %q %q", a, b)
		}
		if d, err := Decode(ea); err != nil || d != a {
			t.Fatalf("round trip %q -> %q -> %q, %v", a, ea, d, err)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	s := "49584571934843771141903627621785355615208059945070100482"
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Encode(s)
	}
}
