package dedupe

import (
	"sort"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// MaxSpan is the widest range of sequence numbers one ledger entry item covers: an item's last
// sequence number minus its first is at most MaxSpan (2^96). Record cuts an entry whose range is
// wider into windows of at most MaxSpan each (docs/ledger.md, "Bounded lookups"), so Lookup can
// bound its Query: an item holding a record x of first..last ends at or after x >= first and
// at or before its own first + MaxSpan <= x + MaxSpan <= last + MaxSpan. Readers and writers
// must agree on it: it is a constant of the table layout, not a setting.
//
// 2^96 is 65,536 times the 2^80 that consecutive sequence numbers of a shard differ by in the
// field report (1, 2 or 3 x 2^80): a 10,000-record batch at that spacing spans at most
// 30,000 x 2^80 and is never cut, and a lookup reads past its range at most the entries of the
// next 2^96 of sequence space.
const MaxSpan = "79228162514264337593543950336"

var maxSpanDec, _ = parseDec(MaxSpan)

// spanAtMost reports whether last - first <= MaxSpan (both valid, first <= last).
func spanAtMost(first, last *dec) bool {
	d := last.sub(first)
	return d.cmp(&maxSpanDec) <= 0
}

// lookupUpperKey is the upper sort key of a Lookup ending at last: every sort key starting with
// Encode(y), y <= last + MaxSpan, is below it. ok is false when last + MaxSpan has more digits
// than a sequence number can (no upper bound is needed: no item ends there).
func lookupUpperKey(last string) (string, bool) {
	l, ok := parseDec(last)
	if !ok {
		return "", false
	}
	u, ok := l.add(&maxSpanDec)
	if !ok || !u.valid() {
		return "", false
	}
	enc, err := seqnum.Encode(string(u.appendDecimal(nil)))
	if err != nil {
		return "", false
	}
	return enc + "$", true // "$" sorts right after the "#" that ends every key's sequence part
}

// window is a sequence range of at most MaxSpan that one or more items of an entry cover.
type window struct{ first, last string }

// spanWindows cuts first..last into windows of at most MaxSpan: greedily over the sorted
// distinct sequence numbers of first, the ids and last, a window taking every point up to
// MaxSpan past its first. Windows holding no id are dropped, except the one ending on last: the
// item keyed on the entry's last sequence number is the one a Lookup that reads the
// invocation's in-flight marker (keyed the same) also reads, so the marker reads as completed.
// ids must be sorted and inside first..last.
func spanWindows(first, last string, ids []recordid.ID) []window {
	f, _ := parseDec(first)
	l, _ := parseDec(last)
	if spanAtMost(&f, &l) {
		return []window{{first, last}}
	}
	type point struct {
		seq  string
		d    dec
		isID bool
	}
	pts := []point{{seq: first, d: f}}
	for _, id := range ids {
		if p := &pts[len(pts)-1]; p.seq == id.Seq {
			p.isID = true
			continue
		}
		d, _ := parseDec(id.Seq)
		pts = append(pts, point{seq: id.Seq, d: d, isID: true})
	}
	if pts[len(pts)-1].seq != last {
		pts = append(pts, point{seq: last, d: l})
	}
	var out []window
	start, prev, hasID := 0, 0, false
	flush := func(end int) {
		if hasID || pts[end].seq == last {
			out = append(out, window{pts[start].seq, pts[end].seq})
		}
	}
	for i := range pts {
		if i > start && !spanAtMost(&pts[start].d, &pts[i].d) {
			flush(prev)
			start, hasID = i, false
		}
		hasID = hasID || pts[i].isID
		prev = i
	}
	flush(prev)
	return out
}

// withinSeq returns the sub-slice of sorted ids whose sequence number lies in lo..hi.
func withinSeq(ids []recordid.ID, lo, hi string) []recordid.ID {
	i := sort.Search(len(ids), func(k int) bool { return seqnum.Compare(ids[k].Seq, lo) >= 0 })
	j := sort.Search(len(ids), func(k int) bool { return seqnum.Compare(ids[k].Seq, hi) > 0 })
	return ids[i:max(i, j)]
}
