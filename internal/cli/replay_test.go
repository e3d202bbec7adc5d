package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
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

// TestReplayTakesOnParkFromTheFunction: with the function's configuration saying
// ON_PARK=hold-key and nothing about it in the operator's shell or flags, a replay applies no
// record of a held key: the later record of the held key is parked behind its head, the other
// keys' records are forwarded.
func TestReplayTakesOnParkFromTheFunction(t *testing.T) {
	t.Setenv("ON_PARK", "")
	s := newOpsStack(t)
	s.putN(6) // keys k0 k1 k2 k0 k1 k2
	cfg := pipeline.DefaultConfig()
	cfg.MaxRecordAttempts = 1
	p, err := pipeline.New(pipeline.DedupeLedger{L: s.ledger}, pipeline.CheckpointStore{S: s.cps}, park.New(s.sqs, s.parkedURL),
		func(_ context.Context, r pipeline.Record) error {
			if r.PartitionKey == "k0" {
				return fmt.Errorf("downstream rejects it")
			}
			return nil
		}, cfg, pipeline.WithHoldKey(pipeline.HoldStore{H: dedupe.NewHolds(s.ddb, s.ledgerTable)}))
	if err != nil {
		t.Fatal(err)
	}
	b := pipeline.Batch{Shard: recordid.Shard{Group: s.group, Stream: s.stream, ShardID: s.shardID}, Source: pipeline.SourceConsumer}
	for i := range 3 { // records 3-5 never reached the consumer
		b.Records = append(b.Records, pipeline.Record{ID: s.id(i), PartitionKey: fmt.Sprint("k", i%3), Data: s.datas[i], ArrivalTime: time.Now()})
	}
	if res, err := p.Run(context.Background(), b); err != nil || res.Parked != 1 {
		t.Fatalf("consumer: %+v, %v; want record 0 parked, its key held", res, err)
	}
	env := filepath.Join(t.TempDir(), "env.json")
	if err := os.WriteFile(env, []byte(`{"ReconcilerFunction": {"ON_PARK": "hold-key", "MAX_RECORD_ATTEMPTS": "1"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := gapless(t, append([]string{"replay", "--json", "--env", env, "--shard", s.shardID, "--from", s.seqs[3], "--to", s.seqs[5],
		"--target-queue", s.targetURL, "--payload-bucket", s.bucket}, s.args()...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := decodeJSON[replayJSON](t, stdout); !r.Accounted || r.GapsReplayed != 2 {
		t.Errorf("result %+v, want records 4 and 5 replayed", r)
	}
	if !strings.Contains(stderr, "ON_PARK=hold-key") {
		t.Errorf("the progress does not say which ON_PARK ran: %q", stderr)
	}
	got := s.forwarded()
	if _, ok := got[s.id(3).String()]; ok || len(got) != 2 {
		t.Errorf("forwarded %v: want records 4 and 5, not record 3 of the held key k0", got)
	}
	if msgs := s.parked(); len(msgs) != 2 || msgs[1].RecordID != s.id(3).String() && msgs[0].RecordID != s.id(3).String() {
		t.Errorf("parked %+v, want record 0 and record 3 behind it", msgs)
	}
}
