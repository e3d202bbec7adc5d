package dedupe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestMarkers: a marker is found by the same Query as entries when it overlaps the range (ids
// kept inside the range, total size known), is completed by the entry of its nonce (with the
// entry's write time), replaced by a second Mark of the same nonce, and deleted by Unmark.
// Markers of interleaved lanes name only their own records.
func TestMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, m, _ := newStackLedger(t)
	dl := time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	st := time.UnixMilli(time.Now().UnixMilli())
	odd := []recordid.ID{rid(seqAt(1), 0), rid(seqAt(3), 0), rid(seqAt(5), 0), rid(seqAt(7), 0)}
	even := []recordid.ID{rid(seqAt(2), 0), rid(seqAt(4), 0), rid(seqAt(6), 0), rid(seqAt(8), 0)}
	a := Marker{Nonce: "aaaa", First: seqAt(1), Last: seqAt(7), IDs: odd, Started: st, Deadline: dl, Source: SourceConsumer}
	b := Marker{Nonce: "bbbb", First: seqAt(2), Last: seqAt(8), IDs: even, Started: st, Deadline: dl, Source: SourceConsumer}
	for _, mk := range []Marker{a, b} {
		if err := l.Mark(ctx, testShard, mk); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Truncate(time.Millisecond)
	if err := l.Record(ctx, testShard, Entry{First: seqAt(2), Last: seqAt(8), Done: even, Source: SourceConsumer, Nonce: "bbbb"}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	m.Reset()
	r, err := l.Lookup(ctx, testShard, seqAt(3), seqAt(6))
	if err != nil {
		t.Fatal(err)
	}
	if q := m.Snapshot(); q.Total.Calls != 1 {
		t.Errorf("Lookup made %d calls, want one Query for entries and markers", q.Total.Calls)
	}
	got := map[string]MarkerState{}
	for _, ms := range r.Markers() {
		got[ms.Nonce] = ms
	}
	ga, gb := got["aaaa"], got["bbbb"]
	if len(got) != 2 || ga.Completed || !gb.Completed || ga.Size != 4 || gb.Size != 4 ||
		len(ga.IDs) != 2 || ga.IDs[0] != odd[1] || ga.IDs[1] != odd[2] || !ga.Deadline.Equal(dl) || !ga.Started.Equal(st) ||
		ga.First != a.First || ga.Last != a.Last || gb.First != b.First || gb.Last != b.Last {
		t.Fatalf("markers = %+v", r.Markers())
	}
	// The completing entry's write time is the run's end, which the marker cannot tell.
	if !ga.CompletedAt.IsZero() || gb.CompletedAt.Before(before) || gb.CompletedAt.After(after) {
		t.Errorf("CompletedAt: uncompleted %v, completed %v, want zero and within [%v, %v]", ga.CompletedAt, gb.CompletedAt, before, after)
	}
	if r.Len() != 2 || r.Done(odd[1]) || !r.Done(even[1]) || r.Stats().Markers != 2 {
		t.Errorf("a marker must not read as done ids: len %d stats %+v", r.Len(), r.Stats())
	}

	// Narrowing rewrites the marker in place.
	a.IDs = odd[1:2]
	if err := l.Mark(ctx, testShard, a); err != nil {
		t.Fatal(err)
	}
	r, _ = l.Lookup(ctx, testShard, seqAt(1), seqAt(8))
	for _, ms := range r.Markers() {
		if ms.Nonce == "aaaa" && (ms.Size != 1 || len(ms.IDs) != 1) {
			t.Errorf("narrowed marker = %+v", ms)
		}
	}
	// A range after the marker's last record does not see it.
	if r, _ := l.Lookup(ctx, testShard, seqAt(8), seqAt(9)); len(r.Markers()) != 1 {
		t.Errorf("markers of 8..9 = %+v, want only b", r.Markers())
	}
	if err := l.Unmark(ctx, testShard, a.Last, a.Nonce); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Lookup(ctx, testShard, seqAt(1), seqAt(8)); len(r.Markers()) != 1 {
		t.Errorf("after Unmark: %+v", r.Markers())
	}

	for name, bad := range map[string]Marker{
		"nonce":  {Nonce: "a#b", First: seqAt(1), Last: seqAt(1), Source: SourceConsumer},
		"source": {Nonce: "x", First: seqAt(1), Last: seqAt(1), Source: "nope"},
		"range":  {Nonce: "x", First: seqAt(2), Last: seqAt(3), IDs: odd[:1], Source: SourceConsumer},
	} {
		if err := l.Mark(ctx, testShard, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
