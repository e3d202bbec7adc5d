package reconcile

import (
	"testing"

	"github.com/gapless-dev/gapless/internal/checkpoint"
)

// A shard without a checkpoint is verified from its start only when it is a child whose every
// parent is verified to its end and closed (this pass, or recorded Closed for a parent gone
// from the stream).
func TestConsumedFromStart(t *testing.T) {
	t.Parallel()
	child := shardInfo{id: "c", parents: []string{"p"}, startingSeq: "100"}
	merged := shardInfo{id: "m", parents: []string{"p", "q"}, startingSeq: "100"}
	tests := []struct {
		name     string
		sh       shardInfo
		st       checkpoint.State
		done     map[string]bool
		inStream map[string]bool
		byShard  map[string]checkpoint.State
		want     bool
	}{
		{"parent verified to its end this pass", child, checkpoint.State{}, map[string]bool{"p": true}, map[string]bool{"p": true}, nil, true},
		{"parent not verified to its end", child, checkpoint.State{}, map[string]bool{"p": false}, map[string]bool{"p": true}, nil, false},
		{"the child has a checkpoint", child, checkpoint.State{Checkpoint: "150"}, map[string]bool{"p": true}, map[string]bool{"p": true}, nil, false},
		{"an original shard", shardInfo{id: "o", startingSeq: "1"}, checkpoint.State{}, nil, nil, nil, false},
		{"no starting sequence number", shardInfo{id: "c", parents: []string{"p"}}, checkpoint.State{}, map[string]bool{"p": true}, map[string]bool{"p": true}, nil, false},
		{"parent gone, recorded closed", child, checkpoint.State{}, nil, nil, map[string]checkpoint.State{"p": {Closed: true}}, true},
		{"parent gone, never closed", child, checkpoint.State{}, nil, nil, map[string]checkpoint.State{"p": {Checkpoint: "5"}}, false},
		{"merge: one parent not done", merged, checkpoint.State{}, map[string]bool{"p": true, "q": false}, map[string]bool{"p": true, "q": true}, nil, false},
		{"merge: both parents done", merged, checkpoint.State{}, map[string]bool{"p": true, "q": true}, map[string]bool{"p": true, "q": true}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := consumedFromStart(tc.sh, tc.st, tc.done, tc.inStream, tc.byShard); got != tc.want {
				t.Fatalf("consumedFromStart = %v, want %v", got, tc.want)
			}
		})
	}
}
