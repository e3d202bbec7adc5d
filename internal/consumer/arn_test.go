package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestStreamARN: with the stream's full ARN configured (STREAM_ARN), a record whose
// eventSourceARN names another stream — a same-named stream in another account or region
// included — is not the group's: it never reaches Process, the ledger or the checkpoint mirror
// (its shard id and sequence number could be one of the group's own records), and it does not
// fail the batch (no retry can make it the group's record; failing would only hold the shard
// of whoever sent it). The group's own records of the event are processed as usual.
func TestStreamARN(t *testing.T) {
	t.Parallel()
	otherAccount := strings.Replace(fixtures.StreamARN, fixtures.Account, "999999999999", 1)
	otherRegion := strings.Replace(fixtures.StreamARN, fixtures.Region, "eu-west-1", 1)
	for _, tc := range []struct {
		name       string
		eventARN   func(i int) string // the eventSourceARN of record i
		processed  int
		refused    int
		checkpoint bool
	}{
		{name: "own stream", eventARN: func(int) string { return fixtures.StreamARN }, processed: 10, checkpoint: true},
		{name: "own stream through an enhanced fan-out consumer", eventARN: func(int) string { return fixtures.StreamARN + "/consumer/c:1" },
			processed: 10, checkpoint: true},
		{name: "same name, another account", eventARN: func(int) string { return otherAccount }, refused: 10},
		{name: "same name, another region", eventARN: func(int) string { return otherRegion }, refused: 10},
		{name: "mixed", eventARN: func(i int) string {
			if i%2 == 1 {
				return otherAccount
			}
			return fixtures.StreamARN
		}, processed: 5, refused: 5, checkpoint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ev events.KinesisEvent
			if err := json.Unmarshal(fixture(t, fixtures.Clean), &ev); err != nil {
				t.Fatal(err)
			}
			for i := range ev.Records {
				ev.Records[i].EventSourceArn = tc.eventARN(i)
			}
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			seen := 0
			proc := func(context.Context, pipeline.Record) error {
				mu.Lock()
				defer mu.Unlock()
				seen++
				return nil
			}
			ledger, cp := &pipelinetest.Ledger{}, &pipelinetest.Checkpoint{}
			p, err := pipeline.New(ledger, cp, &pipelinetest.Parker{}, proc, pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			h := NewHandler(p, "local", slog.New(slog.NewJSONHandler(&logs, nil)), WithStream(fixtures.Stream), WithStreamARN(fixtures.StreamARN))
			resp, err := h.HandleJSON(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := failureOf(t, resp); got != "" {
				t.Errorf("reported failure %q, want none\n%s", got, logs.String())
			}
			if seen != tc.processed {
				t.Errorf("Process saw %d records, want %d", seen, tc.processed)
			}
			shard := recordid.Shard{Group: "local", Stream: fixtures.Stream, ShardID: fixtures.Shard}
			if n := len(ledger.Entries(shard)); (n > 0) != (tc.processed > 0) {
				t.Errorf("%d ledger entries, want entries only for the group's own records", n)
			}
			for _, e := range ledger.Entries(shard) {
				for _, id := range e.Done {
					if id.Seq == fixtures.Seq(1) && tc.refused > 0 {
						t.Errorf("ledger holds %s, a record of another stream", id)
					}
				}
			}
			if got := cp.Seq(shard) != ""; got != tc.checkpoint {
				t.Errorf("checkpoint moved %v, want %v", got, tc.checkpoint)
			}
			if n := strings.Count(logs.String(), "record of another stream refused"); (n > 0) != (tc.refused > 0) {
				t.Errorf("%d refusal lines for %d refused records:\n%s", n, tc.refused, logs.String())
			}
		})
	}
}
