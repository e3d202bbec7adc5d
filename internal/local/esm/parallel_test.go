package esm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// keysCoveringLanes returns perLane keys for each of n lanes.
func keysCoveringLanes(n, perLane int) []string {
	count := make([]int, n)
	var keys []string
	for i := 0; len(keys) < n*perLane; i++ {
		k := fmt.Sprintf("key-%d", i)
		if l := LaneOf(k, n); count[l] < perLane {
			count[l]++
			keys = append(keys, k)
		}
	}
	return keys
}

func TestParallelizationFactor(t *testing.T) {
	t.Parallel()
	const factor = 3
	s := newStream(t, 1)
	keys := keysCoveringLanes(factor, 2)
	puts := s.putN(t, 36, keys...)
	cfg := baseConfig(s)
	cfg.ParallelizationFactor = factor
	cfg.BatchSize = 4

	// Every lane's first invocation waits until all lanes are inside an invocation at once: if
	// lanes ran one after another this barrier would never open.
	var arrived sync.WaitGroup
	arrived.Add(factor)
	allIn := make(chan struct{})
	go func() { arrived.Wait(); close(allIn) }()
	r := newRecorder(t, func(ctx context.Context, inv invocation, n int) ([]byte, error) {
		if n == 0 {
			arrived.Done()
			select {
			case <-allIn:
			case <-time.After(20 * time.Second):
				return nil, fmt.Errorf("lanes did not run concurrently")
			}
		}
		return nil, nil
	})
	m, log := drain(t, s, nil, r, cfg)
	if errs := log.all(EventFunctionError); len(errs) > 0 {
		t.Fatalf("function errors: %v", errs[0].Err)
	}

	keyLane := map[string]int{}
	perLane := map[int][]string{}
	for _, c := range r.invocations() {
		if len(c.event.Records) > cfg.BatchSize {
			t.Fatalf("batch of %d > BatchSize", len(c.event.Records))
		}
		for _, rec := range c.event.Records {
			k := rec.Kinesis.PartitionKey
			if l, ok := keyLane[k]; ok && l != c.lane {
				t.Fatalf("key %s went to lanes %d and %d", k, l, c.lane)
			}
			keyLane[k] = c.lane
			if want := LaneOf(k, factor); c.lane != want {
				t.Fatalf("key %s on lane %d, want lane %d (MD5 mod factor)", k, c.lane, want)
			}
			perLane[c.lane] = append(perLane[c.lane], rec.Kinesis.SequenceNumber)
		}
	}
	// Each lane sees its records once, in shard order; together they are the whole shard.
	var all []string
	for l := range factor {
		seqs := perLane[l]
		if !slices.Equal(seqs, sortedSeqs(seqs)) {
			t.Fatalf("lane %d out of order: %v", l, seqs)
		}
		all = append(all, seqs...)
		if cp := m.Checkpoints()[puts[0].shard][l]; cp != seqs[len(seqs)-1] {
			t.Fatalf("lane %d checkpoint %s, want its last record %s", l, cp, seqs[len(seqs)-1])
		}
	}
	if got := sortedSeqs(all); !slices.Equal(got, seqsOf(puts)) {
		t.Fatalf("lanes delivered %d records, want each of %d once", len(all), len(puts))
	}
	// Per partition key, order is the write order.
	for _, k := range keys {
		var want, got []string
		for _, p := range puts {
			if p.key == k {
				want = append(want, p.seq)
			}
		}
		for _, q := range perLane[LaneOf(k, factor)] {
			if slices.Contains(want, q) {
				got = append(got, q)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("key %s delivered %v, want %v", k, got, want)
		}
	}
}
