package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

type statusJSON struct {
	Shards []struct {
		ShardID    string  `json:"shard_id"`
		State      string  `json:"state"`
		Checkpoint string  `json:"checkpoint"`
		Watermark  string  `json:"watermark"`
		LagRecords int     `json:"lag_records"`
		LagSeconds float64 `json:"lag_seconds"`
		Gaps       int     `json:"gaps_pending"`
		InFlight   int     `json:"in_flight"`
		Parked     int     `json:"parked"`
	} `json:"shards"`
	ParkedQueueMessages *int `json:"parked_queue_messages"`
}

func TestStatus(t *testing.T) {
	s := newOpsStack(t)
	s.putN(20)
	s.run(0, 5, false, 5, true)   // the consumer did 0-4 ...
	s.run(15, 20, false, 5, true) // ... and 15-19: checkpoint at 19
	if res := s.run(7, 8, true, 1, false); res.Parked != 1 {
		t.Fatalf("parking record 7: %+v", res) // record 7 is parked
	}

	t.Run("gaps and parked", func(t *testing.T) {
		stdout, stderr, code := gapless(t, append([]string{"status", "--json", "--settle", "0s"}, s.args()...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		st := decodeJSON[statusJSON](t, stdout)
		if len(st.Shards) != 1 {
			t.Fatalf("shards %+v", st.Shards)
		}
		sh := st.Shards[0]
		if sh.State != "open" || sh.Checkpoint != s.seqs[19] || sh.Watermark != "" || sh.LagRecords != 20 || sh.Gaps != 9 || sh.Parked != 1 || sh.InFlight != 0 || sh.LagSeconds <= 0 {
			t.Errorf("shard status %+v: want 20 records of lag, 9 gaps (5-14 but 7), 1 parked", sh)
		}
		if st.ParkedQueueMessages == nil || *st.ParkedQueueMessages != 1 {
			t.Errorf("parked queue messages %v, want 1", st.ParkedQueueMessages)
		}
	})
	t.Run("young records are in flight", func(t *testing.T) {
		stdout, _, _ := gapless(t, append([]string{"status", "--json", "--settle", "1h"}, s.args()...)...)
		if sh := decodeJSON[statusJSON](t, stdout).Shards[0]; sh.Gaps != 0 || sh.InFlight != 9 {
			t.Errorf("gaps %d in flight %d, want 0 and 9", sh.Gaps, sh.InFlight)
		}
	})
	t.Run("table", func(t *testing.T) {
		stdout, _, code := gapless(t, append([]string{"status", "--settle", "0s"}, s.args()...)...)
		if code != 0 || !strings.Contains(stdout, "LAG_RECORDS") || !strings.Contains(stdout, s.shardID) || !strings.Contains(stdout, "parked queue: 1 messages") {
			t.Errorf("table output:\n%s", stdout)
		}
	})
	t.Run("after a reconciler pass", func(t *testing.T) {
		p, err := pipeline.New(pipeline.DedupeLedger{L: s.ledger}, pipeline.CheckpointStore{S: s.cps}, nopParker{},
			func(context.Context, pipeline.Record) error { return nil }, pipeline.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		r, err := reconcile.New(s.kin, s.cps, p, reconcile.Config{Group: s.group, Stream: s.stream, ReadInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		stdout, _, _ := gapless(t, append([]string{"status", "--json", "--settle", "0s"}, s.args()...)...)
		if sh := decodeJSON[statusJSON](t, stdout).Shards[0]; sh.Watermark != s.seqs[19] || sh.LagRecords != 0 || sh.Gaps != 0 || sh.LagSeconds != 0 {
			t.Errorf("after the pass: %+v", sh)
		}
	})
	t.Run("endpoints from stack.env", func(t *testing.T) {
		state := t.TempDir()
		var lines []string
		for _, k := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
			lines = append(lines, "export "+k+"="+os.Getenv(k))
		}
		if err := os.WriteFile(filepath.Join(state, "stack.env"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"} {
			t.Setenv(k, "")
		}
		stdout, stderr, code := gapless(t, append([]string{"status", "--json", "--state", state}, s.args()...)...)
		if code != 0 || !strings.Contains(stderr, "using the local stack in "+filepath.Join(state, "stack.env")) {
			t.Fatalf("exit %d stderr %q", code, stderr)
		}
		if sh := decodeJSON[statusJSON](t, stdout).Shards[0]; sh.Checkpoint != s.seqs[19] {
			t.Errorf("status through stack.env: %+v", sh)
		}
	})
}
