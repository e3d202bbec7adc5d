package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// The contract: the observable behaviour of the ledger and the checkpoint mirror the pipeline
// relies on, as cases that run the same way against these in-memory stores and against the
// DynamoDB ones (pipeline.DedupeLedger, pipeline.CheckpointStore). A fake that passes it can
// stand in for the stores in a test; one that does not would let a test pass that the real
// stores would fail. It follows testing/fstest.TestFS: TestStores returns an error naming every
// case that broke, and the caller decides what that means.

// Stores is what TestStores runs against. NewShard returns, for each case, a shard no other
// case and no earlier run has written (the cases write to the stores).
type Stores struct {
	Ledger interface {
		pipeline.Ledger
		pipeline.Claimer
	}
	// Checkpoint and Mirror are the two sides of one checkpoint mirror: the consumer's and the
	// reconciler's (*Checkpoint is both; on DynamoDB, pipeline.CheckpointStore and the
	// *checkpoint.Store it wraps).
	Checkpoint pipeline.Checkpointer
	Mirror     Mirror
	NewShard   func(name string) recordid.Shard
}

// Mirror is the reconciler's side of the checkpoint mirror (reconcile.Checkpoints).
type Mirror interface {
	List(ctx context.Context, group, stream string) ([]checkpoint.State, error)
	Get(ctx context.Context, shard recordid.Shard) (checkpoint.State, error)
	AdvanceWatermark(ctx context.Context, shard recordid.Shard, seq string) (checkpoint.Result, error)
	CountLoss(ctx context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error)
	AddCounters(ctx context.Context, shard recordid.Shard, c checkpoint.Counters) error
	MarkClosed(ctx context.Context, shard recordid.Shard, endingSeq string) error
	SetLineage(ctx context.Context, shard recordid.Shard, parents []string) error
	SetScopeFrom(ctx context.Context, shard recordid.Shard, at time.Time) error
	SetEmptyThrough(ctx context.Context, shard recordid.Shard, e checkpoint.EmptyThrough) (bool, error)
	SetVerifiedAsOf(ctx context.Context, shard recordid.Shard, at time.Time) error
}

var _ Mirror = (*checkpoint.Store)(nil)
var _ Mirror = (*Checkpoint)(nil)

// ContractSeq is the i-th sequence number the contract's cases use (Kinesis-shaped: 56 digits,
// increasing with i).
func ContractSeq(i int) string {
	return fmt.Sprintf("49590338271490256608559692538361571095921575989%09d", i)
}

type contractCase struct {
	name string
	run  func(ctx context.Context, s Stores, shard recordid.Shard) error
}

// TestStores runs every contract case against s. The error joins one error per broken case,
// each naming the case; nil when every case holds.
func TestStores(ctx context.Context, s Stores) error {
	var errs []error
	for _, c := range contractCases {
		if err := c.run(ctx, s, s.NewShard(c.name)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

func cid(shard recordid.Shard, i int) recordid.ID {
	return recordid.ID{ShardID: shard.ShardID, Seq: ContractSeq(i)}
}

func cids(shard recordid.Shard, is ...int) []recordid.ID {
	out := make([]recordid.ID, len(is))
	for k, i := range is {
		out[k] = cid(shard, i)
	}
	return out
}

func lookup(ctx context.Context, s Stores, shard recordid.Shard, from, to int) (pipeline.View, error) {
	v, err := s.Ledger.Lookup(ctx, shard, ContractSeq(from), ContractSeq(to))
	if err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	if v == nil {
		return nil, errors.New("lookup returned a nil view and no error")
	}
	return v, nil
}

func markersOf(v pipeline.View) ([]pipeline.MarkerState, error) {
	return v.Markers(), nil
}

// contractReceipt is a valid park receipt (the ledger checks its form).
func contractReceipt(parkID string, s3 bool) park.Receipt {
	r := park.Receipt{ParkID: parkID, Bytes: 7, SHA256: strings.Repeat("a", 64), KeySHA256: strings.Repeat("b", 64)}
	if s3 {
		r.PayloadS3 = &park.Pointer{Bucket: "payloads", Key: "parked/" + parkID}
	}
	return r
}

var contractCases = []contractCase{
	{"a range never written is not done, with no attempts and no markers", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		v, err := lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		if v.Done(cid(shard, 3)) || v.Attempts(cid(shard, 3)) != 0 {
			return fmt.Errorf("done %v, attempts %d, want false, 0", v.Done(cid(shard, 3)), v.Attempts(cid(shard, 3)))
		}
		ms, err := markersOf(v)
		if err != nil {
			return err
		}
		if len(ms) != 0 {
			return fmt.Errorf("%d markers, want 0", len(ms))
		}
		return nil
	}},
	{"an entry makes its records done and counts one attempt per listing in Failed", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		e := pipeline.Entry{First: ContractSeq(0), Last: ContractSeq(9), Source: pipeline.SourceConsumer,
			Done: cids(shard, 0, 1, 2), Failed: cids(shard, 5)}
		if err := s.Ledger.Record(ctx, shard, e); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		e2 := pipeline.Entry{First: ContractSeq(5), Last: ContractSeq(9), Source: pipeline.SourceConsumer, Failed: cids(shard, 5, 6)}
		if err := s.Ledger.Record(ctx, shard, e2); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		v, err := lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		var errs []error
		for _, i := range []int{0, 1, 2} {
			if !v.Done(cid(shard, i)) {
				errs = append(errs, fmt.Errorf("record %d not done", i))
			}
		}
		for i, want := range map[int]int{5: 2, 6: 1, 3: 0} {
			if v.Done(cid(shard, i)) || v.Attempts(cid(shard, i)) != want {
				errs = append(errs, fmt.Errorf("record %d: done %v, attempts %d, want false, %d", i, v.Done(cid(shard, i)), v.Attempts(cid(shard, i)), want))
			}
		}
		return errors.Join(errs...)
	}},
	{"an entry is refused, and nothing of it stored, when a record lies outside its range", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		e := pipeline.Entry{First: ContractSeq(0), Last: ContractSeq(4), Source: pipeline.SourceConsumer, Done: cids(shard, 1, 7)}
		if err := s.Ledger.Record(ctx, shard, e); err == nil {
			return errors.New("record of an entry naming a record past Last succeeded")
		}
		v, err := lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		if v.Done(cid(shard, 1)) || v.Done(cid(shard, 7)) {
			return errors.New("a refused entry made records done")
		}
		return nil
	}},
	{"a parked record is done, with the receipt of every park recorded", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		first, again := contractReceipt("00000000000000a1", false), contractReceipt("00000000000000c3", true)
		e := pipeline.Entry{First: ContractSeq(0), Last: ContractSeq(9), Source: pipeline.SourceConsumer,
			Done: cids(shard, 2, 4), Parked: cids(shard, 4), Failed: cids(shard, 4),
			Parks: []pipeline.ParkRecord{{ID: cid(shard, 4), Receipt: first}}}
		if err := s.Ledger.Record(ctx, shard, e); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		e2 := pipeline.Entry{First: ContractSeq(4), Last: ContractSeq(4), Source: pipeline.SourceRedrive,
			Done: cids(shard, 4), Parked: cids(shard, 4), Parks: []pipeline.ParkRecord{{ID: cid(shard, 4), Receipt: again}}}
		if err := s.Ledger.Record(ctx, shard, e2); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		v, err := lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		if !v.Done(cid(shard, 4)) {
			return errors.New("the parked record is not done")
		}
		pv, ok := v.(pipeline.ParkView)
		if !ok {
			return fmt.Errorf("the view (%T) does not report parks", v)
		}
		got := pv.ParkReceipts(cid(shard, 4))
		slices.SortFunc(got, func(a, b park.Receipt) int { return strings.Compare(a.ParkID, b.ParkID) })
		if len(got) != 2 || !sameReceipt(got[0], first) || !sameReceipt(got[1], again) {
			return fmt.Errorf("receipts %+v, want %+v and %+v", got, first, again)
		}
		if r := pv.ParkReceipts(cid(shard, 2)); len(r) != 0 {
			return fmt.Errorf("a record processed, not parked, has receipts %+v", r)
		}
		return nil
	}},
	{"a marker is read back as written: ids inside the range only, its size, not completed", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		start := time.UnixMilli(1_800_000_000_000)
		m := pipeline.Marker{Nonce: "n1", First: ContractSeq(0), Last: ContractSeq(9), IDs: cids(shard, 1, 3, 8),
			Started: start, Deadline: start.Add(10 * time.Second), Source: pipeline.SourceConsumer}
		if err := s.Ledger.Mark(ctx, shard, m); err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		v, err := lookup(ctx, s, shard, 2, 9)
		if err != nil {
			return err
		}
		ms, err := markersOf(v)
		if err != nil {
			return err
		}
		if len(ms) != 1 {
			return fmt.Errorf("%d markers, want 1", len(ms))
		}
		got := ms[0]
		switch {
		case got.Nonce != m.Nonce || got.First != m.First || got.Last != m.Last || got.Source != m.Source:
			return fmt.Errorf("marker %s %s..%s source %s, want %s %s..%s source %s", got.Nonce, got.First, got.Last, got.Source, m.Nonce, m.First, m.Last, m.Source)
		case !got.Started.Equal(m.Started) || !got.Deadline.Equal(m.Deadline):
			return fmt.Errorf("marker started %v deadline %v, want %v and %v", got.Started, got.Deadline, m.Started, m.Deadline)
		case !slices.Equal(got.IDs, cids(shard, 3, 8)) || got.Size != 3:
			return fmt.Errorf("marker ids %v size %d, want %v (inside the range) and 3", got.IDs, got.Size, cids(shard, 3, 8))
		case got.Completed:
			return errors.New("a marker without an entry of its nonce reads as completed")
		}
		return nil
	}},
	{"a marker rewritten with its nonce replaces it, an entry of its nonce completes it, Unmark deletes it", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		start := time.UnixMilli(1_800_000_000_000)
		m := pipeline.Marker{Nonce: "n2", First: ContractSeq(0), Last: ContractSeq(9), IDs: cids(shard, 0, 1, 2, 3),
			Started: start, Deadline: start.Add(10 * time.Second), Source: pipeline.SourceConsumer}
		other := m
		other.Nonce, other.IDs = "n3", cids(shard, 5)
		for _, mk := range []pipeline.Marker{m, other} {
			if err := s.Ledger.Mark(ctx, shard, mk); err != nil {
				return fmt.Errorf("mark: %w", err)
			}
		}
		narrowed := m
		narrowed.IDs = cids(shard, 0, 1)
		if err := s.Ledger.Mark(ctx, shard, narrowed); err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		if err := s.Ledger.Record(ctx, shard, pipeline.Entry{First: m.First, Last: m.Last, Source: m.Source, Nonce: m.Nonce, Done: cids(shard, 0, 1)}); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		v, err := lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		ms, err := markersOf(v)
		if err != nil {
			return err
		}
		byNonce := map[string]pipeline.MarkerState{}
		for _, x := range ms {
			byNonce[x.Nonce] = x
		}
		if len(ms) != 2 || !slices.Equal(byNonce["n2"].IDs, cids(shard, 0, 1)) || byNonce["n2"].Size != 2 {
			return fmt.Errorf("markers %+v, want n2 naming records 0 and 1 only, and n3", ms)
		}
		if !byNonce["n2"].Completed || byNonce["n3"].Completed {
			return fmt.Errorf("completed: n2 %v, n3 %v, want true, false", byNonce["n2"].Completed, byNonce["n3"].Completed)
		}
		if err := s.Ledger.Unmark(ctx, shard, other); err != nil {
			return fmt.Errorf("unmark: %w", err)
		}
		if err := s.Ledger.Unmark(ctx, shard, other); err != nil {
			return fmt.Errorf("unmark of a marker already deleted: %w", err)
		}
		v, err = lookup(ctx, s, shard, 0, 9)
		if err != nil {
			return err
		}
		if ms, _ = markersOf(v); len(ms) != 1 || ms[0].Nonce != "n2" {
			return fmt.Errorf("after Unmark of n3: markers %+v, want n2 alone", ms)
		}
		return nil
	}},
	{"a business key is claimed once: its owner's retry is not a duplicate, another record is", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		group, key := shard.Group, "order-"+shard.ShardID
		for _, step := range []struct {
			id   recordid.ID
			want bool
		}{{cid(shard, 1), false}, {cid(shard, 1), false}, {cid(shard, 2), true}, {cid(shard, 1), false}} {
			dup, err := s.Ledger.Claim(ctx, group, key, step.id)
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if dup != step.want {
				return fmt.Errorf("claim by %s: duplicate %v, want %v", step.id, dup, step.want)
			}
		}
		return nil
	}},
	{"the checkpoint only moves forward: a lower or equal sequence loses the race and names the stored one", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		for _, step := range []struct {
			seq      int
			advanced bool
			previous int // -1: not checked
		}{{5, true, -1}, {5, false, 5}, {3, false, 5}, {8, true, -1}, {7, false, 8}} {
			adv, err := s.Checkpoint.Advance(ctx, shard, ContractSeq(step.seq))
			if err != nil {
				return fmt.Errorf("advance to %d: %w", step.seq, err)
			}
			if adv.Advanced != step.advanced {
				return fmt.Errorf("advance to %d: advanced %v, want %v", step.seq, adv.Advanced, step.advanced)
			}
			if step.previous >= 0 && adv.Previous != "" && adv.Previous != ContractSeq(step.previous) {
				return fmt.Errorf("advance to %d lost to %s, want %s", step.seq, adv.Previous, ContractSeq(step.previous))
			}
		}
		return nil
	}},
}

func init() { contractCases = append(contractCases, mirrorCases...) }

// get reads shard's state, failing when it is not there.
func get(ctx context.Context, s Stores, shard recordid.Shard) (checkpoint.State, error) {
	st, err := s.Mirror.Get(ctx, shard)
	if err != nil {
		return st, fmt.Errorf("get: %w", err)
	}
	return st, nil
}

// mirrorCases are the reconciler's side of the checkpoint mirror.
var mirrorCases = []contractCase{
	{"a shard never written is not found, and its stream lists no shard", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		if _, err := s.Mirror.Get(ctx, shard); !errors.Is(err, checkpoint.ErrNotFound) {
			return fmt.Errorf("get: %v, want checkpoint.ErrNotFound", err)
		}
		states, err := s.Mirror.List(ctx, shard.Group, shard.Stream)
		if err != nil || len(states) != 0 {
			return fmt.Errorf("list: %d states, %v; want none", len(states), err)
		}
		return nil
	}},
	{"the watermark only moves forward, apart from the checkpoint", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		for _, step := range []struct {
			seq      int
			advanced bool
		}{{5, true}, {5, false}, {3, false}, {6, true}} {
			r, err := s.Mirror.AdvanceWatermark(ctx, shard, ContractSeq(step.seq))
			if err != nil {
				return fmt.Errorf("advance watermark to %d: %w", step.seq, err)
			}
			if r.Advanced != step.advanced {
				return fmt.Errorf("advance watermark to %d: advanced %v, want %v", step.seq, r.Advanced, step.advanced)
			}
		}
		if _, err := s.Checkpoint.Advance(ctx, shard, ContractSeq(9)); err != nil {
			return fmt.Errorf("advance: %w", err)
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if st.Watermark != ContractSeq(6) || st.Checkpoint != ContractSeq(9) {
			return fmt.Errorf("watermark %s, checkpoint %s; want %s and %s", st.Watermark, st.Checkpoint, ContractSeq(6), ContractSeq(9))
		}
		states, err := s.Mirror.List(ctx, shard.Group, shard.Stream)
		if err != nil || len(states) != 1 || states[0].Shard != shard || states[0].Watermark != st.Watermark {
			return fmt.Errorf("list: %+v, %v; want the one shard as Get read it", states, err)
		}
		return nil
	}},
	{"a lost span is counted once, and only while the watermark is the one it follows", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		if _, err := s.Mirror.AdvanceWatermark(ctx, shard, ContractSeq(2)); err != nil {
			return fmt.Errorf("advance watermark: %w", err)
		}
		for _, step := range []struct {
			loss     checkpoint.Loss
			advanced bool
		}{
			{checkpoint.Loss{After: ContractSeq(2), To: ContractSeq(6)}, true},
			{checkpoint.Loss{After: ContractSeq(2), To: ContractSeq(6)}, false}, // the same span again
			{checkpoint.Loss{After: ContractSeq(2), To: ContractSeq(8)}, false}, // the watermark has moved on
			{checkpoint.Loss{After: ContractSeq(6), Done: true}, true},          // counted in place
			{checkpoint.Loss{After: ContractSeq(6), Done: true}, false},
		} {
			r, err := s.Mirror.CountLoss(ctx, shard, step.loss)
			if err != nil {
				return fmt.Errorf("count loss %+v: %w", step.loss, err)
			}
			if r.Advanced != step.advanced {
				return fmt.Errorf("count loss %+v: advanced %v, want %v", step.loss, r.Advanced, step.advanced)
			}
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if st.Watermark != ContractSeq(6) || st.LostToRetention != 1 || st.ExpiredUnverified != 1 {
			return fmt.Errorf("watermark %s, lost %d, expired unverified %d; want %s, 1, 1", st.Watermark, st.LostToRetention, st.ExpiredUnverified, ContractSeq(6))
		}
		return nil
	}},
	{"counters only grow", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		for range 2 {
			if err := s.Mirror.AddCounters(ctx, shard, checkpoint.Counters{GapsDetected: 2, Parked: 1, Filtered: 3}); err != nil {
				return fmt.Errorf("add counters: %w", err)
			}
		}
		if err := s.Mirror.AddCounters(ctx, shard, checkpoint.Counters{Parked: -1}); err == nil {
			return errors.New("a negative counter was added")
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if st.GapsDetected != 4 || st.Parked != 2 || st.Filtered != 6 || st.GapsReplayed != 0 {
			return fmt.Errorf("counters %+v, want 4 gaps detected, 2 parked, 6 filtered", st.Counters)
		}
		return nil
	}},
	{"a shard closes at one ending sequence", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		for _, seq := range []int{9, 9} {
			if err := s.Mirror.MarkClosed(ctx, shard, ContractSeq(seq)); err != nil {
				return fmt.Errorf("mark closed at %d: %w", seq, err)
			}
		}
		if err := s.Mirror.MarkClosed(ctx, shard, ContractSeq(10)); !errors.Is(err, checkpoint.ErrConflict) {
			return fmt.Errorf("mark closed at another ending sequence: %v, want checkpoint.ErrConflict", err)
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if !st.Closed || st.EndingSeq != ContractSeq(9) {
			return fmt.Errorf("closed %v at %s, want closed at %s", st.Closed, st.EndingSeq, ContractSeq(9))
		}
		return nil
	}},
	{"lineage and the last verified-as-of are kept, and the first scope start", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		t1, t2 := time.UnixMilli(1_800_000_000_000).UTC(), time.UnixMilli(1_800_000_600_000).UTC()
		parents := []string{"shardId-000000000001", "shardId-000000000002"}
		for _, err := range []error{
			s.Mirror.SetLineage(ctx, shard, parents),
			s.Mirror.SetScopeFrom(ctx, shard, t1), s.Mirror.SetScopeFrom(ctx, shard, t2),
			s.Mirror.SetVerifiedAsOf(ctx, shard, t1), s.Mirror.SetVerifiedAsOf(ctx, shard, t2),
		} {
			if err != nil {
				return err
			}
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if !slices.Equal(st.Parents, parents) || !st.ScopeFrom.Equal(t1) || !st.VerifiedAsOf.Equal(t2) {
			return fmt.Errorf("parents %v, scope from %v, verified as of %v; want %v, %v, %v", st.Parents, st.ScopeFrom, st.VerifiedAsOf, parents, t1, t2)
		}
		return nil
	}},
	{"the progress through empty pages is kept only for the current watermark and only forward", func(ctx context.Context, s Stores, shard recordid.Shard) error {
		if _, err := s.Mirror.AdvanceWatermark(ctx, shard, ContractSeq(3)); err != nil {
			return fmt.Errorf("advance watermark: %w", err)
		}
		t1 := time.UnixMilli(1_800_000_000_000).UTC()
		for _, step := range []struct {
			e    checkpoint.EmptyThrough
			kept bool
		}{
			{checkpoint.EmptyThrough{After: ContractSeq(3), Through: t1}, true},
			{checkpoint.EmptyThrough{After: ContractSeq(3), Through: t1.Add(-time.Minute)}, false}, // backwards
			{checkpoint.EmptyThrough{After: ContractSeq(3), Through: t1}, false},                   // no further
			{checkpoint.EmptyThrough{After: ContractSeq(2), Through: t1.Add(time.Hour)}, false},    // another watermark
		} {
			kept, err := s.Mirror.SetEmptyThrough(ctx, shard, step.e)
			if err != nil {
				return fmt.Errorf("set empty through %+v: %w", step.e, err)
			}
			if kept != step.kept {
				return fmt.Errorf("set empty through %+v: kept %v, want %v", step.e, kept, step.kept)
			}
		}
		st, err := get(ctx, s, shard)
		if err != nil {
			return err
		}
		if at, ok := st.EmptyThroughFor(); !ok || !at.Equal(t1) {
			return fmt.Errorf("empty through %v (%v), want %v", at, ok, t1)
		}
		return nil
	}},
}

func sameReceipt(a, b park.Receipt) bool {
	if (a.PayloadS3 == nil) != (b.PayloadS3 == nil) || a.PayloadS3 != nil && *a.PayloadS3 != *b.PayloadS3 {
		return false
	}
	a.PayloadS3, b.PayloadS3 = nil, nil
	return a == b
}
