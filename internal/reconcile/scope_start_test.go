package reconcile

import (
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
)

// TestStartOf: where the walk of a shard without a checkpoint of its own starts, by starting
// position. Under LATEST the scope start bounds a root, a child and a drained parent, except a
// shard whose parent has a checkpoint of its own (the mapping ran when it was created).
func TestStartOf(t *testing.T) {
	t.Parallel()
	scope := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	consumed := map[string]checkpoint.State{"p": {Checkpoint: "5", Closed: true}}
	closedOnly := map[string]checkpoint.State{"p": {Closed: true}}
	child := shardInfo{id: "c", parents: []string{"p"}, startingSeq: "10"}
	root := shardInfo{id: "r", startingSeq: "1"}
	drainedRoot := shardInfo{id: "r", startingSeq: "1", endingSeq: "9"}
	drainedChild := shardInfo{id: "c", parents: []string{"p"}, startingSeq: "10", endingSeq: "19"}
	tests := []struct {
		name     string
		pos      string
		sh       shardInfo
		st       checkpoint.State
		byShard  map[string]checkpoint.State
		drained  bool
		scope    time.Time
		want     startFrom
		walk     bool
		virtualC string // the checkpoint the walk uses ("" none)
	}{
		{"trim horizon root", StartTrimHorizon, root, checkpoint.State{}, nil, false, time.Time{}, startFrom{trimHorizon: true}, true, "1"},
		{"trim horizon child", StartTrimHorizon, child, checkpoint.State{}, consumed, false, time.Time{}, startFrom{}, true, "10"},
		{"trim horizon drained root", StartTrimHorizon, drainedRoot, checkpoint.State{}, nil, true, time.Time{}, startFrom{}, true, ""},
		{"latest root", StartLatest, root, checkpoint.State{}, nil, false, scope, startFrom{at: scope}, true, "1"},
		{"latest root, scope not recorded", StartLatest, root, checkpoint.State{}, nil, false, time.Time{}, startFrom{}, false, ""},
		{"latest child of a consumed parent", StartLatest, child, checkpoint.State{}, consumed, false, scope, startFrom{}, true, "10"},
		{"latest child of a parent closed unconsumed", StartLatest, child, checkpoint.State{}, closedOnly, false, scope, startFrom{at: scope}, true, "10"},
		{"latest drained root", StartLatest, drainedRoot, checkpoint.State{}, nil, true, scope, startFrom{at: scope}, true, ""},
		{"latest drained root, scope not recorded", StartLatest, drainedRoot, checkpoint.State{}, nil, true, time.Time{}, startFrom{}, false, ""},
		{"latest drained child of a consumed parent", StartLatest, drainedChild, checkpoint.State{}, consumed, true, scope, startFrom{}, true, "10"},
		{"latest shard with a checkpoint", StartLatest, drainedRoot, checkpoint.State{Checkpoint: "3"}, nil, true, scope, startFrom{}, true, "3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(newMemKinesis(), &pipelinetest.Checkpoint{}, nopReplayer{}, Config{Group: "g", Stream: "s", StartingPosition: tc.pos})
			if err != nil {
				t.Fatal(err)
			}
			st := tc.st
			done := map[string]bool{}
			inStream := map[string]bool{}
			from, walk := r.startOf(tc.sh, &st, done, inStream, tc.byShard, tc.drained, tc.scope)
			if walk != tc.walk || (walk && from != tc.want) {
				t.Errorf("startOf = %+v, %v; want %+v, %v", from, walk, tc.want, tc.walk)
			}
			if walk && st.Checkpoint != tc.virtualC {
				t.Errorf("checkpoint %q, want %q", st.Checkpoint, tc.virtualC)
			}
		})
	}
}
