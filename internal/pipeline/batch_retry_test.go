package pipeline_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// A record whose sink entry fails is tried again inside the invocation (alone), up to
// MaxRecordAttempts: a transient failure no longer fails the batch (and spends one of the
// mapping's retries), and a record that always fails is parked by the invocation that met it.
// Either way the ledger counts the invocation's failures of the record (Entry.Failed), so the
// attempts stay counted across invocations.
func TestBatchRetriesFailedRecordsInsideTheInvocation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fail       int // failures of record 2 (-1: always)
		wantCalls  int // sink calls of record 2
		wantParked bool
	}{
		{name: "transient: processed in the same invocation", fail: 1, wantCalls: 2},
		{name: "two transients: processed", fail: 2, wantCalls: 3},
		{name: "always fails: parked at MaxRecordAttempts", fail: -1, wantCalls: 3, wantParked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			s := &sink{fail: map[string]int{seq(2): tc.fail}}
			res, err := e.batchPipeline(t, s, cfg(), 10).Run(context.Background(), batch(4, func(i int) string { return map[bool]string{true: "a", false: "b"}[i <= 2] }))
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed != 0 {
				t.Fatalf("result = %+v: a record failed back to the mapping", res)
			}
			if got := s.tries[seq(2)]; got != tc.wantCalls {
				t.Errorf("record 2 sent %d times, want %d", got, tc.wantCalls)
			}
			first := true
			for _, w := range s.waves {
				if !slices.ContainsFunc(w, func(r pipeline.Record) bool { return r.ID == id(2) }) {
					continue
				}
				if !first && len(w) != 1 {
					t.Errorf("a retry of record 2 shared its call: %d records", len(w))
				}
				first = false
			}
			entries := e.ledger.Entries(shard)
			if len(entries) != 1 || !slices.Contains(entries[0].Failed, id(2)) || !slices.Contains(entries[0].Done, id(2)) {
				t.Fatalf("ledger = %+v, want record 2 done with its failure counted", entries)
			}
			parked := e.parker.Records()
			if tc.wantParked {
				if res.Parked != 1 || len(parked) != 1 || parked[0].ID != id(2) || parked[0].Attempts != cfg().MaxRecordAttempts {
					t.Errorf("parked = %+v, result %+v", parked, res)
				}
				if res.Processed != 3 {
					t.Errorf("processed %d, want 3", res.Processed)
				}
				return
			}
			if res.Processed != 4 || len(parked) != 0 {
				t.Errorf("result = %+v, parked %d", res, len(parked))
			}
		})
	}
}
