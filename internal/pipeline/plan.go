package pipeline

// What the ledger's markers decide before anything runs: which records run, which are
// skipped, held, isolated, or parked as proven killers without running.

import (
	"slices"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Why a record is not started (plan.kind).
type planKind uint8

const (
	planRun      planKind = iota // run through Process (in the window)
	planSkip                     // done per the ledger
	planHeld                     // another invocation's live marker holds it (or an earlier record of its key)
	planIsolated                 // beyond the isolation window
	planDead                     // proven killer: park without running
	planHoldKey                  // its partition key is held: park behind the head without running (hold.go)
)

// plan is what the ledger's markers decide before anything runs.
type plan struct {
	kinds []planKind
	// Per record, allocated only when a dead marker names a record of the batch (nil on the
	// happy path, where they would be 24 bytes a record of live heap for the whole run; read
	// them through deathsOf, soloOf, minDeadOf):
	deaths     []int // dead markers naming the record
	solo       []int // the part of deaths whose marker named only this record
	minDead    []int // size of the smallest dead marker naming the record
	narrow     []recordid.ID
	window     int // isolation window (0: not isolating)
	runnable   int
	headDeaths int
	headSeq    string
	dead, live int                    // foreign markers seen (not completed)
	ended      int                    // the part of dead proven ended by the lane rule before their lease ran out
	heads      map[string]recordid.ID // held partition keys -> head (hold.go)
}

// plan classifies the batch's records (see the package comment, "In-flight markers").
func (p *Pipeline) plan(b *Batch, view View, mine Marker) *plan {
	n := len(b.Records)
	pl := &plan{kinds: make([]planKind, n)}
	held := make([]bool, n)
	now := p.now()
	for _, m := range view.Markers() {
		if m.Nonce == mine.Nonce {
			continue
		}
		if p.yieldsTo(b, m) {
			// The whole range of the mapping's batch, not only the ids the marker names: a
			// run names only what it attempts, and the rest of its batch (records not
			// started, isolated, behind a failed record of their key) is retried too.
			for i, r := range b.Records {
				if seqnum.Compare(r.ID.Seq, m.First) >= 0 && seqnum.Compare(r.ID.Seq, m.Last) <= 0 {
					held[i] = true
				}
			}
			continue
		}
		if m.Completed {
			continue
		}
		dead := !now.Before(m.Deadline.Add(DeadGrace))
		if !dead && laneEnded(m, mine, b) {
			dead = true
			pl.ended++
		}
		if dead {
			pl.dead++
		} else {
			pl.live++
			if !earlier(m.Marker, mine) {
				continue // it started after us: it yields to us, not we to it
			}
		}
		for _, id := range m.IDs {
			i, ok := b.index(id)
			if !ok {
				continue
			}
			if dead {
				if pl.deaths == nil {
					pl.deaths, pl.solo, pl.minDead = make([]int, n), make([]int, n), make([]int, n)
				}
				pl.deaths[i]++
				if pl.minDead[i] == 0 || m.Size < pl.minDead[i] {
					pl.minDead[i] = m.Size
				}
				if m.Size == 1 {
					pl.solo[i]++
				}
			} else {
				held[i] = true
			}
		}
	}
	heldKeys := map[string]bool{}
	var runnable []int
	for i := range b.Records {
		r := &b.Records[i]
		switch {
		case view.Done(r.ID):
			pl.kinds[i] = planSkip
		case held[i] || heldKeys[r.PartitionKey]:
			pl.kinds[i] = planHeld
			heldKeys[r.PartitionKey] = true
		case pl.soloOf(i) > 0 && view.Attempts(r.ID)+pl.soloOf(i) >= p.cfg.MaxRecordAttempts:
			pl.kinds[i] = planDead
		default:
			runnable = append(runnable, i)
		}
	}
	pl.runnable = len(runnable)
	isolated := false
	if len(runnable) > 0 {
		head := runnable[0]
		pl.headDeaths, pl.headSeq = pl.deathsOf(head), b.Records[head].ID.Seq
		if pl.headDeaths > 0 {
			// Bisect: half of the smallest dead run that held the head, at least one record.
			w := min(len(runnable), max(1, (pl.minDeadOf(head)+1)/2))
			pl.window = w
			end := runnable[w-1]
			for _, i := range runnable[w:] {
				pl.kinds[i] = planIsolated
				isolated = true
			}
			for i := end + 1; i < n; i++ {
				if pl.kinds[i] == planDead {
					pl.kinds[i] = planIsolated // parked in key order, once the window reaches it
				}
			}
		}
	}
	anyHeld := false
	for i := range n {
		anyHeld = anyHeld || pl.kinds[i] == planHeld
	}
	if pl.window > 0 || isolated || anyHeld {
		var ids []recordid.ID
		for i := range n {
			if pl.kinds[i] == planRun {
				ids = append(ids, b.Records[i].ID)
			}
		}
		if len(ids) < len(mine.IDs) {
			pl.narrow = ids
		}
		if ids == nil {
			pl.narrow = []recordid.ID{}
		}
	}
	return pl
}

// laneEnded reports whether m, a marker whose lease has not yet run out, belongs to an
// invocation that has ended all the same: both runs are the mapping's (SourceConsumer), m
// started first, b lies inside m's batch (a retry is the same batch, a half of it or the rest
// after a partial failure) and m names a record of b. Records of one partition key go to one
// of the shard's concurrent batches (ParallelizationFactor keys them by partition-key hash and
// orders them per key), and the mapping invokes each one batch at a time: "the next batching window begins as
// soon as the previous function invocation completes"
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventsourcemapping.html#invocation-eventsourcemapping-batching),
// and a failed batch blocks its records until it is retried: "Event source mappings that read
// from streams retry the entire batch of items. Repeated errors block processing of the
// affected shard until the error is resolved or the items expire"
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-retries.html).
// So an uncompleted marker of the mapping naming a record this invocation holds is the trace
// of an invocation of the same batch stream that died: it is a death now, not after its lease.
//
// What the rule cannot tell apart is a second mapping on the same stream and group (a mapping
// being replaced) running the same record at the same moment: its live marker is then taken for
// a death. That costs this run a narrower window and a possible duplicate, and a record one
// attempt short of MaxRecordAttempts may be parked (with its payload) one attempt early; it
// never marks a record done that is not. Replays (the reconciler, redrive) are not invocations
// of a batch stream: their markers, and the consumer's as they see them, keep the lease.
func laneEnded(m MarkerState, mine Marker, b *Batch) bool {
	if m.Source != SourceConsumer || mine.Source != SourceConsumer || b.Source != SourceConsumer || !earlier(m.Marker, mine) {
		return false
	}
	if m.First == "" || m.Last == "" || seqnum.Compare(mine.First, m.First) < 0 || seqnum.Compare(mine.Last, m.Last) > 0 {
		return false
	}
	for _, id := range m.IDs {
		if _, ok := b.index(id); ok {
			return true
		}
	}
	return false
}

// index finds id among b's records (sorted by id).
func (b *Batch) index(id recordid.ID) (int, bool) {
	return slices.BinarySearchFunc(b.Records, id, func(r Record, id recordid.ID) int { return recordid.Compare(r.ID, id) })
}

// yieldsTo reports whether replay batch b leaves the records of mapping marker m to the
// mapping (Batch.MappingSettled), measured from the run's last sign of life, after which the
// mapping retries what the run failed. The marker's deadline is capped by the invocation's own
// deadline, so the deadline less the lease can be the run's start however long the run lived:
//   - a completed run's end is its entry's write (CompletedAt), taken no earlier than the
//     deadline less the lease (its start or last renewal) and no later than the deadline plus
//     DeadGrace; an entry without the time falls back to the deadline less the lease (at most
//     half a lease before its end);
//   - a run that never completed (it crashed, hung or timed out) may have lived until its
//     deadline, and the mapping retries only after the invocation ended and a new sandbox
//     started: its deadline plus DeadGrace (when the marker reads as dead).
func (p *Pipeline) yieldsTo(b *Batch, m MarkerState) bool {
	if b.MappingSettled.IsZero() || b.Source == SourceConsumer || m.Source != SourceConsumer {
		return false
	}
	switch {
	case !m.Completed:
		return !m.Deadline.Add(DeadGrace).Before(b.MappingSettled)
	case !m.CompletedAt.IsZero():
		// A run ends after its last renewal and by its deadline: a writer's clock far off (or
		// a time someone else wrote) neither releases the records earlier than the deadline
		// less the lease would nor holds them past the deadline plus DeadGrace.
		end := m.CompletedAt
		if renewed := m.Deadline.Add(-p.lease); end.Before(renewed) {
			end = renewed
		}
		if limit := m.Deadline.Add(DeadGrace); end.After(limit) {
			end = limit
		}
		return !end.Before(b.MappingSettled)
	default:
		return !m.Deadline.Add(-p.lease).Before(b.MappingSettled)
	}
}

// earlier orders markers by start time, then nonce: of two live markers on one record, the
// earlier one runs it and the other skips it.
func earlier(a, b Marker) bool {
	if !a.Started.Equal(b.Started) {
		return a.Started.Before(b.Started)
	}
	return a.Nonce < b.Nonce
}

// attempts is id's failed attempts so far: recorded failures plus deaths it suffered alone.
func (pl *plan) attempts(view View, i int, id recordid.ID) int {
	return view.Attempts(id) + pl.soloOf(i)
}

// deathsOf, soloOf and minDeadOf read the per-record death counts (0 when no dead marker named
// a record of the batch).
func (pl *plan) deathsOf(i int) int  { return at(pl.deaths, i) }
func (pl *plan) soloOf(i int) int    { return at(pl.solo, i) }
func (pl *plan) minDeadOf(i int) int { return at(pl.minDead, i) }

func at(s []int, i int) int {
	if s == nil {
		return 0
	}
	return s[i]
}
