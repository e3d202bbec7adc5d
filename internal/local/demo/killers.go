package demo

import (
	"sort"
	"sync"

	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// KillerStats are the workload's killer records (internal/local/chaos crash and hang: every attempt
// at one exits the runtime or hangs past the timeout) and what became of them in a variant.
// Each killer has one fate, the first that holds of: delivered (never, a killer cannot
// succeed), parked with its payload, given up by the mapping after MaximumRetryAttempts or
// for MaximumRecordAgeInSeconds (an on-failure message with metadata only: for the mapping
// alone the record is gone), or held: none of these when the run ended, the mapping still
// retrying it and its lane blocked behind it.
type KillerStats struct {
	Crash     int `json:"crash"` // crash killers produced
	Hang      int `json:"hang"`  // hang killers produced
	Delivered int `json:"delivered"`
	Parked    int `json:"parked"`
	// ParkedByConsumer and ParkedByReconciler split Parked by who parked the killer: the
	// consumer isolating it under the mapping's retries, or the reconciler after the mapping
	// gave it up.
	ParkedByConsumer   int            `json:"parked_by_consumer"`
	ParkedByReconciler int            `json:"parked_by_reconciler"`
	GivenUpRetry       int            `json:"given_up_retries_exhausted"`
	GivenUpAge         int            `json:"given_up_record_age"`
	Held               int            `json:"held"`
	Records            []KillerRecord `json:"records,omitempty"` // the first 50 by id
}

// Produced is how many killers the workload holds.
func (k KillerStats) Produced() int { return k.Crash + k.Hang }

// KillerRecord is one killer and its fate.
type KillerRecord struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"` // crash or hang
	ShardID string `json:"shard_id"`
	Seq     string `json:"sequence_number"`
	Fate    string `json:"fate"` // delivered, parked, given up: retries exhausted, given up: record age, held
}

// Killer fates.
const (
	fateDelivered    = "delivered"
	fateParked       = "parked"
	fateGivenUpRetry = "given up: retries exhausted"
	fateGivenUpAge   = "given up: record age"
	fateHeld         = "held (lane blocked at the end)"
)

// givenUp remembers the ranges the variant's mappings gave up on, per shard and lane (the
// lanes' ranges interleave in sequence space: a range only covers its own lane's records).
type givenUp struct {
	mu     sync.Mutex
	ranges []givenUpRange
}

type givenUpRange struct {
	shard       string
	lane        int
	first, last string
	age         bool // RecordAgeExceeded, else RetryAttemptsExhausted
}

// note records a given-up event of the mapping.
func (g *givenUp) note(e esm.Event) {
	if e.Type != esm.EventRetriesExhausted && e.Type != esm.EventRecordsExpired {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ranges = append(g.ranges, givenUpRange{shard: e.ShardID, lane: e.Lane, first: e.FirstSeq, last: e.LastSeq,
		age: e.Type == esm.EventRecordsExpired})
}

// fate is how the mapping gave up on the record at (shard, lane, seq): "" when it did not.
func (g *givenUp) fate(shard string, lane int, seq string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	retry := false
	for _, r := range g.ranges {
		if r.shard != shard || r.lane != lane || seqnum.Compare(seq, r.first) < 0 || seqnum.Compare(seq, r.last) > 0 {
			continue
		}
		if r.age {
			return fateGivenUpAge
		}
		retry = true
	}
	if retry {
		return fateGivenUpRetry
	}
	return ""
}

// killers computes the variant's KillerStats from the produced records, what arrived
// downstream and the mappings' given-up ranges.
func (v *variant) killers(parallelization int) KillerStats {
	cfg := v.e.cfg.chaosConfig("")
	var ks KillerStats
	for _, w := range v.writes.records() {
		kind := cfg.Killer(w.id)
		if kind == chaos.NotKiller {
			continue
		}
		if kind == chaos.CrashKiller {
			ks.Crash++
		} else {
			ks.Hang++
		}
		rec := KillerRecord{ID: w.id, Kind: kind.String(), ShardID: w.shard, Seq: w.seq}
		switch {
		case v.target.Has(w.id):
			rec.Fate = fateDelivered
			ks.Delivered++
		case v.parked.Has(w.id):
			rec.Fate = fateParked
			ks.Parked++
			if v.parkedByReconciler.has(w.id) {
				ks.ParkedByReconciler++
			} else {
				ks.ParkedByConsumer++
			}
		default:
			switch rec.Fate = v.gaveUp.fate(w.shard, laneOf(w.key, parallelization), w.seq); rec.Fate {
			case fateGivenUpRetry:
				ks.GivenUpRetry++
			case fateGivenUpAge:
				ks.GivenUpAge++
			default:
				rec.Fate = fateHeld
				ks.Held++
			}
		}
		ks.Records = append(ks.Records, rec)
	}
	sort.Slice(ks.Records, func(i, j int) bool { return ks.Records[i].ID < ks.Records[j].ID })
	if len(ks.Records) > 50 {
		ks.Records = ks.Records[:50]
	}
	return ks
}
