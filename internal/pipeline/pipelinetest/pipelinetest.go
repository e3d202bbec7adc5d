// Package pipelinetest holds in-memory stores for the pipeline: a ledger, a checkpoint mirror
// and a parker with the same observable semantics as internal/dedupe, internal/checkpoint and
// internal/park. TEST-ONLY: nothing here is durable or shared between processes. Unit tests,
// fuzz targets and benchmarks use them; integration tests use the real stores.
package pipelinetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Ledger is an in-memory pipeline.Ledger and pipeline.Claimer. The zero value is ready.
type Ledger struct {
	mu      sync.Mutex
	entries map[string][]pipeline.Entry  // by shard state key
	claims  map[string]recordid.ID       // group|key -> owner
	markers map[string][]pipeline.Marker // by shard state key, in write order
	Lookups int                          // calls, for tests of "one lookup per batch"
	Records int
	ClaimsN int
	Marks   int // Mark calls
	Unmarks int // Unmark calls
	// Fail, when set, is called before each operation ("lookup", "record", "claim", "mark",
	// "unmark") and its error returned instead of doing it.
	Fail func(op string) error
	// Now, when set, is the clock an entry completing a marker is stamped with
	// (MarkerState.CompletedAt; default time.Now), as dedupe's WithClock.
	Now       func() time.Time
	completed map[string]time.Time // nonce of an entry -> when it was recorded
}

var (
	_ pipeline.Ledger  = (*Ledger)(nil)
	_ pipeline.Claimer = (*Ledger)(nil)
	_ pipeline.View    = (*View)(nil)
)

// View is the state of a range: done ids and attempt counts.
type View struct {
	done     map[recordid.ID]bool
	parked   map[recordid.ID]bool
	parks    map[recordid.ID][]park.Receipt
	byRef    map[recordid.ID]bool
	redriven map[recordid.ID]bool
	attempts map[recordid.ID]int
	markers  []pipeline.MarkerState
}

// Markers implements pipeline.View.
func (v *View) Markers() []pipeline.MarkerState { return v.markers }

// Mark implements pipeline.Ledger: a marker of the same nonce is replaced.
func (l *Ledger) Mark(_ context.Context, shard recordid.Shard, m pipeline.Marker) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Marks++
	if err := l.fail("mark"); err != nil {
		return err
	}
	if err := m.Validate(shard); err != nil {
		return err // what the DynamoDB ledger refuses
	}
	if l.markers == nil {
		l.markers = map[string][]pipeline.Marker{}
	}
	m.IDs = append([]recordid.ID(nil), m.IDs...)
	ms := l.markers[shard.String()]
	for i := range ms {
		if ms[i].Nonce == m.Nonce {
			ms[i] = m
			return nil
		}
	}
	l.markers[shard.String()] = append(ms, m)
	return nil
}

// Unmark implements pipeline.Ledger.
func (l *Ledger) Unmark(_ context.Context, shard recordid.Shard, m pipeline.Marker) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Unmarks++
	if err := l.fail("unmark"); err != nil {
		return err
	}
	ms := l.markers[shard.String()]
	for i := range ms {
		if ms[i].Nonce == m.Nonce {
			l.markers[shard.String()] = append(ms[:i:i], ms[i+1:]...)
			return nil
		}
	}
	return nil
}

// Markers returns a copy of the markers stored for shard.
func (l *Ledger) Markers(shard recordid.Shard) []pipeline.Marker {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pipeline.Marker(nil), l.markers[shard.String()]...)
}

// Done implements pipeline.View.
func (v *View) Done(id recordid.ID) bool { return v.done[id] }

// RedriveProcessed reports whether an entry of source redrive lists id done and not parked.
func (v *View) RedriveProcessed(id recordid.ID) bool { return v.redriven[id] }

// ParkedByRef reports whether id was parked by reference.
func (v *View) ParkedByRef(id recordid.ID) bool { return v.byRef[id] }

// ParkReceipts implements pipeline.ParkView.
func (v *View) ParkReceipts(id recordid.ID) []park.Receipt { return v.parks[id] }

// Parked reports whether id was parked.
func (v *View) Parked(id recordid.ID) bool { return v.parked[id] }

// Attempts implements pipeline.View.
func (v *View) Attempts(id recordid.ID) int { return v.attempts[id] }

func (l *Ledger) fail(op string) error {
	if l.Fail != nil {
		return l.Fail(op)
	}
	return nil
}

// Lookup implements pipeline.Ledger: every entry whose last sequence is >= first contributes
// its ids within [first, last].
func (l *Ledger) Lookup(_ context.Context, shard recordid.Shard, first, last string) (pipeline.View, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Lookups++
	if err := l.fail("lookup"); err != nil {
		return nil, err
	}
	v := &View{done: map[recordid.ID]bool{}, parked: map[recordid.ID]bool{}, parks: map[recordid.ID][]park.Receipt{}, byRef: map[recordid.ID]bool{}, redriven: map[recordid.ID]bool{}, attempts: map[recordid.ID]int{}}
	in := func(id recordid.ID) bool {
		return seqnum.Compare(id.Seq, first) >= 0 && seqnum.Compare(id.Seq, last) <= 0
	}
	for _, e := range l.entries[shard.String()] {
		if seqnum.Compare(e.Last, first) < 0 {
			continue
		}
		for _, id := range e.Done {
			if in(id) {
				v.done[id] = true
			}
		}
		for _, id := range e.Parked {
			if in(id) {
				v.parked[id] = true
			}
		}
		for _, id := range e.Failed {
			if in(id) {
				v.attempts[id]++
			}
		}
		if e.Source == pipeline.SourceRedrive {
			for _, id := range e.Done {
				if in(id) && !slices.Contains(e.Parked, id) {
					v.redriven[id] = true
				}
			}
		}
		for _, id := range e.ParkedByRef {
			if in(id) {
				v.byRef[id] = true
			}
		}
		for _, p := range e.Parks {
			if in(p.ID) {
				v.parks[p.ID] = append(v.parks[p.ID], p.Receipt)
			}
		}
	}
	for _, m := range l.markers[shard.String()] {
		if seqnum.Compare(m.Last, first) < 0 || seqnum.Compare(m.First, last) > 0 {
			continue
		}
		ms := pipeline.MarkerState{Marker: m, Size: len(m.IDs)}
		ms.IDs = nil
		for _, id := range m.IDs {
			if in(id) {
				ms.IDs = append(ms.IDs, id)
			}
		}
		for _, e := range l.entries[shard.String()] {
			if e.Nonce == m.Nonce {
				ms.Completed, ms.CompletedAt = true, l.completed[e.Nonce]
			}
		}
		v.markers = append(v.markers, ms)
	}
	return v, nil
}

// Record implements pipeline.Ledger.
func (l *Ledger) Record(_ context.Context, shard recordid.Shard, e pipeline.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Records++
	if err := l.fail("record"); err != nil {
		return err
	}
	if err := e.Validate(shard); err != nil {
		return err // what the DynamoDB ledger refuses
	}
	if l.entries == nil {
		l.entries = map[string][]pipeline.Entry{}
	}
	l.entries[shard.String()] = append(l.entries[shard.String()], e)
	if e.Nonce != "" {
		now := time.Now
		if l.Now != nil {
			now = l.Now
		}
		if l.completed == nil {
			l.completed = map[string]time.Time{}
		}
		l.completed[e.Nonce] = now()
	}
	return nil
}

// Claim implements pipeline.Claimer.
func (l *Ledger) Claim(_ context.Context, group, key string, id recordid.ID) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ClaimsN++
	if err := l.fail("claim"); err != nil {
		return false, err
	}
	if l.claims == nil {
		l.claims = map[string]recordid.ID{}
	}
	k := group + recordid.Separator + key
	if owner, ok := l.claims[k]; ok {
		return owner != id, nil
	}
	l.claims[k] = id
	return false, nil
}

// Entries returns a copy of the entries recorded for shard.
func (l *Ledger) Entries(shard recordid.Shard) []pipeline.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pipeline.Entry(nil), l.entries[shard.String()]...)
}

// Parker is an in-memory pipeline.Parker; it keeps every payload, as park.Parker does.
type Parker struct {
	mu     sync.Mutex
	Parked []park.Record
	// Fail, when set, is called before each Park; its error is returned instead.
	Fail func(r park.Record) error
}

var _ pipeline.Parker = (*Parker)(nil)

// Park implements pipeline.Parker.
func (p *Parker) Park(_ context.Context, r park.Record) (park.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Fail != nil {
		if err := p.Fail(r); err != nil {
			return park.Result{}, err
		}
	}
	p.Parked = append(p.Parked, r)
	sum := sha256.Sum256(r.Data)
	return park.Result{MessageID: fmt.Sprintf("m-%d", len(p.Parked)), Receipt: park.Receipt{ParkID: fmt.Sprintf("%016x", len(p.Parked)),
		Bytes: len(r.Data), SHA256: hex.EncodeToString(sum[:]), KeySHA256: park.KeyDigest(r.PartitionKey)}}, nil
}

// Records returns a copy of what was parked.
func (p *Parker) Records() []park.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]park.Record(nil), p.Parked...)
}

var _ pipeline.ParkView = (*View)(nil)
