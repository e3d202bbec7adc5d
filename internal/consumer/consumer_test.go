package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestEveryFixture runs the handler on every events/ fixture against the real stores.
func TestEveryFixture(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for _, tc := range []struct {
		file                        string
		failure                     string
		processed, failed, rejected float64
		userRecords                 int
	}{
		{file: fixtures.Clean, processed: 10, userRecords: 10},
		// order-0005 is poison: it fails, customer-2 stops (order-0008 not started).
		{file: fixtures.Poison, failure: fixtures.Seq(fixtures.PoisonIndex), processed: 8, failed: 2, userRecords: 10},
		// 2 plain + 5 user records of the aggregate.
		{file: fixtures.KPL, processed: 7, userRecords: 7},
		// Valid orders 0 and 2 processed; not-base64 (1) and corrupt KPL (5) are failed attempts,
		// and 5 stops its key customer-1, so valid order 6 waits; the leading-zero sequence (3)
		// and the other shard (4) are rejected, which fails the batch from its first record.
		// RecordsFailed counts 1, 5, 6 and the 2 rejected.
		{file: fixtures.Malformed, failure: fixtures.Seq(40), processed: 2, failed: 5, rejected: 2, userRecords: 5},
		{file: fixtures.Redelivered, processed: 7, userRecords: 7},
	} {
		t.Run(tc.file, func(t *testing.T) {
			group := "fixtures-" + strings.TrimSuffix(strings.TrimPrefix(tc.file, "kinesis-"), ".json")
			r := s.rig(t, group)
			resp, err := r.invoke(t, fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := failureOf(t, resp); got != tc.failure {
				t.Errorf("reported failure %q, want %q", got, tc.failure)
			}
			m := r.lastMetrics(t)
			if m.Namespace != "Gapless" || m.Dimensions["Group"] != group {
				t.Errorf("metrics namespace/dimension: %+v", m)
			}
			for name, want := range map[string]float64{
				MetricRecordsProcessed: tc.processed, MetricRecordsFailed: tc.failed, MetricRecordsRejected: tc.rejected,
				MetricDuplicatesSkipped: 0, MetricRecordsParked: 0, MetricLedgerWriteFailures: 0,
			} {
				if m.Values[name] != want {
					t.Errorf("%s = %v, want %v", name, m.Values[name], want)
				}
			}
			if r.proc.total() != int(tc.processed)+strings.Count(tc.file, "poison") {
				t.Errorf("processor saw %d calls", r.proc.total())
			}
			// Every log line is JSON with the request id of the invocation and the group.
			for _, l := range r.logs.jsonLines(t) {
				if l["group"] != group || !strings.HasPrefix(fmt.Sprint(l["request_id"]), "req-") {
					t.Errorf("log line without group/request_id: %v", l)
					break
				}
			}
		})
	}
}

// TestRedeliveryAfterPartialFailure: the clean batch fails at order-0004 (a transient error);
// Lambda redelivers kinesis-redelivered.json (Seq 3..9); what was done is not processed again.
func TestRedeliveryAfterPartialFailure(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "redelivery")
	r.proc.setFail(fixtures.Seq(3))
	resp, err := r.invoke(t, fixture(t, fixtures.Clean))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != fixtures.Seq(fixtures.RedeliveredFrom) {
		t.Fatalf("first invocation reported %q, want %s", got, fixtures.Seq(3))
	}
	// customer-1 holds records 0, 3, 6, 9: 3 failed, so 6 and 9 were not started.
	if m := r.lastMetrics(t); m.Values[MetricRecordsProcessed] != 7 || m.Values[MetricRecordsFailed] != 3 {
		t.Fatalf("first invocation metrics %v", m.Values)
	}
	r.proc.setFail()
	resp, err = r.invoke(t, fixture(t, fixtures.Redelivered))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != "" {
		t.Fatalf("redelivery reported %q", got)
	}
	m := r.lastMetrics(t)
	if m.Values[MetricRecordsProcessed] != 3 || m.Values[MetricDuplicatesSkipped] != 4 {
		t.Errorf("redelivery metrics %v: want 3 processed (3, 6, 9), 4 skipped", m.Values)
	}
	for i := range 10 {
		want := 1
		if i == 3 {
			want = 2 // failed once, then succeeded
		}
		if got := r.proc.count(ids(fixtures.Seq(i))[0]); got != want {
			t.Errorf("record %d processed %d times, want %d", i, got, want)
		}
	}
	st, err := s.checkpoint().Get(context.Background(), shardFor("redelivery"))
	if err != nil || st.Checkpoint != fixtures.Seq(9) {
		t.Errorf("checkpoint = %q (%v), want %s", st.Checkpoint, err, fixtures.Seq(9))
	}
}

// TestOrderWithinKeyUnderConcurrency: 240 records over 24 keys, 8 keys at once; each key's
// records reach the processor in sequence order, each exactly once.
func TestOrderWithinKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "order", withConfig(func(c *pipeline.Config) { c.MaxConcurrency = 8 }))
	r.proc.hook = func(context.Context, pipeline.Record) error {
		time.Sleep(time.Duration(time.Now().UnixNano()%3) * time.Millisecond) // shuffle the lanes' timing
		return nil
	}
	var recs []rec
	for i := range 240 {
		recs = append(recs, rec{seq: fixtures.Seq(1000 + i), pk: fmt.Sprintf("key-%02d", (i*7)%24), data: fixtures.OrderPayload(i)})
	}
	resp, err := r.invoke(t, mkEvent(t, recs...))
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if len(r.proc.order) != 24 {
		t.Fatalf("%d keys", len(r.proc.order))
	}
	for k, got := range r.proc.order {
		if len(got) != 10 || !slices.IsSortedFunc(got, recordid.Compare) {
			t.Errorf("key %s: %d records, order %v", k, len(got), got)
		}
	}
	if r.proc.total() != 240 {
		t.Errorf("%d calls, want 240", r.proc.total())
	}
}

// TestPoisonIsParkedWithItsExactPayload: kinesis-poison.json redelivered the way Lambda does
// until the poison record reaches MAX_RECORD_ATTEMPTS (3 here); it is then parked with its
// exact bytes, counted done, and its key continues.
func TestPoisonIsParkedWithItsExactPayload(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "poison")
	poisonSeq := fixtures.Seq(fixtures.PoisonIndex)
	event := fixture(t, fixtures.Poison)
	for attempt := 1; attempt <= 3; attempt++ {
		resp, err := r.invoke(t, event)
		if err != nil {
			t.Fatal(err)
		}
		got := failureOf(t, resp)
		if attempt < 3 {
			if got != poisonSeq {
				t.Fatalf("attempt %d reported %q, want %s", attempt, got, poisonSeq)
			}
			event = redeliver(t, event, got)
			continue
		}
		if got != "" {
			t.Fatalf("attempt 3 reported %q: the parked record must count as done", got)
		}
	}
	m := r.lastMetrics(t)
	if m.Values[MetricRecordsParked] != 1 || m.Values[MetricRecordsProcessed] != 1 {
		t.Errorf("last invocation metrics %v: want 1 parked and order-0008 processed", m.Values)
	}
	parked := s.receiveParked(t, 1)
	if len(parked) != 1 {
		t.Fatalf("%d parked messages", len(parked))
	}
	p := parked[0]
	if !bytes.Equal(p.Data, fixtures.PoisonPayload(5)) || p.ByRef {
		t.Errorf("parked payload %q, want exactly %q", p.Data, fixtures.PoisonPayload(5))
	}
	if p.Seq != poisonSeq || p.Sub != 0 || p.ShardID != fixtures.Shard || p.Group != "poison" || p.Stream != fixtures.Stream ||
		p.Attempts != 3 || p.PartitionKey != "customer-2" || p.Source != "consumer" || !strings.Contains(p.LastError, "poison") ||
		p.ArrivalTime.IsZero() || p.ParkedAt.IsZero() {
		t.Errorf("parked metadata %+v", p)
	}
	rng, err := s.ledger().Lookup(context.Background(), shardFor("poison"), fixtures.Seq(0), fixtures.Seq(9))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if !rng.Done(ids(fixtures.Seq(i))[0]) {
			t.Errorf("record %d not done in the ledger", i)
		}
	}
	if !rng.Parked(ids(poisonSeq)[0]) {
		t.Error("poison record not marked parked in the ledger")
	}
	st, err := s.checkpoint().Get(context.Background(), shardFor("poison"))
	if err != nil || st.Checkpoint != fixtures.Seq(9) {
		t.Errorf("checkpoint %q (%v): the shard must move past the parked record", st.Checkpoint, err)
	}
}

func TestParkingEdgeCases(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	poisonSeq := fixtures.Seq(fixtures.PoisonIndex)
	t.Run("too large for a message: payload parked in S3", func(t *testing.T) {
		objects := stacktest.S3(t)
		r := s.rig(t, "large", withConfig(func(c *pipeline.Config) { c.MaxRecordAttempts = 1 }),
			withParker(park.New(s.sqs, s.parkedURL, park.WithMaxMessageBytes(4096), park.WithPayloadBucket(objects, stacktest.Bucket(t)))))
		big := fmt.Appendf(nil, `{"poison":true,"pad":%q}`, strings.Repeat("x", 5000))
		resp, err := r.invoke(t, mkEvent(t, rec{seq: poisonSeq, pk: "k", data: big}, rec{seq: fixtures.Seq(5), pk: "k", data: []byte("{}")}))
		if err != nil || failureOf(t, resp) != "" {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		m := r.lastMetrics(t)
		if m.Values[MetricRecordsParked] != 1 || m.Values[MetricRecordsParkedByRef] != 0 {
			t.Errorf("metrics %v", m.Values)
		}
		var found bool
		for _, pm := range s.receiveParked(t, 1) {
			if pm.Seq != poisonSeq || pm.Group != shardFor("large").Group {
				continue
			}
			found = true
			data, err := pm.Payload(context.Background(), objects)
			if pm.PayloadS3 == nil || err != nil || !bytes.Equal(data, big) {
				t.Errorf("parked message %+v: payload %d bytes (%v), want the %d bytes from S3", pm, len(data), err, len(big))
			}
		}
		if !found {
			t.Error("large record not in the parked queue")
		}
		rng, err := s.ledger().Lookup(context.Background(), shardFor("large"), poisonSeq, poisonSeq)
		if err != nil || !rng.Parked(ids(poisonSeq)[0]) || rng.ParkedByRef(ids(poisonSeq)[0]) {
			t.Errorf("ledger must mark the record parked, with its payload (%v)", err)
		}
	})
	t.Run("SQS failure leaves the record failed", func(t *testing.T) {
		proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_SQS"))
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		proxy.SetRules(faultproxy.Rule{Match: faultproxy.Ops("AmazonSQS.SendMessage"), Fault: faultproxy.ServerError, Rate: 1})
		one := func(c *pipeline.Config) { c.MaxRecordAttempts = 1 }
		r := s.rig(t, "parkfail", withConfig(one), withParker(park.New(sqsVia(t, proxy.URL(), 1), s.parkedURL)))
		resp, err := r.invoke(t, fixture(t, fixtures.Poison))
		if err != nil {
			t.Fatal(err)
		}
		if got := failureOf(t, resp); got != poisonSeq {
			t.Fatalf("reported %q, want %s: a record that could not be parked is not done", got, poisonSeq)
		}
		if m := r.lastMetrics(t); m.Values[MetricRecordsParked] != 0 || m.Values[MetricRecordsFailed] != 2 {
			t.Errorf("metrics %v", m.Values)
		}
		// SQS recovers: the redelivery parks it (its attempt count is past the maximum).
		r2 := s.rig(t, "parkfail", withConfig(one))
		resp, err = r2.invoke(t, redeliver(t, fixture(t, fixtures.Poison), poisonSeq))
		if err != nil || failureOf(t, resp) != "" {
			t.Fatalf("after recovery: %+v %v", resp, err)
		}
		if m := r2.lastMetrics(t); m.Values[MetricRecordsParked] != 1 {
			t.Errorf("metrics after recovery %v", m.Values)
		}
	})
}

// TestDeadline: a short invocation deadline and a slow processor. Records that finished are
// recorded; the rest are reported from the lowest not done; the redelivery finishes the batch
// without processing anything twice.
func TestDeadline(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "deadline", withConfig(func(c *pipeline.Config) { c.MaxConcurrency = 1; c.DeadlineMargin = 400 * time.Millisecond }))
	r.proc.hook = func(ctx context.Context, _ pipeline.Record) error {
		select {
		case <-time.After(150 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-deadline"})
	resp, err := r.h.HandleJSON(ctx, fixture(t, fixtures.Clean))
	if err != nil {
		t.Fatal(err)
	}
	failure := failureOf(t, resp)
	if failure == "" {
		t.Fatal("all 10 slow records finished inside the deadline: the test did not exercise the stop")
	}
	first := r.proc.total()
	if first < 1 || first >= 10 {
		t.Fatalf("%d records processed before the deadline stop", first)
	}
	r.proc.hook = nil
	resp, err = r.invoke(t, redeliver(t, fixture(t, fixtures.Clean), failure))
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("redelivery: %+v %v", resp, err)
	}
	for i := range 10 {
		if got := r.proc.count(ids(fixtures.Seq(i))[0]); got > 1 {
			t.Errorf("record %d processed %d times: finished records must have been recorded", i, got)
		}
	}
	if r.proc.total() != 10 {
		t.Errorf("%d records processed in total, want 10", r.proc.total())
	}
}

// TestCorruptKPL: an aggregate whose MD5 is wrong is ONE failed record (sub 0) that does not
// crash the handler, is reported as the lowest failure, and is parked with its raw bytes.
func TestCorruptKPL(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	agg, err := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: "a", Data: []byte("x")}, {PartitionKey: "b", Data: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), agg...)
	agg[len(agg)-1] ^= 0xff // break the MD5 trailer
	event := mkEvent(t,
		rec{seq: fixtures.Seq(2000), pk: "p", data: []byte(`{"id":1}`)},
		rec{seq: fixtures.Seq(2001), pk: "agg", data: agg},
		rec{seq: fixtures.Seq(2002), pk: "q", data: good}, // a sound aggregate: 2 user records
	)
	r := s.rig(t, "kpl", withConfig(func(c *pipeline.Config) { c.MaxRecordAttempts = 2 }))
	resp, err := r.invoke(t, event)
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != fixtures.Seq(2001) {
		t.Fatalf("reported %q, want the corrupt aggregate %s", got, fixtures.Seq(2001))
	}
	if m := r.lastMetrics(t); m.Values[MetricRecordsProcessed] != 3 || m.Values[MetricRecordsFailed] != 1 {
		t.Errorf("metrics %v: want 1 plain + 2 user records processed, the corrupt one failed", m.Values)
	}
	if r.proc.count(recordid.ID{ShardID: fixtures.Shard, Seq: fixtures.Seq(2002), Sub: 1}) != 1 {
		t.Error("user record 1 of the sound aggregate not processed with its sub-index")
	}
	resp, err = r.invoke(t, redeliver(t, event, fixtures.Seq(2001)))
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("second attempt: %+v %v", resp, err)
	}
	parked := s.receiveParked(t, 1)
	if len(parked) != 1 || !bytes.Equal(parked[0].Data, agg) || parked[0].Sub != 0 || !strings.Contains(parked[0].LastError, "corrupt") {
		t.Fatalf("parked %+v, want the raw corrupt aggregate", parked)
	}
}

// TestMalformedData: data that is not base64 (only possible in a hand-made event) is a failed
// record carrying the text as it arrived; the valid records around it are processed.
func TestMalformedData(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	event := []byte(`{"Records":[` +
		rawRecordJSON(fixtures.Seq(3000), "k1", `"eyJpZCI6MX0="`) + `,` +
		rawRecordJSON(fixtures.Seq(3001), "k2", `"%%% not base64 %%%"`) + `,` +
		rawRecordJSON(fixtures.Seq(3002), "k3", `12345`) + `]}`)
	r := s.rig(t, "malformed", withConfig(func(c *pipeline.Config) { c.MaxRecordAttempts = 1 }))
	resp, err := r.invoke(t, event)
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("resp %+v err %v: malformed records are parked at the first attempt here", resp, err)
	}
	if m := r.lastMetrics(t); m.Values[MetricRecordsProcessed] != 1 || m.Values[MetricRecordsParked] != 2 {
		t.Errorf("metrics %v", m.Values)
	}
	parked := s.receiveParked(t, 2)
	got := map[string]string{}
	for _, p := range parked {
		got[p.Seq] = string(p.Data)
	}
	if got[fixtures.Seq(3001)] != "%%% not base64 %%%" || got[fixtures.Seq(3002)] != "12345" {
		t.Errorf("parked payloads %q: want the data exactly as it arrived", got)
	}
	var logged int
	for _, l := range r.logs.jsonLines(t) {
		if strings.Contains(fmt.Sprint(l["msg"]), "malformed record") && l["level"] == "ERROR" {
			logged++
			// The partition key is user data: with payload logging off only its digest is logged.
			if k, ok := l["partition_key"]; ok {
				t.Errorf("malformed-record line carries the partition key %v with payload logging off", k)
			}
			if d := fmt.Sprint(l["partition_key_sha256"]); len(d) != 16 {
				t.Errorf("malformed-record line: partition_key_sha256 %q, want 16 hex digits", d)
			}
		}
	}
	if logged != 2 {
		t.Errorf("%d malformed-record log lines, want 2", logged)
	}
}

func rawRecordJSON(seq, pk, data string) string {
	return fmt.Sprintf(`{"kinesis":{"partitionKey":%q,"sequenceNumber":%q,"data":%s,"approximateArrivalTimestamp":1545084650.987},`+
		`"eventSource":"aws:kinesis","eventID":"%s:%s","eventSourceARN":%q}`, pk, seq, data, fixtures.Shard, seq, fixtures.StreamARN)
}

// TestLedgerWriteFailure: DynamoDB fails the ledger write (through the fault proxy). The handler
// reports the FIRST record so Lambda retries the whole batch, the checkpoint (written in
// parallel) moves anyway, and the retry processes everything again (nothing was recorded, so
// nothing is skipped: the checkpoint does not decide processing).
func TestLedgerWriteFailure(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	proxy, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.SetRules(faultproxy.Rule{
		Match: faultproxy.Ops("DynamoDB_20120810.PutItem", "DynamoDB_20120810.BatchWriteItem"),
		Fault: faultproxy.ServerError, Rate: 1,
	})
	faulty := pipeline.DedupeLedger{L: dedupe.New(dynamoVia(t, proxy.URL(), 2), s.ledgerTable)}
	r := s.rig(t, "ledgerfail", withLedger(faulty))
	resp, err := r.invoke(t, fixture(t, fixtures.Clean))
	if err != nil {
		t.Fatal(err)
	}
	if got := failureOf(t, resp); got != fixtures.Seq(0) {
		t.Fatalf("reported %q, want the first record %s", got, fixtures.Seq(0))
	}
	if m := r.lastMetrics(t); m.Values[MetricLedgerWriteFailures] != 1 || m.Values[MetricRecordsFailed] != 10 || m.Values[MetricRecordsProcessed] != 0 {
		t.Errorf("metrics %v", m.Values)
	}
	if proxy.Stats().Total().Faults() == 0 {
		t.Fatal("the proxy injected nothing")
	}
	// The checkpoint goes out beside the ledger entry (two sequential round trips): it lands
	// although the entry failed. That may only cause a replay, never a skip: the retry below
	// processes every record again.
	if st, err := s.checkpoint().Get(context.Background(), shardFor("ledgerfail")); err != nil || st.Checkpoint != fixtures.Seq(9) {
		t.Errorf("checkpoint %+v %v, want it on the last record %s (written in parallel with the failed entry)", st, err, fixtures.Seq(9))
	}
	r2 := s.rig(t, "ledgerfail", withProcessor(r.proc)) // same business logic, to count duplicates
	resp, err = r2.invoke(t, fixture(t, fixtures.Clean))
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("retry: %+v %v", resp, err)
	}
	for i := range 10 {
		if got := r.proc.count(ids(fixtures.Seq(i))[0]); got != 2 {
			t.Errorf("record %d processed %d times, want 2 (the documented duplicate window)", i, got)
		}
	}
}

// TestCheckpointRaceLost: another writer already moved the checkpoint past this batch. Nothing
// is skipped because of it: every record is processed, the race is only counted.
func TestCheckpointRaceLost(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ahead := fixtures.Seq(500)
	if res, err := s.checkpoint().Advance(context.Background(), shardFor("race"), ahead); err != nil || !res.Advanced {
		t.Fatalf("set up: %+v %v", res, err)
	}
	r := s.rig(t, "race")
	resp, err := r.invoke(t, fixture(t, fixtures.Clean))
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	m := r.lastMetrics(t)
	if m.Values[MetricRecordsProcessed] != 10 || m.Values[MetricDuplicatesSkipped] != 0 || m.Values[MetricCheckpointRacesLost] != 1 {
		t.Errorf("metrics %v", m.Values)
	}
	if r.proc.total() != 10 {
		t.Errorf("%d records processed, want all 10", r.proc.total())
	}
	st, err := s.checkpoint().Get(context.Background(), shardFor("race"))
	if err != nil || st.Checkpoint != ahead {
		t.Errorf("checkpoint %q (%v): it must never move backwards", st.Checkpoint, err)
	}
}

// TestBusinessKeyDedupe: DEDUPE_KEY=id with the real claim store; a producer retry (same id,
// new sequence number) is skipped and counted.
func TestBusinessKeyDedupe(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "bizkey", withConfig(func(c *pipeline.Config) { c.DedupeKey = "id" }))
	event := mkEvent(t,
		rec{seq: fixtures.Seq(4000), pk: "a", data: []byte(`{"id":"order-1"}`)},
		rec{seq: fixtures.Seq(4001), pk: "a", data: []byte(`{"id":"order-1"}`)}, // producer retry
		rec{seq: fixtures.Seq(4002), pk: "a", data: []byte(`{"no":"key"}`)},
	)
	resp, err := r.invoke(t, event)
	if err != nil || failureOf(t, resp) != "" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if m := r.lastMetrics(t); m.Values[MetricRecordsProcessed] != 2 || m.Values[MetricDuplicatesSkipped] != 1 {
		t.Errorf("metrics %v", m.Values)
	}
	if r.proc.count(ids(fixtures.Seq(4001))[0]) != 0 {
		t.Error("the producer retry reached the processor")
	}
}

// TestTypedHandler: Handle (events.KinesisEvent, as the runtime decodes it) agrees with HandleJSON.
func TestTypedHandler(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	r := s.rig(t, "typed")
	var ev events.KinesisEvent
	if err := json.Unmarshal(fixture(t, fixtures.Poison), &ev); err != nil {
		t.Fatal(err)
	}
	resp, err := r.h.Handle(lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "r"}), ev)
	if err != nil || failureOf(t, resp) != fixtures.Seq(fixtures.PoisonIndex) {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}
