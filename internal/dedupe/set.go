package dedupe

import (
	"fmt"
	"math"
	"slices"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Set encoding, version 1. All ids of a set belong to one shard, so only (sequence, sub-index)
// pairs are stored, sorted ascending and without duplicates:
//
//	set     = version count [id id*]
//	version = 0x01
//	count   = uvarint                number of ids
//	id      = tag magnitude subfield
//	tag     = uvarint                L<<6 | Z
//	magnitude = L bytes              big-endian significant bytes of a value V = magnitude·256^Z
//
// For the first id V is its sequence number and subfield its sub-index. For every later id V
// is the difference to the previous sequence number: V = 0 (tag 0, no magnitude) means the
// same sequence, and subfield is then sub - previousSub - 1 (sub-indexes strictly increase);
// otherwise subfield is the sub-index itself. Z strips whole zero bytes at the bottom of V:
// Kinesis sequence numbers of one shard differ by multiples of 2^80 or so (the field report's
// consecutive records differ by exactly 2^80), so a typical id costs 3 bytes (tag 0x4A, one
// magnitude byte, sub 0) instead of 13. Every uvarint is minimal; a magnitude's first and last
// bytes are non-zero; so each set has exactly one encoding and decode(encode(x)) = x, and
// encode(decode(b)) = b for every b that decodes.
const setVersion = 0x01

// maxVarintLen is the longest uvarint a set contains (a 64-bit value).
const maxVarintLen = 10

// AppendSet appends the encoding of the set of ids to dst. ids may be in any order and contain
// duplicates; ShardID is not stored (a set belongs to one shard, named by its ledger entry).
// A sequence number that fails seqnum.Validate is reported with an error wrapping ErrInvalid
// and seqnum.ErrInvalid.
func AppendSet(dst []byte, ids []recordid.ID) ([]byte, error) {
	sorted, err := sortedUnique(ids)
	if err != nil {
		return dst, err
	}
	return appendSorted(dst, sorted), nil
}

// sortedUnique validates the sequence numbers and returns the ids sorted by (Seq, Sub) without
// duplicates. It returns ids itself when they are already so (no copy), a sorted copy
// otherwise; ids is never modified.
func sortedUnique(ids []recordid.ID) ([]recordid.ID, error) {
	ordered := true
	for i := range ids {
		if err := seqnum.Validate(ids[i].Seq); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrInvalid, i, err)
		}
		if i > 0 && ordered && recordid.Compare(ids[i-1], ids[i]) >= 0 {
			ordered = false
		}
	}
	if ordered {
		return ids, nil
	}
	out := slices.Clone(ids)
	slices.SortFunc(out, recordid.Compare)
	return slices.CompactFunc(out, func(a, b recordid.ID) bool { return recordid.Compare(a, b) == 0 }), nil
}

// appendSorted encodes ids that are valid, sorted and unique.
func appendSorted(dst []byte, ids []recordid.ID) []byte {
	dst = append(dst, setVersion)
	dst = appendUvarint(dst, uint64(len(ids)))
	var prev dec
	prevSeq := ""
	var prevSub uint32
	for i := range ids {
		id := &ids[i]
		if i > 0 && id.Seq == prevSeq {
			dst = append(dst, 0)
			dst = appendUvarint(dst, uint64(id.Sub-prevSub-1))
			prevSub = id.Sub
			continue
		}
		cur, _ := parseDec(id.Seq) // validated by the caller
		d := cur
		if i > 0 {
			d = cur.sub(&prev)
		}
		v := d.toNum()
		dst = appendMagnitude(dst, &v)
		dst = appendUvarint(dst, uint64(id.Sub))
		prev, prevSeq, prevSub = cur, id.Seq, id.Sub
	}
	return dst
}

func appendMagnitude(dst []byte, v *num) []byte {
	l, z := v.span()
	dst = appendUvarint(dst, uint64(l)<<6|uint64(z))
	for k := z + l - 1; k >= z; k-- {
		dst = append(dst, v.byteAt(k))
	}
	return dst
}

// EncodedSize is the length of the encoding of ids, which must be valid, sorted and unique.
func encodedSize(ids []recordid.ID) int {
	n := 1 + uvarintLen(uint64(len(ids)))
	var prev dec
	prevSeq := ""
	var prevSub uint32
	for i := range ids {
		id := &ids[i]
		if i > 0 && id.Seq == prevSeq {
			n += 1 + uvarintLen(uint64(id.Sub-prevSub-1))
			prevSub = id.Sub
			continue
		}
		cur, _ := parseDec(id.Seq)
		d := cur
		if i > 0 {
			d = cur.sub(&prev)
		}
		v := d.toNum()
		l, z := v.span()
		n += uvarintLen(uint64(l)<<6|uint64(z)) + l + uvarintLen(uint64(id.Sub))
		prev, prevSeq, prevSub = cur, id.Seq, id.Sub
	}
	return n
}

// DecodeSet decodes a set encoded by AppendSet, giving every id the shard id shardID. Any
// malformed input yields an error wrapping ErrCorrupt; DecodeSet never panics.
func DecodeSet(b []byte, shardID string) ([]recordid.ID, error) {
	buf, raw, err := decodeRaw(b, nil, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	digits := string(buf) // one allocation for every sequence number of the set
	ids := make([]recordid.ID, len(raw))
	for i, r := range raw {
		ids[i] = recordid.ID{ShardID: shardID, Seq: digits[r.off:r.end], Sub: r.sub}
	}
	return ids, nil
}

// rawID is a decoded id whose sequence number is buf[off:end] of the decoding buffer.
type rawID struct {
	off, end uint32
	sub      uint32
}

// decodeRaw decodes the set b, appending the decimal digits of each distinct sequence number
// to buf and one rawID per id to out. When lo (hi) is not nil, only ids with sequence number
// >= *lo (<= *hi) are kept; the whole input is validated either way.
func decodeRaw(b []byte, lo, hi *dec, buf []byte, out []rawID) ([]byte, []rawID, error) {
	r := setReader{b: b}
	count, err := r.header()
	if err != nil {
		return buf, out, err
	}
	if lo == nil && hi == nil {
		out = slices.Grow(out, int(count))
	}
	lastOff, lastEnd := uint32(0), uint32(0)
	haveDigits, grown := false, false
	for i := range count {
		changed, err := r.next()
		if err != nil {
			return buf, out, err
		}
		if changed {
			haveDigits = false
		}
		if (lo != nil && r.cur.cmp(lo) < 0) || (hi != nil && r.cur.cmp(hi) > 0) {
			continue
		}
		if !haveDigits {
			lastOff = uint32(len(buf))
			if !grown {
				// Size the buffer once for the rest of the set from the first kept sequence
				// number's length (those of a shard are nearly always equally long). count is
				// bounded by the input length, so hostile input cannot make this huge.
				var tmp [maxDigits]byte
				est := len(r.cur.appendDecimal(tmp[:0]))
				buf = slices.Grow(buf, int(count-i)*est)
				grown = true
			}
			buf = r.cur.appendDecimal(buf)
			lastEnd = uint32(len(buf))
			haveDigits = true
		}
		out = append(out, rawID{off: lastOff, end: lastEnd, sub: r.sub})
	}
	if r.pos != len(r.b) {
		return buf, out, fmt.Errorf("%w: %d trailing bytes after %d ids", ErrCorrupt, len(r.b)-r.pos, count)
	}
	return buf, out, nil
}

// setReader walks an encoded set.
type setReader struct {
	b       []byte
	pos     int
	started bool
	cur     dec
	sub     uint32
}

func (r *setReader) header() (uint64, error) {
	if len(r.b) == 0 {
		return 0, fmt.Errorf("%w: empty set encoding", ErrCorrupt)
	}
	if r.b[0] != setVersion {
		return 0, fmt.Errorf("%w: set encoding version %d, want %d", ErrCorrupt, r.b[0], setVersion)
	}
	r.pos = 1
	count, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	// Every id takes at least two bytes (tag and sub-index): reject counts the input cannot
	// hold before anything is allocated for them.
	if count > uint64(len(r.b)-r.pos)/2 {
		return 0, fmt.Errorf("%w: %d ids cannot fit in %d bytes", ErrCorrupt, count, len(r.b)-r.pos)
	}
	return count, nil
}

// next decodes one id into r.cur and r.sub; changed reports a new sequence number.
func (r *setReader) next() (changed bool, err error) {
	tag, err := r.uvarint()
	if err != nil {
		return false, err
	}
	if tag>>6+tag&63 > numBytes {
		return false, fmt.Errorf("%w: value of %d bytes is longer than any sequence number", ErrCorrupt, tag>>6+tag&63)
	}
	l, z := int(tag>>6), int(tag&63)
	if l == 0 && z != 0 {
		return false, fmt.Errorf("%w: zero value with %d zero bytes", ErrCorrupt, z)
	}
	if l > len(r.b)-r.pos {
		return false, fmt.Errorf("%w: value of %d bytes truncated", ErrCorrupt, l)
	}
	mag := r.b[r.pos : r.pos+l]
	r.pos += l
	if l > 0 && (mag[0] == 0 || mag[l-1] == 0) {
		return false, fmt.Errorf("%w: non-canonical value bytes", ErrCorrupt)
	}
	var v num
	for i, c := range mag {
		v.setByteAt(z+l-1-i, c)
	}
	if v.cmp(&maxSeqNum) > 0 {
		return false, fmt.Errorf("%w: sequence number longer than %d digits", ErrCorrupt, maxDigits)
	}
	field, err := r.uvarint()
	if err != nil {
		return false, err
	}
	switch {
	case !r.started:
		r.cur, changed = v.toDec(), true
		if field > math.MaxUint32 {
			return false, fmt.Errorf("%w: sub-index %d out of range", ErrCorrupt, field)
		}
		r.sub = uint32(field)
		r.started = true
	case l == 0: // same sequence number, later sub-index
		if field >= math.MaxUint32-uint64(r.sub) {
			return false, fmt.Errorf("%w: sub-index after %d by %d out of range", ErrCorrupt, r.sub, field+1)
		}
		r.sub += uint32(field) + 1
	default:
		d := v.toDec()
		sum, ok := r.cur.add(&d)
		if !ok || !sum.valid() {
			return false, fmt.Errorf("%w: sequence number longer than %d digits", ErrCorrupt, maxDigits)
		}
		r.cur, changed = sum, true
		if field > math.MaxUint32 {
			return false, fmt.Errorf("%w: sub-index %d out of range", ErrCorrupt, field)
		}
		r.sub = uint32(field)
	}
	return changed, nil
}

// uvarint reads a minimal unsigned LEB128 value of at most 64 bits.
func (r *setReader) uvarint() (uint64, error) {
	var x uint64
	var s uint
	for i := 0; i < maxVarintLen; i++ {
		if r.pos >= len(r.b) {
			return 0, fmt.Errorf("%w: truncated varint at byte %d", ErrCorrupt, r.pos)
		}
		c := r.b[r.pos]
		r.pos++
		if c < 0x80 {
			if i > 0 && c == 0 {
				return 0, fmt.Errorf("%w: non-minimal varint at byte %d", ErrCorrupt, r.pos-1)
			}
			if i == maxVarintLen-1 && c > 1 {
				return 0, fmt.Errorf("%w: varint overflows 64 bits at byte %d", ErrCorrupt, r.pos-1)
			}
			return x | uint64(c)<<s, nil
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, fmt.Errorf("%w: varint overflows 64 bits at byte %d", ErrCorrupt, r.pos)
}

func appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
