package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// commandUnit is a Handler with operator commands over a fake parked queue and a fake stream.
func commandUnit(t *testing.T, q *fakeQueue, sh *memShard) (*Handler, *unit) {
	t.Helper()
	u := newUnit(t, newMemKinesis(sh), Config{})
	newRedriver := func(_ context.Context, cfg RedriveConfig, progress func(RedriveEvent)) (*Redriver, error) {
		p, err := pipeline.New(NewRedriveLedger(&pipelinetest.Ledger{}), &pipelinetest.Checkpoint{}, &pipelinetest.Parker{}, u.rec.process,
			pipeline.Config{MaxRecordAttempts: 2, MaxConcurrency: 1})
		if err != nil {
			return nil, err
		}
		cfg.MaxRecordAttempts, cfg.Backoff = 2, time.Millisecond
		return NewRedriver(q, "https://sqs/parked", u.kin, p, cfg, WithRedriveLogger(discard()), WithRedriveProgress(progress))
	}
	return NewHandler(u.r, nil, discard(), WithCommands(newRedriver, "hold-key")), u
}

func TestCommandRefusals(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 3, time.Now(), key3)
	h, u := commandUnit(t, &fakeQueue{}, sh)
	for _, tc := range []struct{ name, event, want string }{
		{"unknown command", `{"gapless":{"version":1,"command":"purge"}}`, `unknown command "purge"`},
		{"no command", `{"gapless":{"version":1}}`, "no command"},
		{"null", `{"gapless":null}`, "version 0"},
		{"not an object", `{"gapless":"redrive"}`, "not a command object"},
		{"other version", `{"gapless":{"version":2,"command":"redrive"}}`, "version 2, this function reads version 1"},
		{"unknown member", `{"gapless":{"version":1,"command":"redrive","redrive":{"maxMesages":3}}}`, `unknown field "maxMesages"`},
		{"another group", `{"gapless":{"version":1,"command":"redrive","group":"other"}}`, `for group "other"`},
		{"another stream", `{"gapless":{"version":1,"command":"redrive","stream":"other"}}`, `on stream "other"`},
		{"replay without range", `{"gapless":{"version":1,"command":"replay","replay":{"shardId":"shardId-0"}}}`, "needs shardId, from and to"},
		{"both members", `{"gapless":{"version":1,"command":"replay","redrive":{},"replay":{"shardId":"a","from":"1","to":"2"}}}`, "with a redrive member"},
		{"negative", `{"gapless":{"version":1,"command":"redrive","redrive":{"maxMessages":-1}}}`, "want >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h.Handle(context.Background(), json.RawMessage(tc.event))
			if !errors.Is(err, ErrCommand) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Handle(%s) = %v, %v; want an ErrCommand saying %q", tc.event, resp, err, tc.want)
			}
		})
	}
	if n := u.kin.calls["ListShards"] + u.kin.calls["GetShardIterator"]; n != 0 {
		t.Errorf("a refused command read the stream (%d calls): it ran as a scheduled pass", n)
	}
	bare := NewHandler(u.r, nil, discard())
	if _, err := bare.Handle(context.Background(), json.RawMessage(`{"gapless":{"version":1,"command":"redrive"}}`)); !errors.Is(err, ErrCommand) {
		t.Errorf("a handler without WithCommands: %v, want ErrCommand", err)
	}
}

// A replay command replays through the handler's own Reconciler (its pipeline, ON_PARK and
// filter) and reports the range; a redrive command reports every message handled.
func TestCommandRunsHere(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 4, time.Now(), key3)
	q := &fakeQueue{bodies: []string{"not a parked message"}}
	h, u := commandUnit(t, q, sh)
	u.markDone(t, "shardId-0", 0, 3)

	raw, err := h.Handle(context.Background(), json.RawMessage(`{"gapless":{"version":1,"command":"replay","group":"g","stream":"s",`+
		`"replay":{"shardId":"shardId-0","from":"`+fakeSeq(0)+`","to":"`+fakeSeq(3)+`"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	res := raw.(CommandResponse).Gapless
	if !res.Done || res.OnPark != "hold-key" || res.Replay == nil || !res.Replay.Accounted || res.Replay.RecordsVerified != 4 || res.Replay.GapsReplayed != 2 {
		t.Fatalf("replay answer %+v %+v", res, res.Replay)
	}
	if got := u.rec.counts(); len(got) != 2 || got[recordid.ID{ShardID: "shardId-0", Seq: fakeSeq(1)}] != 1 || got[recordid.ID{ShardID: "shardId-0", Seq: fakeSeq(2)}] != 1 {
		t.Errorf("processed %v, want records 1 and 2 once", got)
	}

	raw, err = h.Handle(context.Background(), json.RawMessage(`{"gapless":{"version":1,"command":"redrive"}}`))
	if err != nil {
		t.Fatal(err)
	}
	res = raw.(CommandResponse).Gapless
	if !res.Done || res.Redrive == nil || res.Redrive.Received != 1 || res.Redrive.Invalid != 1 || len(res.Redrive.Events) != 1 ||
		res.Redrive.Events[0].Outcome != string(OutcomeInvalid) || res.Redrive.Events[0].Error == "" {
		t.Fatalf("redrive answer %+v %+v", res, res.Redrive)
	}
	b, err := json.Marshal(raw)
	if err != nil || !strings.HasPrefix(string(b), `{"gapless":{"version":1,"command":"redrive","group":"g","stream":"s","onPark":"hold-key","done":true`) {
		t.Errorf("answer JSON %s, %v", b, err)
	}
}

// A command stops CommandReserve before the invocation's deadline and says it is not done.
func TestCommandBoundedByTheInvocation(t *testing.T) {
	t.Parallel()
	sh := (&memShard{id: "shardId-0"}).addRecords(0, 2, time.Now(), key3)
	h, _ := commandUnit(t, &fakeQueue{bodies: []string{"x"}}, sh)
	ctx, cancel := context.WithTimeout(context.Background(), CommandReserve/2)
	defer cancel()
	raw, err := h.Handle(ctx, json.RawMessage(`{"gapless":{"version":1,"command":"redrive"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if res := raw.(CommandResponse).Gapless; res.Done {
		t.Errorf("answer %+v: done, though the invocation had less time left than the reserve", res)
	}
}
