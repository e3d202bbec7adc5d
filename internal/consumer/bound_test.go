package consumer

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// craftAggregate is a KPL aggregate of n user records with empty data under key pk, framed by
// hand (kpl.Aggregate refuses more than 1 MiB; a stream whose maximum record size was raised
// holds up to 10 MiB): ~6 bytes a user record, so 1 MiB frames ~175,000 of them.
func craftAggregate(pk string, n int) []byte {
	body := appendField(nil, 1, []byte(pk))
	one := []byte{0x08, 0x00, 0x1a, 0x00} // partition_key_index 0, data ""
	for range n {
		body = appendField(body, 3, one)
	}
	return frameAggregate(body)
}

// craftKeyAggregate is an aggregate of one user record under key, whatever its length.
func craftKeyAggregate(key string, data []byte) []byte {
	r := appendField([]byte{0x08, 0x00}, 3, data)
	return frameAggregate(appendField(appendField(nil, 1, []byte(key)), 3, r))
}

func appendField(b []byte, field uint64, v []byte) []byte {
	b = binary.AppendUvarint(b, field<<3|2)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func frameAggregate(body []byte) []byte {
	sum := md5.Sum(body)
	return append(append(append([]byte(nil), kpl.Magic...), body...), sum[:]...)
}

// heapOf is what f allocates (runtime.MemStats.TotalAlloc only grows, so a collection during f
// hides nothing).
func heapOf(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestOversizedAggregateBuildsNothing: an aggregate of 200,000 tiny user records becomes one
// failed record carrying the aggregate's bytes, and building the batch allocates next to
// nothing (it used to build 200,000 pipeline records: measured in the commit message).
func TestOversizedAggregateBuildsNothing(t *testing.T) {
	agg := craftAggregate("p", 200_000)
	recs := []inRecord{{eventID: fixtures.Shard + ":" + fixtures.Seq(7000), arn: fixtures.StreamARN, seq: fixtures.Seq(7000), pk: "p", data: agg}}
	var pl plan
	heap := heapOf(func() { pl = buildPlan("g", "", recs) })
	t.Logf("aggregate of %d bytes, 200,000 user records: batch of %d records, %d bytes allocated", len(agg), len(pl.batch.Records), heap)
	if len(pl.batch.Records) != 1 || !errors.Is(pl.batch.Records[0].DecodeErr, kpl.ErrTooManyRecords) || !bytes.Equal(pl.batch.Records[0].Data, agg) {
		t.Fatalf("batch of %d records: want one failed record with the aggregate's bytes", len(pl.batch.Records))
	}
	if heap > 256<<10 {
		t.Errorf("building the batch allocated %d bytes, want under 256 KiB", heap)
	}
}

// TestBoundedAggregatesParked: an aggregate over the bound of user records, and one whose key
// table holds a 300-byte partition key, are each parked with the aggregate's raw bytes after
// MAX_RECORD_ATTEMPTS deliveries, never de-aggregated; the plain record after them is
// processed.
func TestBoundedAggregatesParked(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	long := craftKeyAggregate(strings.Repeat("k", 300), []byte("a"))
	for _, c := range []struct {
		name string
		agg  []byte
		want error
	}{
		{"200,000 user records", craftAggregate("p", 200_000), kpl.ErrTooManyRecords},
		{"300-byte partition key", long, kpl.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			bucket := stacktest.Bucket(t)
			r := s.rig(t, "bound-"+c.name[:3],
				withParker(park.New(s.sqs, s.parkedURL, park.WithPayloadBucket(stacktest.S3(t), bucket))))
			event := mkEvent(t,
				rec{seq: fixtures.Seq(7000), pk: "p", data: c.agg},
				rec{seq: fixtures.Seq(7001), pk: "q", data: []byte(`{"n":1}`)},
			)
			for attempt := 1; attempt <= 3; attempt++ {
				resp, err := r.invoke(t, event)
				if err != nil {
					t.Fatal(err)
				}
				got := failureOf(t, resp)
				if attempt < 3 && got != fixtures.Seq(7000) {
					t.Fatalf("attempt %d: reported %q, want the aggregate %s", attempt, got, fixtures.Seq(7000))
				}
				if attempt == 3 && got != "" {
					t.Fatalf("attempt 3: reported %q, want success (the aggregate parked)", got)
				}
			}
			if r.proc.count(recordid.ID{ShardID: fixtures.Shard, Seq: fixtures.Seq(7001)}) != 1 {
				t.Error("the plain record after the aggregate was not processed once")
			}
			if n := r.proc.total(); n != 1 {
				t.Errorf("%d records reached Process, want 1 (no user record of the aggregate)", n)
			}
			msgs := s.receiveParked(t, 1)
			var found bool
			for _, m := range msgs {
				if m.Group != r.group {
					continue
				}
				found = true
				payload, err := m.Payload(context.Background(), stacktest.S3(t))
				if err != nil {
					t.Fatal(err)
				}
				if m.Seq != fixtures.Seq(7000) || m.Sub != 0 || !bytes.Equal(payload, c.agg) {
					t.Errorf("parked %s sub %d, %d bytes: want the aggregate %s sub 0 with its %d raw bytes", m.Seq, m.Sub, len(payload), fixtures.Seq(7000), len(c.agg))
				}
				if !strings.Contains(m.LastError, c.want.Error()) {
					t.Errorf("parked with last error %q, want it to say %q", m.LastError, c.want)
				}
			}
			if !found {
				t.Fatal("the aggregate was not parked")
			}
		})
	}
}

// TestBatchBoundKeepsMarkers: an event whose aggregates together hold more user records than a
// batch may is cut at the aggregate that would pass the bound: the batch's in-flight marker is
// written (with all 12,000 user records in one batch it was not: the marker exceeded the
// ledger's item budget, so a crash there was never counted), the rest is reported failed
// without an attempt and processed on redelivery, and nothing is parked.
func TestBatchBoundKeepsMarkers(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// A 20,000-byte item budget stands for the 350 KiB one: 12,000 user records of one
	// aggregate need ~24,000 bytes of marker; 3,000 need ~6,000.
	ledger := dedupe.New(s.ddb, s.ledgerTable, dedupe.WithMaxItemBytes(20_000))
	r := s.rig(t, "batchbound", withLedger(pipeline.DedupeLedger{L: ledger}))
	r.h.maxUsers = 4_000
	var recs []rec
	for i := range 4 {
		recs = append(recs, rec{seq: fixtures.Seq(8000 + i), pk: "p", data: craftAggregate("p", 3_000)})
	}
	event := mkEvent(t, recs...)
	for i := range 4 {
		resp, err := r.invoke(t, event)
		if err != nil {
			t.Fatal(err)
		}
		m := r.lastMetrics(t)
		if m.Values[MetricMarkerWriteFailures] != 0 {
			t.Fatalf("invocation %d: the in-flight marker was not written (%v)", i, m.Values)
		}
		want := ""
		if i < 3 {
			want = fixtures.Seq(8000 + i + 1)
		}
		if got := failureOf(t, resp); got != want {
			t.Fatalf("invocation %d: reported %q, want %q", i, got, want)
		}
		if want != "" {
			if m.Values[MetricRecordsDeferred] != float64(3-i) || m.Values[MetricRecordsParked] != 0 {
				t.Errorf("invocation %d: metrics %v, want %d deferred, none parked", i, m.Values, 3-i)
			}
			event = redeliver(t, event, want)
		}
	}
	if n := r.proc.total(); n != 12_000 {
		t.Errorf("%d user records processed, want 12,000", n)
	}
}

// TestLargestBatchMarkerFits: the marker of the largest batch the consumer builds with the
// defaults (10,000 Kinesis records, Lambda's largest BatchSize, with sequence numbers as far
// apart as the fixtures', plus aggregates up to DefaultMaxBatchUserRecords user records in all)
// fits the ledger's default item budget.
func TestLargestBatchMarkerFits(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ledger := s.ledger()
	shard := shardFor("markerfits")
	ids := make([]recordid.ID, 0, DefaultMaxBatchUserRecords)
	extra := DefaultMaxBatchUserRecords - 10_000
	for i := range 10_000 {
		seq := fixtures.Seq(100_000 + i*1_000_000) // deltas of 2^80 * 10^6: wider than Kinesis's
		n := 1
		if i < extra/1000 {
			n = 1001 // 40 aggregates of 1,001 user records
		}
		for sub := range n {
			ids = append(ids, recordid.ID{ShardID: shard.ShardID, Seq: seq, Sub: uint32(sub)})
		}
	}
	ids = ids[:min(len(ids), DefaultMaxBatchUserRecords)]
	now := time.Now()
	err := ledger.Mark(context.Background(), shard, dedupe.Marker{
		Nonce: dedupe.NewNonce(), First: ids[0].Seq, Last: ids[len(ids)-1].Seq, IDs: ids,
		Started: now, Deadline: now.Add(time.Minute), Source: dedupe.SourceConsumer,
	})
	if err != nil {
		t.Fatalf("marker of %d user records: %v", len(ids), err)
	}
}
