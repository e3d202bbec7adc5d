package consumer

import (
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// TestBusinessKeyOfAnyLength: with DEDUPE_KEY set, a key value too long for a DynamoDB
// partition key used to fail its claim on every delivery, never counted as an attempt: the
// record and every later record of its partition key were stuck until the stream expired them.
// Now it is claimed (hashed), processed, and its producer retry is skipped as a duplicate.
func TestBusinessKeyOfAnyLength(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "longkey", withConfig(func(c *pipeline.Config) { c.DedupeKey = "id" }))
	long := `{"id":"` + strings.Repeat("x", 3000) + `"}`
	event := mkEvent(t,
		rec{seq: fixtures.Seq(5000), pk: "a", data: []byte(long)},
		rec{seq: fixtures.Seq(5001), pk: "a", data: []byte(long)}, // producer retry
		rec{seq: fixtures.Seq(5002), pk: "a", data: []byte(`{"id":"short"}`)},
	)
	resp, err := r.invoke(t, event)
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("resp %+v err %v: a long business key must not fail its record", resp, err)
	}
	if m := r.lastMetrics(t); m.Values[MetricRecordsProcessed] != 2 || m.Values[MetricDuplicatesSkipped] != 1 || m.Values[MetricRecordsFailed] != 0 {
		t.Errorf("metrics %v", m.Values)
	}
	if r.proc.count(ids(fixtures.Seq(5001))[0]) != 0 {
		t.Error("the producer retry of the long-key record reached the processor")
	}
}
