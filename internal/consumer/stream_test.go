package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestConfiguredStream: `sam local generate-event kinesis get-records` prints an eventSourceARN
// that names no stream (arn:aws:kinesis:EXAMPLE). With the stream configured (STREAM_NAME) the
// event is processed as the configured stream's; without it, the batch fails and the log says
// which variable to set. A configured stream that differs from the one the event's ARN names
// is the mapping pointed at the wrong stream: the batch fails, and the reason names both.
func TestConfiguredStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, stream string
		failure            string   // reported identifier, "" for complete success
		processed          int      // records that reach Process
		checkpoint         string   // stream and shard whose checkpoint moves, "" for none
		logs               []string // the log must say these
	}{
		{name: "SAM sample without STREAM_NAME", file: fixtures.SAMSample, failure: fixtures.SAMSequence,
			logs: []string{"arn:aws:kinesis:EXAMPLE", "set STREAM_NAME"}},
		{name: "SAM sample with STREAM_NAME", file: fixtures.SAMSample, stream: "orders",
			processed: 1, checkpoint: "orders/" + fixtures.SAMShard},
		{name: "stream ARN, STREAM_NAME agrees", file: fixtures.Clean, stream: fixtures.Stream,
			processed: 10, checkpoint: fixtures.Stream + "/" + fixtures.Shard},
		{name: "stream ARN, no STREAM_NAME", file: fixtures.Clean,
			processed: 10, checkpoint: fixtures.Stream + "/" + fixtures.Shard},
		{name: "stream ARN, STREAM_NAME differs", file: fixtures.Clean, stream: "orders", failure: fixtures.Seq(0),
			logs: []string{"record of stream " + fixtures.Stream, "STREAM_NAME=orders", "wrong stream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			proc := func(_ context.Context, r pipeline.Record) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, r.ID.String())
				return nil
			}
			cp := &pipelinetest.Checkpoint{}
			p, err := pipeline.New(&pipelinetest.Ledger{}, cp, &pipelinetest.Parker{}, proc,
				pipeline.Config{MaxRecordAttempts: 3, MaxConcurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			h := NewHandler(p, "local", slog.New(slog.NewJSONHandler(&logs, nil)), WithStream(tc.stream))
			resp, err := h.HandleJSON(context.Background(), fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := failureOf(t, resp); got != tc.failure {
				t.Errorf("reported failure %q, want %q\n%s", got, tc.failure, logs.String())
			}
			if len(seen) != tc.processed {
				t.Errorf("Process saw %d records, want %d", len(seen), tc.processed)
			}
			for _, want := range tc.logs {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log does not say %q:\n%s", want, logs.String())
				}
			}
			if tc.checkpoint != "" {
				stream, shard, _ := strings.Cut(tc.checkpoint, "/")
				if cp.Seq(recordid.Shard{Group: "local", Stream: stream, ShardID: shard}) == "" {
					t.Errorf("no checkpoint for %s", tc.checkpoint)
				}
			}
		})
	}
}
