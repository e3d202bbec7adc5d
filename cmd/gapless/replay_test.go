package main

import (
	"strings"
	"testing"
)

type replayJSON struct {
	Accounted       bool `json:"accounted"`
	RecordsVerified int  `json:"records_verified"`
	GapsDetected    int  `json:"gaps_detected"`
	GapsReplayed    int  `json:"gaps_replayed"`
}

func TestReplay(t *testing.T) {
	s := newOpsStack(t)
	s.putN(10)
	s.run(0, 2, false, 5, true)
	s.run(9, 10, false, 5, true)
	args := func(from, to string) []string {
		return append([]string{"replay", "--json", "--shard", s.shardID, "--from", from, "--to", to, "--target-queue", s.targetURL}, s.args()...)
	}

	stdout, stderr, code := gapless(t, args(s.seqs[1], s.seqs[5])...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := decodeJSON[replayJSON](t, stdout); !r.Accounted || r.RecordsVerified != 5 || r.GapsReplayed != 4 {
		t.Errorf("result %+v: want records 1-5 verified, 2-5 replayed", r)
	}
	if !strings.Contains(stderr, "replay "+s.shardID+": invocation 1 of the local reconciler") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	got := s.forwarded()
	if len(got) != 4 {
		t.Errorf("forwarded %d records, want 4: %v", len(got), got)
	}
	for i := 2; i <= 5; i++ {
		if got[s.id(i).String()] != string(s.datas[i]) {
			t.Errorf("record %d: forwarded %q, want %q", i, got[s.id(i).String()], s.datas[i])
		}
	}

	// The same range again: everything is in the ledger now.
	stdout, _, code = gapless(t, args(s.seqs[1], s.seqs[5])...)
	if r := decodeJSON[replayJSON](t, stdout); code != 0 || r.GapsReplayed != 0 || r.RecordsVerified != 5 {
		t.Errorf("second replay: exit %d %+v", code, r)
	}
	if got := s.forwarded(); len(got) != 0 {
		t.Errorf("second replay forwarded %v", got)
	}

	if _, stderr, code := gapless(t, args(s.seqs[5], s.seqs[1])...); code != 1 || !strings.Contains(stderr, "invalid replay range") {
		t.Errorf("reversed range: exit %d %q", code, stderr)
	}
}
