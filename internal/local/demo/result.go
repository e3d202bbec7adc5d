package demo

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// result computes the variant's figures from what arrived downstream.
func (v *variant) result(ctx context.Context, took time.Duration, timedOut bool) *VariantResult {
	r := &VariantResult{Name: v.name, Produced: v.writes.count(), Seconds: took.Seconds(), TimedOut: timedOut}
	for _, p := range v.recs {
		if p.Poison {
			r.PoisonProduced++
		}
	}
	trimmed := v.trimmedBeforeEnd(ctx)
	r.Killers = v.killers(v.e.cfg.Parallelization)
	produced := map[string]bool{}
	dropped := v.filteredIDs()
	// gapless: a record neither delivered nor parked is lost only when the run was not cut
	// short, every shard was verified, and the record lies behind the checkpoint mirror;
	// otherwise it is pending, and where it is is said.
	cut := timedOut || (v.gapless && !v.verified.Load())
	var pp pendingPlaces
	if v.gapless {
		pp = v.pendingPlaces(ctx)
	}
	recSent := map[string]time.Time{} // the reconciler's last send of each record (under --expire)
	if trimmed != nil {
		for _, s := range v.sends.all() {
			if s.source == sourceReconciler && s.at.After(recSent[s.id]) {
				recSent[s.id] = s.at
			}
		}
	}
	for _, w := range v.writes.records() {
		produced[w.id] = true
		if hasKey(trimmed, w.shard+"|"+w.seq) {
			r.Trimmed++
		}
		delivered := v.target.Has(w.id)
		parked := v.parked.Has(w.id)
		switch {
		case dropped[w.id]:
			r.Filtered++
			if delivered || parked {
				r.FilteredProcessed++
			}
		case delivered:
			r.DeliveredUnique++
			if arrival, ok := trimmed[w.shard+"|"+w.seq]; ok && v.replayedAfterTrim(w.id, arrival, recSent) {
				r.ReplayedAfterTrim++
			}
			if parked {
				r.ParkedAndDelivered++
			}
		case parked:
			r.Parked++
			r.ParkedIDs = append(r.ParkedIDs, w.id)
		case hasKey(trimmed, w.shard+"|"+w.seq):
			r.LostToRetention++
			r.LostToRetentionIDs = append(r.LostToRetentionIDs, w.id)
		case v.gapless && (cut || pp.where(w) == pendingTail):
			where := pp.where(w)
			r.Pending++
			if r.PendingWhere == nil {
				r.PendingWhere = map[string]int{}
			}
			r.PendingWhere[where]++
			if len(r.PendingRecords) < 50 {
				r.PendingRecords = append(r.PendingRecords, PendingRecord{ID: w.id, ShardID: w.shard, Seq: w.seq, Where: where})
			}
		default:
			r.Lost++
			r.LostRecords = append(r.LostRecords, LostRecord{ID: w.id, PartitionKey: w.key, ShardID: w.shard, Seq: w.seq})
		}
	}
	sort.Slice(r.LostRecords, func(i, j int) bool { return r.LostRecords[i].ID < r.LostRecords[j].ID })
	for _, l := range r.LostRecords {
		r.LostIDs = append(r.LostIDs, l.ID) // every one: lossFates compares them with gapless's parked ids
	}
	if len(r.LostRecords) > 50 {
		r.LostRecords = r.LostRecords[:50]
	}
	for i := range r.LostRecords {
		if v.gapless {
			v.explainLoss(ctx, &r.LostRecords[i])
		}
	}
	sort.Strings(r.ParkedIDs)
	sort.Strings(r.LostToRetentionIDs)
	r.HeldShard = v.heldShard
	r.Safety = v.safety(v.e.cfg.Parallelization)
	r.Unexpected = v.target.Unique() - r.DeliveredUnique
	r.Duplicates = v.target.Duplicates()
	logs := []string{filepath.Join(v.dir, "functions.log"), filepath.Join(v.dir, "runtime.log")}
	r.DuplicatesByCause = duplicateCausesOf(v.sends.all(), v.invs, ledgerFailures(logs...), v.writes.records(),
		v.e.cfg.Parallelization, r.Duplicates)
	r.ParkedMessages = int(v.parkMsgs.Load())
	r.ParkedBadPayload = int(v.parkBad.Load())
	r.DrainReceiveErrors = int(v.drainErrs.Load())
	r.LateDrained = int(v.lateDrained.Load())

	r.Mapping = MappingStats{
		Mappings: len(v.mappings), Invocations: int(v.ev.invocations.Load()), FunctionErrors: int(v.ev.functionErrors.Load()),
		Timeouts: int(v.ev.timeouts.Load()), PartialFailures: int(v.ev.partial.Load()), Bisections: int(v.ev.bisected.Load()),
		RetriesExhausted: int(v.ev.exhausted.Load()), RecordAgeExceeded: int(v.ev.expired.Load()), RecordsGivenUp: int(v.ev.givenUp.Load()),
		DestinationDeliveryFailures: int(v.ev.destFailed.Load()),
	}
	v.mu.Lock()
	if !v.splitAt.IsZero() {
		r.Mapping.SplitShard = v.splitOf
	}
	r.Timeline = v.timeline
	v.mu.Unlock()

	fnStats := v.fnDDB.Stats()
	r.DDB = DDBStats{
		Requests:           opRequests(fnStats),
		ReconcilerRequests: opRequests(v.recDDB.Stats()),
		Meter:              v.fnMeter.Snapshot(),
		ReconcilerMeter:    v.recMeter.Snapshot(),
	}
	total := 0
	for _, n := range r.DDB.Requests {
		total += n
	}
	if r.Mapping.Invocations > 0 && v.gapless {
		r.DDB.RequestsPerBatch = float64(total) / float64(r.Mapping.Invocations)
	}
	if r.Produced > 0 && v.gapless {
		r.DDB.WCUPerRecord = (r.DDB.Meter.Total.WriteUnits + r.DDB.ReconcilerMeter.Total.WriteUnits) / float64(r.Produced)
	}
	r.Faults = FaultStats{
		Chaos:           v.fn.chaosStats(),
		DynamoDB:        faultCounts(fnStats, v.recDDB.Stats()),
		SQS:             faultCounts(v.fnSQS.Stats(), v.recSQS.Stats(), v.raceSQS.Stats()),
		ReconcilerKills: func() int { n, _ := v.fn.killed(); return n }(),
	}
	_, r.Faults.KillNote = v.fn.killed()

	if v.gapless {
		r.Reconciler = ReconcilerStats{
			ScheduledRuns: int(v.rec.scheduled.Load()), ScheduledErrors: int(v.rec.scheduledErrors.Load()),
			FailureInvocations: int(v.rec.sqsInvocations.Load()), FailureMessages: int(v.rec.messages.Load()),
			FailureDeleted: int(v.rec.deleted.Load()), FailureRetried: int(v.rec.retried.Load()), Crashes: int(v.rec.crashes.Load()),
			TailReplayed: int(v.rec.tailReplayed.Load()),
		}
		if states, err := checkpoint.New(v.e.direct.ddb, v.checkpointTable).List(ctx, group, v.stream); err == nil {
			for _, st := range states {
				r.GapsDetected += int(st.GapsDetected)
				r.GapsReplayed += int(st.GapsReplayed)
				r.Reconciler.LostToRetention += int(st.LostToRetention)
				r.Reconciler.CheckpointWrites += int(st.CheckpointWrites)
			}
		}
		r.Verified = v.verified.Load() && r.Pending == 0 // verified includes the records past the checkpoint
		r.Incomplete = r.Pending > 0
		r.ReconcilerReplayed = distinctSent(v.sends.all(), sourceReconciler)
		r.ReconcilerParked = v.parkedByReconciler.len()
	}
	if p, ok := v.fn.(*inProcess); ok && p.stats != nil && v.name == VariantCheckpointDecides {
		st := p.stats
		r.Handler = &HandlerStats{
			Received: int(st.Records.Load()), Processed: int(st.Processed.Load()), Failed: int(st.Failed.Load()),
			Filtered: int(st.Filtered.Load()), RacesLost: int(st.RacesLost.Load()), Abandoned: int(st.Abandoned.Load()),
		}
	}
	r.Processes = v.rss.report()
	return r
}

// trimmedBeforeEnd returns the records the retention proxy trimmed (--expire), keyed
// "shard|sequence number", with their arrival times; nil without the fault. The horizon stopped
// moving at the trim's end (expire.go), so only the records of the run's first seconds are here.
func (v *variant) trimmedBeforeEnd(ctx context.Context) map[string]time.Time {
	if v.trim == nil {
		return nil
	}
	recs, err := v.trim.Trimmed(ctx, v.stream)
	if err != nil {
		v.log.Error("listing the records the stream trimmed failed: they count as lost", "error", err.Error())
		return nil
	}
	out := make(map[string]time.Time, len(recs))
	for _, r := range recs {
		out[r.ShardID+"|"+r.SequenceNumber] = r.Arrival
	}
	return out
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// replayedAfterTrim reports whether record id, which arrived in the stream at arrival and was
// trimmed, first reached the target queue after the stream trimmed it (arrival + the retention,
// the horizon moving with the retention until it stopped), sent by the reconciler (recSent: its
// last send of each record) after the trim: the stream could no longer serve it, so the
// reconciler replayed it from the mapping's on-failure object.
func (v *variant) replayedAfterTrim(id string, arrival time.Time, recSent map[string]time.Time) bool {
	trimmedAt := arrival.Add(v.e.cfg.Retention)
	at, ok := v.deliveredAt.get(id)
	sent, bySender := recSent[id]
	return ok && bySender && !arrival.IsZero() && !at.Before(trimmedAt) && !sent.Before(trimmedAt)
}

// explainLoss adds what the ledger knows about a lost record, to tell a record gapless never
// processed from one it recorded as done.
func (v *variant) explainLoss(ctx context.Context, l *LostRecord) {
	shard := recordid.Shard{Group: group, Stream: v.stream, ShardID: l.ShardID}
	view, err := dedupe.New(v.e.direct.ddb, v.ledgerTable).Lookup(ctx, shard, l.Seq, l.Seq)
	if err != nil {
		l.LedgerError = err.Error()
		return
	}
	id := recordid.ID{ShardID: l.ShardID, Seq: l.Seq}
	l.LedgerDone, l.LedgerParked, l.LedgerAttempts = view.Done(id), view.Parked(id), view.Attempts(id)
}

func opRequests(s faultproxy.Stats) map[string]int {
	out := map[string]int{}
	for op, o := range s.Ops {
		_, name, _ := cutOp(op)
		out[name] += o.Requests
	}
	return out
}

func cutOp(op string) (svc, name string, ok bool) {
	for i := 0; i < len(op); i++ {
		if op[i] == '.' {
			return op[:i], op[i+1:], true
		}
	}
	return "", op, false
}

func faultCounts(ss ...faultproxy.Stats) ProxyFaults {
	var f ProxyFaults
	for _, s := range ss {
		t := s.Total()
		f.Requests += t.Requests
		f.Throttled += t.Throttled
		f.ServerErrors += t.ServerErrors
		f.DroppedAfter += t.DroppedAfter
		for op, n := range opRequests(s) {
			if f.Operations == nil {
				f.Operations = map[string]int{}
			}
			f.Operations[op] += n
		}
	}
	return f
}

// lastIn is the sequence number of the last record written to shard ("" none).
func (w *ledgerOfWrites) lastIn(shard string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	seqs := w.byShard[shard]
	if len(seqs) == 0 {
		return ""
	}
	return seqs[len(seqs)-1]
}

// outcomeTicks are, per shard, the positions of the records the variant lost or parked (for
// the chart), computed like result's counts.
func (v *variant) outcomeTicks() map[string][]chartTick {
	seqs := v.writes.snapshot()
	out := map[string][]chartTick{}
	for _, w := range v.writes.records() {
		if v.target.Has(w.id) {
			continue
		}
		out[w.shard] = append(out[w.shard], chartTick{pos: position(seqs[w.shard], w.seq), parked: v.parked.Has(w.id)})
	}
	return out
}

// LossFates is what gapless did with the records the mapping alone lost, matched by record id
// (both variants produce the same records from the seed): parked with their payload,
// delivered, or not accounted for (lost, lost to retention or pending in gapless too).
type LossFates struct {
	Lost      int `json:"lost"` // the mapping alone's lost records
	Parked    int `json:"parked"`
	Delivered int `json:"delivered"`
	// Unaccounted: lost, lost to retention or still pending in gapless too.
	Unaccounted int `json:"unaccounted"`
	// ParkedElsewhere: records gapless parked that the mapping alone did not lose: it
	// delivered them (a record whose transient failures reached MAX_RECORD_ATTEMPTS in
	// gapless, while the mapping's retries got it through).
	ParkedElsewhere int `json:"parked_elsewhere"`
	// PendingUnlisted: gapless's pending records beyond the 50 it lists by id. Any of them
	// among the mapping alone's losses counts in Delivered, so Delivered is then an upper bound.
	PendingUnlisted int `json:"pending_unlisted,omitempty"`
}

// lossFates matches alone's lost ids with gapless's parked, lost and pending ones. A record
// gapless neither parked nor lost nor has pending was delivered (gapless's Lost = Produced −
// delivered − parked − pending); pending records are listed by id only up to 50, and
// PendingUnlisted says how many were not.
func lossFates(alone, g *VariantResult) LossFates {
	parked := map[string]bool{}
	for _, id := range g.ParkedIDs {
		parked[id] = true
	}
	gone := map[string]bool{}
	for _, ids := range [][]string{g.LostIDs, g.LostToRetentionIDs} {
		for _, id := range ids {
			gone[id] = true
		}
	}
	for _, p := range g.PendingRecords {
		gone[p.ID] = true
	}
	f := LossFates{Lost: len(alone.LostIDs), PendingUnlisted: max(0, g.Pending-len(g.PendingRecords))}
	lost := map[string]bool{}
	for _, id := range alone.LostIDs {
		lost[id] = true
		switch {
		case parked[id]:
			f.Parked++
		case gone[id]:
			f.Unaccounted++
		default:
			f.Delivered++
		}
	}
	for _, id := range g.ParkedIDs {
		if !lost[id] {
			f.ParkedElsewhere++
		}
	}
	return f
}

// Line says it in a sentence: what gapless did with the mapping alone's losses.
func (f LossFates) Line() string {
	s := fmt.Sprintf("the mapping alone lost %s; gapless parked %d of those same ids with their payload and delivered the other %d",
		records(f.Lost), f.Parked, f.Delivered)
	switch {
	case f.Lost == 0:
		s = "the mapping alone lost no record"
	case f.Parked == f.Lost:
		s = fmt.Sprintf("the mapping alone lost %s; gapless parked exactly those ids, with their payload", records(f.Lost))
	case f.Unaccounted > 0:
		s = fmt.Sprintf("the mapping alone lost %s; gapless parked %d of those same ids with their payload, delivered %d, and %d are lost or pending in gapless too",
			records(f.Lost), f.Parked, f.Delivered, f.Unaccounted)
	}
	if f.ParkedElsewhere > 0 {
		s += fmt.Sprintf("; gapless also parked %s the mapping alone delivered", records(f.ParkedElsewhere))
	}
	if f.PendingUnlisted > 0 && f.Delivered > 0 {
		s += fmt.Sprintf(" (at most: %d of gapless's pending records are not listed by id)", f.PendingUnlisted)
	}
	return s
}

func records(n int) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}
