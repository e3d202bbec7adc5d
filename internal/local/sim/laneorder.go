package sim

import (
	"sync"
	"time"

	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// The lane oracle: the mapping keeps a partition key's records in order within its lane
// (every record of a key goes to one lane, lanes.Of), and a failure-queue replay must not
// break that order: the failure handler applies a record only once its lane is done with every
// earlier record of its key (applied, parked, given up by the mapping, or dropped as trimmed).
// Applying a later record of a key while its lane still holds an earlier one ("applied ahead
// of its lane") is what a replay that ignores lanes does: a given-up batch's range also covers
// the other lanes' records, and those lanes may be behind.

// laneLog records, per shard and lane, when the mapping released which records: a lane
// checkpoint releases every record of the lane up to it; a give-up (retries exhausted, record
// age) releases the batch's records of that lane between its first and last sequence numbers.
type laneLog struct {
	mu  sync.Mutex
	rel map[string]map[int][]release // shard -> lane -> releases in time order
}

type release struct {
	at       time.Time
	from, to string // from "" : every record up to to
}

func newLaneLog() *laneLog { return &laneLog{rel: map[string]map[int][]release{}} }

// observe is the mapping's observer (esm.WithObserver).
func (l *laneLog) observe(e esm.Event) {
	var r release
	switch e.Type {
	case esm.EventCheckpoint:
		r = release{at: e.Time, to: e.Checkpoint}
	case esm.EventRetriesExhausted, esm.EventRecordsExpired, esm.EventRecordsTrimmed:
		r = release{at: e.Time, from: e.FirstSeq, to: e.LastSeq}
	default:
		return
	}
	if r.at.IsZero() {
		r.at = time.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rel[e.ShardID] == nil {
		l.rel[e.ShardID] = map[int][]release{}
	}
	l.rel[e.ShardID][e.Lane] = append(l.rel[e.ShardID][e.Lane], r)
}

// releasedAt returns when the mapping's lane released seq (false: never).
func (l *laneLog) releasedAt(shardID string, lane int, seq string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rel[shardID][lane] {
		if seqnum.Compare(seq, r.to) <= 0 && (r.from == "" || seqnum.Compare(r.from, seq) <= 0) {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// checkLanes states the lane oracle over one shard's records: no record is applied by the
// failure handler before its lane is done with every earlier record of its key.
func (w *world) checkLanes(shardID string, recs []krec, parkedAt map[string]time.Time, bad func(string, ...any)) {
	type pending struct {
		seq  string
		done time.Time // when the earlier record stopped being its lane's (zero: never)
	}
	latest := map[string]pending{} // key -> the earlier record of the key done last so far
	for _, r := range recs {
		id := recKey(shardID, r.seq)
		if p, ok := latest[r.key]; ok {
			for i, by := range w.seen[id] {
				if by != "failure" && by != "failure(effect,error)" {
					continue
				}
				at := w.seenAt[id][i]
				if p.done.IsZero() || p.done.After(at) {
					bad("applied ahead of its lane: key %s: %s applied by the failure handler at %s while its lane (%d of %d) still held the earlier %s (done %s)",
						r.key, id, at.Format("15:04:05.000"), w.laneOf(r.key), w.cfg.Parallelization, p.seq, fmtTime(p.done))
					break
				}
			}
		}
		done := w.doneAt(shardID, r, parkedAt)
		if p, ok := latest[r.key]; !ok || (!p.done.IsZero() && (done.IsZero() || done.After(p.done))) {
			latest[r.key] = pending{seq: r.seq, done: done}
		}
	}
}

// doneAt returns the earliest moment the record stopped being held by its lane: its first
// effect, its first park, or the lane's release of it (zero: none of them).
func (w *world) doneAt(shardID string, r krec, parkedAt map[string]time.Time) time.Time {
	var done time.Time
	earlier := func(t time.Time, ok bool) {
		if ok && (done.IsZero() || t.Before(done)) {
			done = t
		}
	}
	id := recKey(shardID, r.seq)
	t, ok := w.first[id]
	earlier(t, ok)
	t, ok = parkedAt[id]
	earlier(t, ok)
	earlier(w.lanes.releasedAt(shardID, w.laneOf(r.key), r.seq))
	return done
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

func (w *world) laneOf(key string) int { return esm.LaneOf(key, w.cfg.Parallelization) }
