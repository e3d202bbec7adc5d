package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// The planning decisions, one table: what the ledger's view (done records, attempts, the other
// runs' markers) makes of each record before anything runs. The stores are not reached: plan
// is pure, given the view and the clock.

type planView struct {
	done     map[int]bool
	attempts map[int]int
	markers  []MarkerState
}

func (v planView) Done(id recordid.ID) bool    { return v.done[planIndex(id)] }
func (v planView) Attempts(id recordid.ID) int { return v.attempts[planIndex(id)] }
func (v planView) Markers() []MarkerState      { return v.markers }
func planIndex(id recordid.ID) int             { var i int; fmt.Sscanf(id.Seq[len(id.Seq)-4:], "%d", &i); return i }
func planSeq(i int) string {
	return fmt.Sprintf("4959033827149025660855969253836157109592157598900000%04d", i)
}
func planID(i int) recordid.ID { return recordid.ID{ShardID: planShard.ShardID, Seq: planSeq(i)} }
func (nopStores) Lookup(context.Context, recordid.Shard, string, string) (View, error) {
	return nil, nil
}
func (nopStores) Record(context.Context, recordid.Shard, Entry) error  { return nil }
func (nopStores) Mark(context.Context, recordid.Shard, Marker) error   { return nil }
func (nopStores) Unmark(context.Context, recordid.Shard, Marker) error { return nil }
func (nopStores) Advance(context.Context, recordid.Shard, string) (Advance, error) {
	return Advance{}, nil
}
func (nopStores) Park(context.Context, park.Record) (park.Result, error) { return park.Result{}, nil }

type nopStores struct{}

var planShard = recordid.Shard{Group: "g", Stream: "s", ShardID: "shardId-000000000000"}

// planBatch is a batch of records 0..len(keys)-1, record i of partition key keys[i].
func planBatch(source string, keys ...string) Batch {
	b := Batch{Shard: planShard, Source: source}
	for i, k := range keys {
		b.Records = append(b.Records, Record{ID: planID(i), PartitionKey: k, Data: []byte("{}")})
	}
	return b
}

func ids(is ...int) []recordid.ID {
	out := make([]recordid.ID, len(is))
	for k, i := range is {
		out[k] = planID(i)
	}
	return out
}

func kindNames(ks []planKind) []string {
	names := map[planKind]string{planRun: "run", planSkip: "skip", planHeld: "held", planIsolated: "isolated", planDead: "dead", planHoldKey: "hold-key"}
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = names[k]
	}
	return out
}

func TestPlanDecisions(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	earlierStart, laterStart := now.Add(-5*time.Second), now.Add(5*time.Second)
	live, dead := now.Add(5*time.Second), now.Add(-DeadGrace-time.Second) // deadlines
	mark := func(nonce string, started, deadline time.Time, size int, named ...int) MarkerState {
		return MarkerState{Marker: Marker{Nonce: nonce, First: planSeq(0), Last: planSeq(9), IDs: ids(named...), Started: started, Deadline: deadline, Source: SourceConsumer}, Size: size}
	}
	for _, tc := range []struct {
		name   string
		batch  Batch
		view   planView
		mine   Marker // IDs default to the whole batch
		want   []string
		window int
		narrow []recordid.ID // nil: not narrowed
		dead   int
		ended  int
	}{
		{name: "nothing known: every record runs",
			batch: planBatch(SourceConsumer, "a", "b", "a"),
			want:  []string{"run", "run", "run"}},
		{name: "records done by anyone are skipped, and not named by the marker",
			batch: planBatch(SourceConsumer, "a", "b", "a"),
			view:  planView{done: map[int]bool{1: true}},
			want:  []string{"run", "skip", "run"}},
		{name: "an earlier live marker holds what it names and the later records of their keys",
			batch:  planBatch(SourceReconciler, "a", "b", "a", "c"),
			view:   planView{markers: []MarkerState{mark("other", earlierStart, live, 1, 0)}},
			mine:   Marker{Nonce: "mine", Started: now, Source: SourceReconciler},
			want:   []string{"held", "run", "held", "run"},
			narrow: ids(1, 3)},
		{name: "a live marker that started after this run yields to it",
			batch: planBatch(SourceReconciler, "a", "b"),
			view:  planView{markers: []MarkerState{mark("other", laterStart, live, 1, 0)}},
			mine:  Marker{Nonce: "mine", Started: now, Source: SourceReconciler},
			want:  []string{"run", "run"}},
		{name: "a completed marker holds nothing",
			batch: planBatch(SourceReconciler, "a", "b"),
			view: planView{markers: []MarkerState{func() MarkerState {
				m := mark("other", earlierStart, live, 1, 0)
				m.Completed = true
				return m
			}()}},
			mine: Marker{Nonce: "mine", Started: now, Source: SourceReconciler},
			want: []string{"run", "run"}},
		{name: "a dead marker naming one record alone is an attempt: at the last one the record is parked without running",
			batch: planBatch(SourceConsumer, "a", "b", "c"),
			view:  planView{attempts: map[int]int{1: 4}, markers: []MarkerState{mark("d1", earlierStart, dead, 1, 1)}},
			want:  []string{"run", "dead", "run"},
			dead:  1},
		{name: "the head died in a run of four: only half of it runs, the rest waits isolated",
			batch:  planBatch(SourceConsumer, "a", "b", "c", "d", "e"),
			view:   planView{markers: []MarkerState{mark("d1", earlierStart, dead, 4, 0, 1, 2, 3)}},
			want:   []string{"run", "run", "isolated", "isolated", "isolated"},
			window: 2, narrow: ids(0, 1), dead: 1},
		{name: "a lone killer behind the isolation window is parked in key order, once the window reaches it",
			batch:  planBatch(SourceConsumer, "a", "b", "c", "d"),
			view:   planView{attempts: map[int]int{3: 4}, markers: []MarkerState{mark("d1", earlierStart, dead, 2, 0, 1), mark("d2", earlierStart, dead, 1, 3)}},
			want:   []string{"run", "isolated", "isolated", "isolated"},
			window: 1, narrow: ids(0), dead: 2},
		{name: "a live marker of the same batch stream that started first has ended: its lane moved on",
			batch: planBatch(SourceConsumer, "a", "b"),
			view:  planView{markers: []MarkerState{mark("gone", earlierStart, live, 1, 1)}},
			mine:  Marker{Nonce: "mine", First: planSeq(0), Last: planSeq(1), Started: now, Source: SourceConsumer},
			want:  []string{"run", "run"},
			dead:  1, ended: 1},
		{name: "a replay leaves the records of a mapping run's batch to the mapping until it settled",
			batch: func() Batch {
				b := planBatch(SourceReconciler, "a", "b", "c")
				b.MappingSettled = now.Add(-time.Minute)
				return b
			}(),
			view:   planView{markers: []MarkerState{func() MarkerState { m := mark("mapping", earlierStart, live, 1, 0); m.Last = planSeq(1); return m }()}},
			mine:   Marker{Nonce: "mine", Started: now, Source: SourceReconciler},
			want:   []string{"held", "held", "run"},
			narrow: ids(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(nopStores{}, nopStores{}, nopStores{}, func(context.Context, Record) error { return nil }, DefaultConfig(), WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			mine := tc.mine
			if mine.Nonce == "" {
				mine = Marker{Nonce: "mine", First: planSeq(0), Last: planSeq(len(tc.batch.Records) - 1), Started: now, Source: tc.batch.Source}
			}
			if mine.IDs == nil {
				mine.IDs = batchIDs(&tc.batch)
			}
			pl := p.plan(&tc.batch, tc.view, mine)
			if got := kindNames(pl.kinds); !slices.Equal(got, tc.want) {
				t.Errorf("kinds %v, want %v", got, tc.want)
			}
			if pl.window != tc.window || pl.dead != tc.dead || pl.ended != tc.ended {
				t.Errorf("window %d, dead markers %d (ended %d); want %d, %d (%d)", pl.window, pl.dead, pl.ended, tc.window, tc.dead, tc.ended)
			}
			if !slices.Equal(pl.narrow, tc.narrow) || (pl.narrow == nil) != (tc.narrow == nil) {
				t.Errorf("marker narrowed to %v, want %v", pl.narrow, tc.narrow)
			}
		})
	}
}
