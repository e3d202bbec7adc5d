package demo

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// firstSeen remembers when each id first came out of a queue the demo drains.
type firstSeen struct {
	mu sync.Mutex
	at map[string]time.Time
}

// wrap returns decode, noting the time each id is first decoded (the drain loops receive
// continuously: the decode is within a receive of the message's arrival).
func (f *firstSeen) wrap(decode func(string) (string, []byte, error)) func(string) (string, []byte, error) {
	return func(body string) (string, []byte, error) {
		id, data, err := decode(body)
		if err == nil && id != "" {
			now := time.Now()
			f.mu.Lock()
			if f.at == nil {
				f.at = map[string]time.Time{}
			}
			if _, ok := f.at[id]; !ok {
				f.at[id] = now
			}
			f.mu.Unlock()
		}
		return id, data, err
	}
}

func (f *firstSeen) get(id string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.at[id]
	return t, ok
}

// SafetyStats is "produced → delivered or parked" per record: the time from the producer's
// accepted PutRecords to the record's first arrival at the target queue or, if it was never
// delivered, at the parked queue. Records neither delivered nor parked are not in the
// percentiles (they are Pending or Lost).
type SafetyStats struct {
	Records    int     `json:"records"` // records with a time
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
	// ByCause: per cause (see safetyCause), how many records and their slowest time.
	ByCause map[string]CauseTime `json:"by_cause,omitempty"`
	// Slowest are the ten slowest records with their cause.
	Slowest []SlowRecord `json:"slowest,omitempty"`
}

// CauseTime is one cause's share of SafetyStats.
type CauseTime struct {
	Records    int     `json:"records"`
	MaxSeconds float64 `json:"max_seconds"`
}

// SlowRecord is one of the slowest records.
type SlowRecord struct {
	ID      string  `json:"id"`
	ShardID string  `json:"shard_id"`
	Seconds float64 `json:"seconds"`
	Cause   string  `json:"cause"`
	Parked  bool    `json:"parked"`
}

// Causes of a record's time to safety.
const (
	causeCrash   = "killer (crash): isolated and parked"
	causeHang    = "killer (hang): isolated and parked"
	causePoison  = "poison: parked after its attempts"
	causeGivenUp = "given up by the mapping: replayed or parked by the reconciler"
	causeParked  = "parked after failed attempts"
	causeFirst   = "delivered by the mapping"
)

// safety computes the variant's SafetyStats.
func (v *variant) safety(parallelization int) SafetyStats {
	ch := v.e.cfg.chaosConfig("")
	poison := map[string]bool{}
	for _, p := range v.recs {
		if p.Poison {
			poison[p.ID] = true
		}
	}
	var all []SlowRecord
	st := SafetyStats{ByCause: map[string]CauseTime{}}
	for _, w := range v.writes.records() {
		at, ok := v.deliveredAt.get(w.id)
		parked := false
		if !ok {
			if at, ok = v.parkedAt.get(w.id); !ok {
				continue
			}
			parked = true
		}
		sec := max(at.Sub(w.at).Seconds(), 0)
		cause := causeFirst
		switch {
		case ch.Killer(w.id) == chaos.CrashKiller:
			cause = causeCrash
		case ch.Killer(w.id) == chaos.HangKiller:
			cause = causeHang
		case poison[w.id]:
			cause = causePoison
		case v.gaveUp.fate(w.shard, laneOf(w.key, parallelization), w.seq) != "":
			cause = causeGivenUp
		case parked:
			cause = causeParked
		}
		all = append(all, SlowRecord{ID: w.id, ShardID: w.shard, Seconds: sec, Cause: cause, Parked: parked})
		c := st.ByCause[cause]
		c.Records++
		c.MaxSeconds = max(c.MaxSeconds, sec)
		st.ByCause[cause] = c
	}
	if len(all) == 0 {
		return SafetyStats{}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Seconds < all[j].Seconds })
	st.Records = len(all)
	st.P50Seconds, st.P99Seconds, st.MaxSeconds = percentile(all, 0.50), percentile(all, 0.99), all[len(all)-1].Seconds
	for i := len(all) - 1; i >= 0 && len(st.Slowest) < 10; i-- {
		st.Slowest = append(st.Slowest, all[i])
	}
	return st
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []SlowRecord, p float64) float64 {
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Seconds
}

// Where a pending record is (PendingWhere keys).
const (
	pendingHeld       = "held: the mapping is still retrying its batch"
	pendingReconciler = "with the reconciler: given up by the mapping, not replayed yet"
	pendingTail       = "past the checkpoint: the mapping moved on, the checkpoint mirror did not"
	pendingUnverified = "behind the checkpoint, not yet verified by the reconciler"
)

// pendingPlaces tells where each unaccounted gapless record is at the end of a run: still with
// the mapping (its lane's checkpoint has not passed it), given up to the reconciler, past the
// consumer's checkpoint mirror, or behind it and not yet verified.
type pendingPlaces struct {
	lanes           map[string][]string // the mapping's lane checkpoints
	mirror          map[string]string   // the consumer's checkpoint mirror per shard
	parallelization int
	gaveUp          *givenUp
}

func (v *variant) pendingPlaces(ctx context.Context) pendingPlaces {
	pp := pendingPlaces{mirror: map[string]string{}, parallelization: v.e.cfg.Parallelization, gaveUp: &v.gaveUp}
	v.mu.Lock()
	if len(v.mappings) > 0 {
		pp.lanes = v.mappings[0].Checkpoints()
	}
	v.mu.Unlock()
	if states, err := checkpoint.New(v.e.direct.ddb, v.checkpointTable).List(ctx, group, v.stream); err == nil {
		for _, st := range states {
			pp.mirror[st.Shard.ShardID] = st.Checkpoint
		}
	}
	return pp
}

// where is the place of w (one of the pending* keys).
func (pp pendingPlaces) where(w written) string {
	if pp.gaveUp != nil && pp.gaveUp.fate(w.shard, laneOf(w.key, pp.parallelization), w.seq) != "" {
		return pendingReconciler
	}
	if lanes, ok := pp.lanes[w.shard]; ok {
		l := laneOf(w.key, pp.parallelization)
		if l < len(lanes) && (lanes[l] == "" || seqnum.Compare(w.seq, lanes[l]) > 0) {
			return pendingHeld
		}
	}
	if m := pp.mirror[w.shard]; m == "" || seqnum.Compare(w.seq, m) > 0 {
		return pendingTail
	}
	return pendingUnverified
}
