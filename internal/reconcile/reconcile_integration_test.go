package reconcile

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// gapped writes n records to a one-shard stream and has the consumer process only the records
// whose index is in done (in batches of consecutive indexes), the last batch moving the
// checkpoint to its last record. It returns the records and the missing ones up to the checkpoint.
func gapped(t *testing.T, s *stack, n int, done func(i int) bool) (all, missing []put) {
	t.Helper()
	all = s.putN(n, "gap", keyMod(7), nil)
	cons := s.pipeline(newRecorder().process, 3)
	var batch []put
	last := -1
	for i := range all {
		if done(i) {
			batch = append(batch, all[i])
			last = i
			continue
		}
		if len(batch) > 0 {
			s.consume(cons, batch)
			batch = nil
		}
	}
	if len(batch) > 0 {
		s.consume(cons, batch)
	}
	for i := 0; i <= last; i++ {
		if !done(i) {
			missing = append(missing, all[i])
		}
	}
	return all, missing
}

func TestGapsReplayedOnceAndWatermarkLandsOnCheckpoint(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	// Records 0-9, 25-29 and 45-49 done by the consumer; the checkpoint at 49.
	all, missing := gapped(t, s, 60, func(i int) bool { return i < 10 || (i >= 25 && i < 30) || (i >= 45 && i < 50) })
	rec := newRecorder()
	r := s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 7}) // several pages
	ctx := context.Background()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkOnce(t, "reconciler", rec.counts(), idsOf(missing))
	if rep.GetRecordsCalls < 50/7 {
		t.Errorf("%d GetRecords calls for 50 records in pages of 7", rep.GetRecordsCalls)
	}
	if rep.GapsDetected != len(missing) || rep.GapsReplayed != len(missing) || rep.RecordsVerified != 50 {
		t.Errorf("report: gaps %d replayed %d verified %d, want %d, %d, 50", rep.GapsDetected, rep.GapsReplayed, rep.RecordsVerified, len(missing), len(missing))
	}
	shardID := all[0].shard
	st := s.state(shardID)
	if st.Checkpoint != all[49].seq || st.Watermark != all[49].seq {
		t.Errorf("checkpoint %s watermark %s, want both %s", st.Checkpoint, st.Watermark, all[49].seq)
	}
	if st.GapsDetected != int64(len(missing)) || st.GapsReplayed != int64(len(missing)) {
		t.Errorf("counters on the item: detected %d replayed %d, want %d", st.GapsDetected, st.GapsReplayed, len(missing))
	}
	// A second run finds the watermark on the checkpoint: one look past it for a due tail (the
	// records after it are an hour old, younger than TailAfter), nothing replayed.
	rep, err = r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsDetected != 0 || rep.GetRecordsCalls != 1 || len(rec.delivered()) != len(missing) {
		t.Errorf("second run: gaps %d, GetRecords calls %d, deliveries %d", rep.GapsDetected, rep.GetRecordsCalls, len(rec.delivered()))
	}
	// Records 50-59 are beyond the checkpoint: the mapping's until older than TailAfter.
	if c := rec.counts()[all[55].id()]; c != 0 {
		t.Errorf("record beyond the checkpoint processed %d times", c)
	}
}

func TestSettleWindowLeavesYoungRecords(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, missing := gapped(t, s, 20, func(i int) bool { return i >= 15 })
	rec := newRecorder()
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	r := s.reconciler(s.pipeline(rec.process, 3), Config{SettleAfter: 10 * time.Minute}, WithClock(func() time.Time { return *now.Load() }))
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.GapsDetected != 0 || len(rec.delivered()) != 0 {
		t.Fatalf("young records judged gaps: %d detected, %d processed", rep.GapsDetected, len(rec.delivered()))
	}
	if rep.VerifiedLag <= 0 || rep.VerifiedLag > time.Minute {
		t.Errorf("verified lag %s, want the (small, positive) age of the oldest unverified record", rep.VerifiedLag)
	}
	if st := s.state(all[0].shard); st.Watermark != "" {
		t.Errorf("watermark moved to %s over unsettled records", st.Watermark)
	}
	later := start.Add(11 * time.Minute)
	now.Store(&later)
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, "after settling", rec.counts(), idsOf(missing))
	if st := s.state(all[0].shard); st.Watermark != all[19].seq {
		t.Errorf("watermark %s, want %s", st.Watermark, all[19].seq)
	}
}

func TestRetentionLossCountedOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	// Through internal/local/retention: records 0-4 verified, 5-9 never consumed, the trim horizon
	// passes 0-9, records 10-19 are held and 10-14 missing from the ledger.
	expire := s.trimmed()
	cons := s.pipeline(newRecorder().process, 3)
	all := s.putN(5, "verified", keyMod(7), nil)
	s.consume(cons, all)
	if _, err := s.reconciler(s.pipeline(newRecorder().process, 3), Config{}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	all = append(all, s.putN(5, "lost", keyMod(7), nil)...)
	expire()
	missing := s.putN(5, "missing", keyMod(7), nil)
	all = append(all, missing...)
	done := s.putN(5, "done", keyMod(7), nil)
	s.consume(cons, done)
	all = append(all, done...)
	shardID := all[0].shard
	var logs logBuffer
	rec := newRecorder()
	r := s.reconciler(s.pipeline(rec.process, 3), Config{}, WithLogger(logs.logger()))
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.LostToRetention != 1 {
		t.Errorf("LostToRetention %d, want 1", rep.LostToRetention)
	}
	checkOnce(t, "from the trim horizon", rec.counts(), idsOf(missing))
	st := s.state(shardID)
	if st.LostToRetention != 1 || st.Watermark != all[19].seq {
		t.Errorf("item: lostToRetention %d watermark %s, want 1 and %s", st.LostToRetention, st.Watermark, all[19].seq)
	}
	errs := logs.lines("ERROR")
	found := false
	for _, l := range errs {
		if l["shard_id"] == shardID && l["lost_after_sequence_number"] == all[4].seq && l["first_sequence_number_held"] == all[10].seq {
			found = true
		}
	}
	if !found {
		t.Errorf("no ERROR line naming shard %s and the span after %s: %v", shardID, all[4].seq, errs)
	}
	// Counted once: the next run starts at the new watermark.
	s.consume(s.pipeline(newRecorder().process, 3), s.putN(3, "more", keyMod(3), nil))
	rep, err = r.Run(context.Background())
	if err != nil || rep.LostToRetention != 0 {
		t.Errorf("second run: lost %d, err %v", rep.LostToRetention, err)
	}
}

func TestCrashMidReplayNextRunCompletes(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, missing := gapped(t, s, 40, func(i int) bool { return i >= 35 })
	const k = 5
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	crashing := newRecorder()
	crashing.fail = func(context.Context, pipeline.Record) error {
		if calls.Add(1) == k {
			cancel() // the invocation dies here: the ledger write of this page never happens
		}
		return nil
	}
	r := s.reconciler(s.pipeline(crashing.process, 3), Config{PageLimit: 10})
	if _, err := r.Run(ctx); err == nil {
		t.Log("crashed run reported no error (the pipeline saw the cancellation as a deadline)")
	}
	if st := s.state(all[0].shard); st.Watermark != "" && seqnum.Compare(st.Watermark, missing[0].seq) >= 0 {
		t.Fatalf("watermark %s passed records the crashed run did not record", st.Watermark)
	}
	rec := newRecorder()
	r = s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 10})
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatalf("second run: %v", err)
	}
	// Every missing record is processed; the only duplicates are records the crashed run
	// processed without recording them (the documented window), each at most once more.
	before := crashing.counts()
	after := rec.counts()
	if len(before) < k {
		t.Fatalf("the crashed run processed %d records, want at least %d", len(before), k)
	}
	dups := 0
	for _, id := range idsOf(missing) {
		switch b, a := before[id], after[id]; {
		case b+a == 0:
			t.Errorf("record %s never processed", id)
		case b == 0 && a != 1, b > 1, a > 1:
			t.Errorf("record %s processed %d times by the crashed run and %d times after", id, b, a)
		case b == 1 && a == 1:
			dups++
		}
	}
	t.Logf("crashed run processed %d records; %d of them again in the next run", len(before), dups)
	if st := s.state(all[0].shard); st.Watermark != all[39].seq {
		t.Errorf("watermark %s, want %s", st.Watermark, all[39].seq)
	}
}

func TestPoisonGapIsParkedThenPassed(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all := s.putN(12, "p", keyMod(3), func(i int) []byte {
		if i == 4 {
			return []byte(`{"poison":true}`)
		}
		return []byte(fmt.Sprintf(`{"n":%d}`, i))
	})
	s.consume(s.pipeline(newRecorder().process, 3), all[10:]) // checkpoint at 11; 0-9 missing
	rec := newRecorder()
	rec.fail = func(_ context.Context, r pipeline.Record) error {
		if strings.Contains(string(r.Data), "poison") {
			return errors.New("poison")
		}
		return nil
	}
	r := s.reconciler(s.pipeline(rec.process, 3), Config{})
	shardID := all[0].shard
	for run := 1; run <= 2; run++ {
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.StillFailing == 0 || rep.Parked != 0 {
			t.Fatalf("run %d: still failing %d, parked %d", run, rep.StillFailing, rep.Parked)
		}
		// The watermark waits just before the poison record.
		if st := s.state(shardID); st.Watermark != all[3].seq {
			t.Fatalf("run %d: watermark %s, want %s (just before the poison record)", run, st.Watermark, all[3].seq)
		}
	}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Parked != 1 {
		t.Fatalf("third run parked %d, want 1", rep.Parked)
	}
	if st := s.state(shardID); st.Watermark != all[11].seq || st.Parked != 1 {
		t.Errorf("watermark %s parked %d, want %s and 1", st.Watermark, st.Parked, all[11].seq)
	}
	msgs := s.parkedMessages()
	if len(msgs) != 1 || msgs[0].Seq != all[4].seq || string(msgs[0].Data) != `{"poison":true}` || msgs[0].Source != pipeline.SourceReconciler {
		t.Fatalf("parked messages %+v", msgs)
	}
	// Records of the poison's key after it were held back until it was parked; others were
	// processed once each.
	for i, p := range all[:10] {
		if i == 4 {
			continue
		}
		if c := rec.counts()[p.id()]; c != 1 {
			t.Errorf("record %d processed %d times", i, c)
		}
	}
}

// watchWatermark polls a shard's watermark until stop and reports any step backwards.
func watchWatermark(t *testing.T, s *stack, shardID string, stop <-chan struct{}) <-chan error {
	out := make(chan error, 1)
	go func() {
		prev := ""
		for {
			st, err := s.cps.Get(context.Background(), s.shard(shardID))
			if err == nil && st.Watermark != "" {
				if prev != "" && seqnum.Compare(st.Watermark, prev) < 0 {
					out <- fmt.Errorf("watermark moved back from %s to %s", prev, st.Watermark)
					return
				}
				prev = st.Watermark
			} else if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
				out <- err
				return
			}
			select {
			case <-stop:
				out <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return out
}

func TestTwoReconcilersConcurrently(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, missing := gapped(t, s, 150, func(i int) bool { return i%10 == 0 || i == 149 })
	shardID := all[0].shard
	rec := newRecorder() // shared: deliveries by either reconciler
	stop := make(chan struct{})
	watch := watchWatermark(t, s, shardID, stop)
	var wg sync.WaitGroup
	reps := make([]Report, 2)
	errs := make([]error, 2)
	for i := range 2 {
		r := s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 15})
		wg.Go(func() { reps[i], errs[i] = r.Run(context.Background()) })
	}
	wg.Wait()
	close(stop)
	if err := <-watch; err != nil {
		// Two reconcilers advance one watermark item with conditional writes at once:
		// moto_server does not serialize writes to one item (stacktest.RequireAtomicItemWrites),
		// so there the watermark can move back inside the emulator. Monotonic under concurrent
		// writers is proven against dynalite (checkpoint TestConcurrentAdvanceIsMonotonic, and this
		// test's dynalite pass); the loss and duplicate checks below hold on both.
		if !stacktest.IsMoto() {
			t.Fatal(err)
		}
		t.Logf("moto_server: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reconciler %d: %v", i, err)
		}
	}
	counts := rec.counts()
	deliveries := 0
	for _, id := range idsOf(missing) {
		if counts[id] == 0 {
			t.Errorf("record %s lost", id)
		}
		deliveries += counts[id]
	}
	dups := deliveries - len(missing)
	replayed := reps[0].GapsReplayed + reps[1].GapsReplayed
	if replayed-len(missing) != dups {
		t.Errorf("reports count %d replays for %d missing records (%d duplicates), Process saw %d duplicates", replayed, len(missing), replayed-len(missing), dups)
	}
	t.Logf("%d missing records, %d duplicate replays from two concurrent reconcilers", len(missing), dups)
	if st := s.state(shardID); st.Watermark != all[149].seq {
		t.Errorf("watermark %s, want %s", st.Watermark, all[149].seq)
	}
}

func TestReshardParentsBeforeChildren(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	parent := s.shardIDs()[0]
	keys := keyMod(16)
	before := s.putN(20, "before", keys, nil)
	split := new(big.Int).Lsh(big.NewInt(1), 127)
	if _, err := s.kin.SplitShard(context.Background(), splitInput(s.stream, parent, split)); err != nil {
		t.Fatal(err)
	}
	s.waitActive()
	mid := s.putN(30, "mid", keys, nil)
	children := map[string][]put{}
	for _, p := range mid {
		children[p.shard] = append(children[p.shard], p)
	}
	if len(children) != 2 {
		t.Fatalf("records after the split landed in %d shards, want 2", len(children))
	}
	var kids []string
	for id := range children {
		kids = append(kids, id)
	}
	if kids[0] > kids[1] {
		kids[0], kids[1] = kids[1], kids[0]
	}
	if _, err := s.kin.MergeShards(context.Background(), mergeInput(s.stream, kids[0], kids[1])); err != nil {
		t.Fatal(err)
	}
	s.waitActive()
	after := s.putN(20, "after", keys, nil)
	grandchild := after[0].shard

	// The consumer: the parent's first and last batches only (its middle skipped), each child's
	// last record only, the grandchild's second half only.
	cons := s.pipeline(newRecorder().process, 3)
	s.consume(cons, before[:5])
	s.consume(cons, before[15:])
	for _, id := range kids {
		c := children[id]
		s.consume(cons, c[len(c)-1:])
	}
	s.consume(cons, after[10:])

	rec := newRecorder()
	r := s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 8})
	var reps []Report
	for range 3 { // lineage may take a run per generation
		rep, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
	}
	var want []recordid.ID
	want = append(want, idsOf(before[5:15])...)
	for _, id := range kids {
		c := children[id]
		want = append(want, idsOf(c[:len(c)-1])...)
	}
	want = append(want, idsOf(after[:10])...)
	checkOnce(t, "reconciler", rec.counts(), want)

	// Parents verified before children: every replayed record of a shard comes after every
	// replayed record of its ancestors.
	gen := map[string]int{parent: 0, kids[0]: 1, kids[1]: 1, grandchild: 2}
	maxGen := -1
	for _, id := range rec.delivered() {
		g := gen[id.ShardID]
		if g < maxGen {
			t.Fatalf("record %s of generation %d replayed after a record of generation %d", id, g, maxGen)
		}
		maxGen = g
	}
	for _, id := range []string{parent, kids[0], kids[1]} {
		if st := s.state(id); !st.Closed {
			t.Errorf("shard %s not marked closed after verification", id)
		}
	}
	if st := s.state(grandchild); st.Watermark != after[19].seq {
		t.Errorf("grandchild watermark %s, want %s", st.Watermark, after[19].seq)
	}
	if st := s.state(kids[0]); len(st.Parents) != 1 || st.Parents[0] != parent {
		t.Errorf("child lineage %v, want [%s]", st.Parents, parent)
	}
}
