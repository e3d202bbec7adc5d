package dedupe

import "math/bits"

// Fixed-width arithmetic for the set codec, used instead of math/big so that encoding and
// decoding allocate nothing per id. A sequence number has up to 129 decimal digits.
//
//   - dec holds a sequence number in base 10^19 (19 decimal digits per 64-bit limb), so
//     parsing and printing decimal text needs no division by 10^19 and two sequence numbers
//     subtract and add limb by limb.
//   - num holds a difference in binary, whose big-endian bytes the encoding stores. Deltas
//     between neighbouring records are small (one or two words), so the conversions between
//     the two bases are cheap; only the first id of a set pays for a full conversion.

const (
	limbDigits = 19
	limbBase   = 10_000_000_000_000_000_000 // 10^19
	decLimbs   = 7                          // 133 digits >= 129
	maxDigits  = 129
	// topLimbBound: a 129-digit number has 129 - 6*19 = 15 digits in its top limb.
	topLimbBound = 1_000_000_000_000_000 // 10^15

	numWords = 7 // 448 bits > log2(10^129) ≈ 428.5
	numBytes = numWords * 8
)

// dec is a non-negative integer below 10^133 in little-endian base-10^19 limbs.
type dec [decLimbs]uint64

// num is a non-negative integer below 2^448 in little-endian 64-bit words.
type num [numWords]uint64

// maxSeqNum is 10^129 - 1, the largest valid sequence number, in binary.
var maxSeqNum = func() num {
	var d dec
	for i := range decLimbs - 1 {
		d[i] = limbBase - 1
	}
	d[decLimbs-1] = topLimbBound - 1
	return d.toNum()
}()

// parseDec converts a string of 1..129 decimal digits to a dec; ok is false for anything else.
func parseDec(s string) (d dec, ok bool) {
	if len(s) == 0 || len(s) > maxDigits {
		return d, false
	}
	for i, end := 0, len(s); end > 0; i, end = i+1, end-limbDigits {
		start := max(0, end-limbDigits)
		var v uint64
		for _, c := range []byte(s[start:end]) {
			c -= '0'
			if c > 9 {
				return dec{}, false
			}
			v = v*10 + uint64(c)
		}
		d[i] = v
	}
	return d, true
}

// valid reports whether d is below 10^129.
func (d *dec) valid() bool { return d[decLimbs-1] < topLimbBound }

func (d *dec) top() int {
	for i := decLimbs - 1; i >= 0; i-- {
		if d[i] != 0 {
			return i
		}
	}
	return -1
}

// cmp returns -1, 0 or +1.
func (d *dec) cmp(e *dec) int {
	for i := decLimbs - 1; i >= 0; i-- {
		switch {
		case d[i] < e[i]:
			return -1
		case d[i] > e[i]:
			return 1
		}
	}
	return 0
}

// sub returns d - e for d >= e.
func (d *dec) sub(e *dec) dec {
	var r dec
	var borrow uint64
	for i := range d {
		v := d[i] - e[i] - borrow
		if d[i] < e[i]+borrow {
			v += limbBase
			borrow = 1
		} else {
			borrow = 0
		}
		r[i] = v
	}
	return r
}

// add returns d + e; ok is false when the sum does not fit in 7 limbs.
func (d *dec) add(e *dec) (dec, bool) {
	var r dec
	var carry uint64
	for i := range d {
		// Two limbs can sum past 2^64 (2·10^19 > 1.8·10^19): keep the bit that overflows.
		v, over := bits.Add64(d[i], e[i], carry)
		carry = 0
		if over != 0 || v >= limbBase {
			v -= limbBase // modulo 2^64, also right when the sum overflowed
			carry = 1
		}
		r[i] = v
	}
	return r, carry == 0
}

// toNum converts to binary (Horner's rule over the limbs in use).
func (d *dec) toNum() num {
	var n num
	used := 0 // words of n in use
	for i := d.top(); i >= 0; i-- {
		carry := d[i]
		for w := 0; w < used; w++ {
			hi, lo := bits.Mul64(n[w], limbBase)
			lo, c := bits.Add64(lo, carry, 0)
			n[w] = lo
			carry = hi + c
		}
		if carry != 0 && used < numWords {
			n[used] = carry
			used++
		}
	}
	return n
}

// toDec converts n, which must be at most maxSeqNum, to base 10^19.
func (n num) toDec() dec {
	var d dec
	top := n.top()
	for i := 0; top >= 0 && i < decLimbs; i++ {
		var r uint64
		for w := top; w >= 0; w-- {
			n[w], r = bits.Div64(r, n[w], limbBase)
		}
		d[i] = r
		for top >= 0 && n[top] == 0 {
			top--
		}
	}
	return d
}

// digitPairs is "00".."99", for printing two digits per division.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendDecimal appends the canonical decimal text of d to dst.
func (d *dec) appendDecimal(dst []byte) []byte {
	top := d.top()
	if top < 0 {
		return append(dst, '0')
	}
	var tmp [limbDigits]byte
	for i := top; i >= 0; i-- {
		v := d[i]
		j := limbDigits
		for v >= 100 {
			q := v / 100
			p := (v - q*100) * 2
			j -= 2
			tmp[j], tmp[j+1] = digitPairs[p], digitPairs[p+1]
			v = q
		}
		if v >= 10 {
			j -= 2
			tmp[j], tmp[j+1] = digitPairs[v*2], digitPairs[v*2+1]
		} else {
			j--
			tmp[j] = byte('0' + v)
		}
		if i != top { // lower limbs are zero-padded to 19 digits
			for j > 0 {
				j--
				tmp[j] = '0'
			}
		}
		dst = append(dst, tmp[j:]...)
	}
	return dst
}

func (n *num) top() int {
	for i := numWords - 1; i >= 0; i-- {
		if n[i] != 0 {
			return i
		}
	}
	return -1
}

// cmp returns -1, 0 or +1.
func (n *num) cmp(m *num) int {
	for i := numWords - 1; i >= 0; i-- {
		switch {
		case n[i] < m[i]:
			return -1
		case n[i] > m[i]:
			return 1
		}
	}
	return 0
}

// byteAt is byte k of n, counting from the least significant.
func (n *num) byteAt(k int) byte { return byte(n[k/8] >> (8 * uint(k%8))) }

// setByteAt ors b into byte k of n.
func (n *num) setByteAt(k int, b byte) { n[k/8] |= uint64(b) << (8 * uint(k%8)) }

// span returns the magnitude of n as significant bytes: l bytes starting z bytes above the
// least significant byte, with every byte below z zero. A zero n has l == 0, z == 0.
func (n *num) span() (l, z int) {
	top := n.top()
	if top < 0 {
		return 0, 0
	}
	byteLen := top*8 + (bits.Len64(n[top])+7)/8
	for i := range n {
		if n[i] != 0 {
			z = i*8 + bits.TrailingZeros64(n[i])/8
			break
		}
	}
	return byteLen - z, z
}
