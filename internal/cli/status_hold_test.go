package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

type statusHoldsJSON struct {
	Holds *struct {
		HeldKeys int  `json:"held_keys"`
		Complete bool `json:"complete"`
		Scanned  int  `json:"ledger_items_scanned"`
		Keys     []struct {
			Key     string `json:"key"`
			Hashed  bool   `json:"hashed"`
			Head    string `json:"head"`
			Held    int    `json:"held"`
			Applied int    `json:"applied"`
		} `json:"keys"`
	} `json:"holds"`
}

// TestStatusHeldKeys: with ON_PARK=hold-key, status lists the group's held keys with their head
// record, from the hold the pipeline wrote when it parked a record (and the later record of the
// key parked behind it); another group's hold is not counted.
func TestStatusHeldKeys(t *testing.T) {
	s := newOpsStack(t)
	s.putN(6) // keys k0 k1 k2 k0 k1 k2
	holds := dedupe.NewHolds(s.ddb, s.ledgerTable)
	cfg := pipeline.DefaultConfig()
	cfg.MaxRecordAttempts = 1
	proc := func(_ context.Context, r pipeline.Record) error {
		if r.PartitionKey == "k0" {
			return fmt.Errorf("downstream rejects it")
		}
		return nil
	}
	p, err := pipeline.New(pipeline.DedupeLedger{L: s.ledger}, pipeline.CheckpointStore{S: s.cps}, park.New(s.sqs, s.parkedURL), proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: holds}))
	if err != nil {
		t.Fatal(err)
	}
	b := pipeline.Batch{Shard: recordid.Shard{Group: s.group, Stream: s.stream, ShardID: s.shardID}, Source: pipeline.SourceConsumer, AdvanceCheckpoint: true}
	for i := range 6 {
		b.Records = append(b.Records, pipeline.Record{ID: s.id(i), PartitionKey: fmt.Sprint("k", i%3), Data: s.datas[i], ArrivalTime: time.Now()})
	}
	if res, err := p.Run(context.Background(), b); err != nil || res.Parked != 2 || res.HeldParked != 1 {
		t.Fatalf("run: %+v, %v; want record 0 parked and record 3 parked behind it", res, err)
	}
	if _, err := holds.Hold(context.Background(), "other-group", "k1", []recordid.ID{s.id(1)}, true); err != nil {
		t.Fatal(err)
	}

	t.Run("json", func(t *testing.T) {
		stdout, stderr, code := gapless(t, append([]string{"status", "--json", "--on-park", "hold-key"}, s.args()...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		h := decodeJSON[statusHoldsJSON](t, stdout).Holds
		if h == nil || h.HeldKeys != 1 || !h.Complete || len(h.Keys) != 1 {
			t.Fatalf("holds %+v, want one held key", h)
		}
		if k := h.Keys[0]; k.Key != "k0" || k.Hashed || k.Head != s.id(0).String() || k.Held != 2 || k.Applied != 0 {
			t.Errorf("held key %+v, want k0 held by %s with 2 records", k, s.id(0))
		}
	})
	t.Run("continue lists none", func(t *testing.T) {
		stdout, _, code := gapless(t, append([]string{"status", "--json", "--on-park", "continue"}, s.args()...)...)
		if h := decodeJSON[statusHoldsJSON](t, stdout).Holds; code != 0 || h != nil {
			t.Errorf("exit %d, holds %+v without hold-key", code, h)
		}
	})
	t.Run("table", func(t *testing.T) {
		t.Setenv("ON_PARK", "hold-key")
		stdout, stderr, code := gapless(t, append([]string{"status"}, s.args()...)...)
		if code != 0 || !strings.Contains(stdout, "HELD_KEYS 1 (") {
			t.Errorf("exit %d, table output:\n%s%s", code, stdout, stderr)
		}
	})
	t.Run("scan bounded", func(t *testing.T) {
		stdout, _, code := gapless(t, append([]string{"status", "--on-park", "hold-key", "--max-hold-scan", "1"}, s.args()...)...)
		if code != 0 || !strings.Contains(stdout, "HELD_KEYS >=") || !strings.Contains(stdout, "--max-hold-scan") {
			t.Errorf("exit %d, table output:\n%s", code, stdout)
		}
	})
	t.Run("bad on-park", func(t *testing.T) {
		if _, stderr, code := gapless(t, append([]string{"status", "--on-park", "hold"}, s.args()...)...); code == 0 || !strings.Contains(stderr, "--on-park") {
			t.Errorf("exit %d: %s", code, stderr)
		}
	})
}
