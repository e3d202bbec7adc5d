package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/metrics"

	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// parkedMessages receives every message of a parked queue without deleting it, then makes
// them visible again.
func parkedMessages(t *testing.T, client *sqs.Client, url string) []park.Message {
	t.Helper()
	var out []park.Message
	var handles []*string
	for empty := 0; empty < 2; {
		o, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60})
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range o.Messages {
			pm, err := park.Decode(aws.ToString(m.Body))
			if err != nil {
				t.Fatalf("parked message: %v", err)
			}
			out = append(out, pm)
			handles = append(handles, m.ReceiptHandle)
		}
	}
	for _, h := range handles {
		if _, err := client.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
			ReceiptHandle: h, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// receiptsOf reads the ledger's recorded parks of id.
func receiptsOf(t *testing.T, ledger pipeline.Ledger, shard recordid.Shard, id recordid.ID) []park.Receipt {
	t.Helper()
	v, err := ledger.Lookup(context.Background(), shard, id.Seq, id.Seq)
	if err != nil {
		t.Fatal(err)
	}
	pv, ok := v.(pipeline.ParkView)
	if !ok {
		t.Fatalf("the ledger's view %T does not tell parks", v)
	}
	return pv.ParkReceipts(id)
}

// TestParkIsRecordedInTheLedger: every park the pipeline makes (a failed record inline, a
// large one through the payload bucket, one parked behind its held key) is recorded in the
// ledger entry that counts the record done, and the recorded park confirms exactly the message
// in the parked queue. Before, the ledger knew only that the id was parked: nothing a redrive
// could check a message against.
func TestParkIsRecordedInTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	objects, bucket := stacktest.S3(t), stacktest.Bucket(t)
	parker := park.New(hs.sqs, hs.url, park.WithPayloadBucket(objects, bucket), park.WithMaxMessageBytes(4096))
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	fail := func(context.Context, pipeline.Record) error { return errors.New("downstream rejects it") }
	p, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, parker, fail, pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2},
		pipeline.WithHoldKey(pipeline.HoldStore{H: hs.holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 10_000)
	for i := range big {
		big[i] = byte(i)
	}
	recs := []pipeline.Record{
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(1)}, PartitionKey: "K", Data: []byte("head of K"), ArrivalTime: time.Now()},
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(2)}, PartitionKey: "K", Data: []byte("behind the head"), ArrivalTime: time.Now()},
		{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(3)}, PartitionKey: "L", Data: big, ArrivalTime: time.Now()},
	}
	res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if res.Parked != 3 || res.HeldParked != 1 {
		t.Fatalf("result %+v, want 3 parked, 1 behind its held key", res)
	}
	msgs := parkedMessages(t, hs.sqs, hs.url)
	if len(msgs) != 3 {
		t.Fatalf("%d parked messages, want 3", len(msgs))
	}
	inS3 := 0
	for _, m := range msgs {
		id, _ := m.ID()
		rs := receiptsOf(t, hs.ledger, shard, id)
		if len(rs) != 1 {
			t.Fatalf("record %s: the ledger records %d parks, want 1", id, len(rs))
		}
		if err := rs[0].Confirms(m); err != nil {
			t.Errorf("record %s: the recorded park does not confirm its message: %v", id, err)
		}
		if m.PayloadS3 != nil {
			inS3++
			if rs[0].PayloadS3 == nil || rs[0].PayloadS3.Bucket != bucket {
				t.Errorf("record %s: recorded payload location %+v", id, rs[0].PayloadS3)
			}
		}
	}
	if inS3 != 1 {
		t.Fatalf("%d payloads in S3, want 1", inS3)
	}
}

// sendForged sends m, as a forger with only sqs:SendMessage on the parked queue would: a
// well-formed parked message whose SHA-256 matches the payload it carries.
func sendForged(t *testing.T, client *sqs.Client, url string, m park.Message) {
	t.Helper()
	if m.Data == nil {
		m.Data = []byte{}
	}
	if m.PayloadS3 == nil {
		sum := sha256.Sum256(m.Data)
		m.DataBytes, m.DataSHA256 = len(m.Data), hex.EncodeToString(sum[:])
	}
	if m.Version == 0 {
		m.Version = 2
	}
	id, err := recordid.Parse(m.RecordID)
	if err != nil {
		t.Fatal(err)
	}
	m.ShardID, m.Seq, m.Sub = id.ShardID, id.Seq, id.Sub
	m.Group, m.Stream, m.Source, m.ParkedAt = ugroup, ustream, pipeline.SourceConsumer, time.Now().Add(-time.Minute)
	if m.ParkID == "" {
		m.ParkID = "f0f0f0f0f0f0f0f0"
	}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(body))}); err != nil {
		t.Fatal(err)
	}
}

// countingObjects counts GetObject calls per bucket.
type countingObjects struct {
	park.GetObjectAPI
	mu   sync.Mutex
	gets map[string]int
}

func (c *countingObjects) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	c.mu.Lock()
	c.gets[aws.ToString(in.Bucket)]++
	c.mu.Unlock()
	return c.GetObjectAPI.GetObject(ctx, in, opts...)
}

type metricSink struct {
	mu sync.Mutex
	ms []metrics.Metric
}

func (s *metricSink) Emit(ms ...metrics.Metric) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ms = append(s.ms, ms...)
	return nil
}

func (s *metricSink) sum(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n float64
	for _, m := range s.ms {
		if m.Name == name {
			n += m.Value
		}
	}
	return n
}

// payloadsSeen is a ProcessFunc that fails until fixed and records every payload it applied.
type payloadsSeen struct {
	mu      sync.Mutex
	fixed   bool
	applied map[recordid.ID][]string
}

func (p *payloadsSeen) process(_ context.Context, r pipeline.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fixed {
		return errors.New("downstream rejects it")
	}
	if p.applied == nil {
		p.applied = map[recordid.ID][]string{}
	}
	p.applied[r.ID] = append(p.applied[r.ID], string(r.Data))
	return nil
}

func (p *payloadsSeen) of(id recordid.ID) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.applied[id])
}

func (p *payloadsSeen) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.applied {
		n += len(v)
	}
	return n
}

// TestRedriveRefusesForgedParkedMessages: a forger who can only send to the parked queue sends
// well-formed messages with valid digests: one naming a real parked record with other data,
// one with a made-up record id, one with the real record's park id and payload but another
// partition key, one naming a payload object in a foreign bucket, one claiming a payload above
// any record's. Before, redrive applied the forged data, marked the real record done, and the
// real payload was skipped as a duplicate; the foreign object was read. Now the real payload
// reaches Process exactly once, no forged one ever, the foreign object is never read, and each
// forged message is refused, counted (ParkedRefused) and left in the queue.
func TestRedriveRefusesForgedParkedMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	s3c, bucket, foreign := stacktest.S3(t), stacktest.Bucket(t), stacktest.Bucket(t)
	objects := &countingObjects{GetObjectAPI: s3c, gets: map[string]int{}}
	parker := park.New(hs.sqs, hs.url, park.WithPayloadBucket(s3c, bucket))
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	real := pipeline.Record{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(1)}, PartitionKey: "K", Data: []byte("the real order"), ArrivalTime: time.Now()}
	seen := &payloadsSeen{}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2}
	p, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, parker, seen.process, cfg, pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: []pipeline.Record{real}}); err != nil || res.Parked != 1 {
		t.Fatalf("consumer run: %+v %v", res, err)
	}
	realMsg := parkedMessages(t, hs.sqs, hs.url)
	if len(realMsg) != 1 {
		t.Fatalf("%d parked messages, want 1", len(realMsg))
	}
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(foreign), Key: aws.String("secret"), Body: strings.NewReader("not yours")}); err != nil {
		t.Fatal(err)
	}
	madeUp := recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(99)}
	forged := []park.Message{
		{RecordID: real.ID.String(), PartitionKey: "K", Data: []byte("forged order"), ParkID: "0123456789abcdef"},
		{RecordID: madeUp.String(), PartitionKey: "K", Data: []byte("never on the stream")},
		{RecordID: real.ID.String(), PartitionKey: "another key", Data: real.Data, ParkID: realMsg[0].ParkID},
		{RecordID: real.ID.String(), PartitionKey: "K", ParkID: realMsg[0].ParkID, PayloadS3: &park.Pointer{Bucket: foreign, Key: "secret"},
			DataBytes: 9, DataSHA256: sha256Hex([]byte("not yours"))},
		{RecordID: real.ID.String(), PartitionKey: "K", ParkID: realMsg[0].ParkID, PayloadS3: &park.Pointer{Bucket: bucket, Key: "parked/x"},
			DataBytes: park.MaxRecordBytes + 1, DataSHA256: sha256Hex(nil)},
	}
	for _, m := range forged {
		sendForged(t, hs.sqs, hs.url, m)
	}

	seen.mu.Lock()
	seen.fixed = true
	seen.mu.Unlock()
	sink := &metricSink{}
	rp, err := pipeline.New(NewRedriveLedger(hs.ledger), &pipelinetest.Checkpoint{}, parker, seen.process, cfg, pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reasons := map[string]int{}
	d, err := NewRedriver(hs.sqs, hs.url, newMemKinesis(), rp, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1,
		Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second}, WithRedriveLogger(discard()), WithRedrivePayloads(objects),
		WithRedrivePayloadBucket(bucket), WithRedriveMetrics(sink), WithRedriveProgress(func(ev RedriveEvent) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Outcome == OutcomeRefused && ev.RecordID != "" && ev.Err != nil {
				reasons[ev.RecordID]++
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The real record's retry on the stream (the consumer or the reconciler) comes after.
	if _, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceReconciler, Records: []pipeline.Record{real}}); err != nil {
		t.Fatal(err)
	}
	if got := seen.of(real.ID); !slices.Equal(got, []string{string(real.Data)}) {
		t.Fatalf("record %s applied with %q, want the real payload exactly once", real.ID, got)
	}
	if got := seen.of(madeUp); len(got) != 0 {
		t.Fatalf("a made-up record id was applied: %q", got)
	}
	if objects.gets[foreign] != 0 {
		t.Fatalf("the foreign payload object was read %d times", objects.gets[foreign])
	}
	if rep.Refused != len(forged) || rep.Processed != 1 {
		t.Fatalf("report %+v, want %d refused and the real record processed", rep, len(forged))
	}
	if n := sink.sum(MetricParkedRefused); n != float64(len(forged)) {
		t.Fatalf("ParkedRefused %v, want %d", n, len(forged))
	}
	if reasons[real.ID.String()] != len(forged)-1 || reasons[madeUp.String()] != 1 {
		t.Fatalf("refusals reported by id: %v", reasons)
	}
	if left := drainParked(t, hs.sqs, hs.url); len(left) != len(forged) {
		t.Fatalf("%d messages left in the queue, want the %d refused ones", len(left), len(forged))
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// parkRecorded parks r through parker and records the park in ledger as the pipeline does (the
// entry counting r done holds the park's receipt), so a redrive can confirm its message.
func parkRecorded(t *testing.T, parker pipeline.Parker, ledger pipeline.Ledger, r park.Record) park.Result {
	t.Helper()
	res, err := parker.Park(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Record(context.Background(), r.Shard, pipeline.Entry{First: r.ID.Seq, Last: r.ID.Seq, Done: []recordid.ID{r.ID},
		Parked: []recordid.ID{r.ID}, Failed: []recordid.ID{r.ID}, Source: r.Source,
		Parks: []pipeline.ParkRecord{{ID: r.ID, Receipt: res.Receipt}}}); err != nil {
		t.Fatal(err)
	}
	return res
}

// recordParkedBody records in ledger the park of the message body (as the pipeline that sent
// it would have): its receipt, or a park by reference for a version-1 by-reference message.
func recordParkedBody(t *testing.T, ledger pipeline.Ledger, body string) {
	t.Helper()
	m, err := park.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := m.ID()
	e := pipeline.Entry{First: id.Seq, Last: id.Seq, Done: []recordid.ID{id}, Parked: []recordid.ID{id}, Source: pipeline.SourceConsumer}
	if m.ByRef {
		e.ParkedByRef = []recordid.ID{id}
	} else {
		e.Parks = []pipeline.ParkRecord{{ID: id, Receipt: m.Receipt()}}
	}
	if err := ledger.Record(context.Background(), recordid.Shard{Group: m.Group, Stream: m.Stream, ShardID: m.ShardID}, e); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveRefusesForgedHeldHead (ON_PARK=hold-key): key K is held by its poison head H with
// R parked behind it. A forger sends a message naming H with data the downstream accepts, and
// one with a made-up id of K. Before, the walk applied the forged H, moved the hold past H,
// deleted H's real message (the only copy) as "the same record parked more than once", applied
// R and released K; the made-up id was applied ahead of the head. Now both forged messages are
// refused and left, H's real message is redriven (it fails again and is parked anew), nothing
// of K is applied and K stays held.
func TestRedriveRefusesForgedHeldHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	sh := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	rec := func(i int) pipeline.Record {
		return pipeline.Record{ID: recordid.ID{ShardID: sh.ShardID, Seq: fakeSeq(i)}, PartitionKey: "K", Data: []byte("K-" + fakeSeq(i)), ArrivalTime: time.Now()}
	}
	head, behind, madeUp := rec(10), rec(11), rec(5)
	var mu sync.Mutex
	var applied []string
	proc := func(_ context.Context, r pipeline.Record) error {
		if r.ID == head.ID && string(r.Data) == string(head.Data) {
			return errors.New("poison: downstream rejects it")
		}
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, r.ID.String()+"="+string(r.Data))
		return nil
	}
	// The forged head goes first, so the walk meets it before the real one.
	sendForged(t, hs.sqs, hs.url, park.Message{RecordID: head.ID.String(), PartitionKey: "K", Data: []byte("forged head")})
	sendForged(t, hs.sqs, hs.url, park.Message{RecordID: madeUp.ID.String(), PartitionKey: "K", Data: []byte("made up")})
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2}
	consumer, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, hs.parker, proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: hs.holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := consumer.Run(ctx, pipeline.Batch{Shard: sh, Source: pipeline.SourceConsumer, Records: []pipeline.Record{head, behind}}); err != nil || res.Parked != 2 {
		t.Fatalf("consumer: %+v %v", res, err)
	}
	rep := runHoldRedrive(t, hs.ledger, hs.parker, proc, cfg, hs.sqs, hs.url, hs.holds)
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("applied %v behind (or instead of) a head that still fails (report %+v)", got, rep)
	}
	if rep.Refused != 2 || rep.ParkedAgain != 1 || rep.Released != 0 {
		t.Fatalf("report %+v, want the 2 forged refused and the real head parked again", rep)
	}
	st, ok, err := hs.holds.Get(ctx, ugroup, "K")
	if err != nil || !ok || st.Head != head.ID || st.Applied != 0 {
		t.Fatalf("hold %+v %v %v: K must stay held by %v with nothing applied", st, ok, err, head.ID)
	}
	msgs := drainParked(t, hs.sqs, hs.url)
	var real, forged int
	for _, m := range msgs {
		id, _ := m.ID()
		if receiptConfirms(t, hs.ledger, sh, id, m) {
			real++
		} else {
			forged++
		}
	}
	// H parked anew and R: both confirmed by the ledger; the two forged ones still there.
	if real != 2 || forged != 2 {
		t.Fatalf("queue holds %d confirmed and %d forged messages, want 2 and 2", real, forged)
	}
}

func receiptConfirms(t *testing.T, ledger pipeline.Ledger, shard recordid.Shard, id recordid.ID, m park.Message) bool {
	for _, r := range receiptsOf(t, ledger, shard, id) {
		if r.Confirms(m) == nil {
			return true
		}
	}
	return false
}

// TestParkKeepsEveryByte: a record whose partition key and last error hold U+FFFE and U+FFFF
// (which SQS refuses raw, and encoding/json leaves raw) parks on attempt MAX_RECORD_ATTEMPTS,
// and its message brings the key and error back exactly. Before, SendMessage failed with
// InvalidMessageContents on every attempt: the record could never be parked.
func TestParkKeepsEveryByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	for i, tc := range []struct{ key, err string }{
		{key: "key-\uFFFE-\uFFFF", err: "plain"},
		{key: "plain", err: "rejected: \uFFFF\uFFFE and \x01 control"},
	} {
		r := pipeline.Record{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(i + 1)}, PartitionKey: tc.key, Data: []byte("d"), ArrivalTime: time.Now()}
		fail := func(context.Context, pipeline.Record) error { return errors.New(tc.err) }
		p, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, hs.parker, fail, pipeline.Config{MaxRecordAttempts: 2, MaxConcurrency: 1}, pipeline.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 1; attempt <= 2; attempt++ {
			res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: []pipeline.Record{r}})
			if err != nil {
				t.Fatal(err)
			}
			if want := attempt == 2; (res.Parked == 1) != want {
				t.Fatalf("case %d attempt %d: %+v (park failures %d), want parked=%v", i, attempt, res, res.ParkFailures, want)
			}
		}
		msgs := drainParked(t, hs.sqs, hs.url)
		if len(msgs) != 1 || msgs[0].PartitionKey != tc.key || msgs[0].LastError != tc.err {
			t.Fatalf("case %d: parked %+v, want key %q and error %q exactly", i, msgs, tc.key, tc.err)
		}
	}
}

// TestNonUTF8KeyFromAKPLAggregate: a real KPL aggregate whose key table holds a key that is not
// UTF-8 (the KPL format allows any bytes). Under ON_PARK=hold-key its first user record fails
// and parks, holding the key, and the second parks behind it. A redrive with the cause fixed
// hands Process the exact key bytes, finds the hold under them, applies both in order and
// releases the key. Before, the key came back with U+FFFD: Process got another key, the hold was
// not found under it and was never released, and every later record of the key stayed parked.
func TestNonUTF8KeyFromAKPLAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hs := newHoldStack(t)
	key := "k\xff\xfe\x80"
	agg, err := kpl.Aggregate([]kpl.UserRecord{{PartitionKey: key, Data: []byte("first")}, {PartitionKey: key, Data: []byte("second")}})
	if err != nil {
		t.Fatal(err)
	}
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	recs := UserRecords(shard.ShardID, []types.Record{{SequenceNumber: aws.String(fakeSeq(1)), PartitionKey: aws.String("outer"), Data: agg,
		ApproximateArrivalTimestamp: aws.Time(time.Now())}})
	if len(recs) != 2 || recs[0].PartitionKey != key {
		t.Fatalf("deaggregated %+v", recs)
	}
	var mu sync.Mutex
	fixed := false
	var applied []string
	proc := func(_ context.Context, r pipeline.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed && string(r.Data) == "first" {
			return errors.New("poison")
		}
		applied = append(applied, fmt.Sprintf("%q=%s", r.PartitionKey, r.Data))
		return nil
	}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 2}
	consumer, err := pipeline.New(hs.ledger, &pipelinetest.Checkpoint{}, hs.parker, proc, cfg,
		pipeline.WithHoldKey(pipeline.HoldStore{H: hs.holds}), pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := consumer.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: recs}); err != nil || res.Parked != 2 || res.HeldParked != 1 {
		t.Fatalf("consumer: %+v %v", res, err)
	}
	mu.Lock()
	fixed = true
	mu.Unlock()
	rep := runHoldRedrive(t, hs.ledger, hs.parker, proc, cfg, hs.sqs, hs.url, hs.holds)
	want := []string{fmt.Sprintf("%q=first", key), fmt.Sprintf("%q=second", key)}
	if !slices.Equal(applied, want) || rep.Released != 1 {
		t.Fatalf("applied %v, released %d (report %+v); want %v and the key released", applied, rep.Released, rep, want)
	}
	if _, held, err := hs.holds.Get(ctx, ugroup, key); held || err != nil {
		t.Fatalf("the key is still held (%v)", err)
	}
}

// TestCrashBetweenParkAndLedger: the parked message is accepted and the ledger write of the
// entry counting the record done fails (a crash between the two, as far as the ledger can
// tell). The record is not done, runs again and is parked again under a new park id, which the
// ledger records. Redrive then applies the record once, from the recorded park's message, and
// refuses the first copy (its park id was never recorded), naming the recorded park of the same
// payload, and leaves it in the queue.
func TestCrashBetweenParkAndLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, url := stacktest.SQS(t), stacktest.Queue(t, "parked", false)
	parker := park.New(client, url)
	ledger := &pipelinetest.Ledger{}
	var failOnce atomic.Bool
	failOnce.Store(true)
	ledger.Fail = func(op string) error {
		if op == "record" && failOnce.CompareAndSwap(true, false) {
			return errors.New("crashed before the ledger write")
		}
		return nil
	}
	shard := recordid.Shard{Group: ugroup, Stream: ustream, ShardID: "shardId-000000000000"}
	r := pipeline.Record{ID: recordid.ID{ShardID: shard.ShardID, Seq: fakeSeq(1)}, PartitionKey: "K", Data: []byte("order"), ArrivalTime: time.Now()}
	seen := &payloadsSeen{}
	cfg := pipeline.Config{MaxRecordAttempts: 1, MaxConcurrency: 1}
	p, err := pipeline.New(ledger, &pipelinetest.Checkpoint{}, parker, seen.process, cfg, pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: []pipeline.Record{r}}); !errors.Is(err, pipeline.ErrLedger) {
		t.Fatalf("first run: %v, want the ledger failure", err)
	}
	if res, err := p.Run(ctx, pipeline.Batch{Shard: shard, Source: pipeline.SourceConsumer, Records: []pipeline.Record{r}}); err != nil || res.Parked != 1 {
		t.Fatalf("second run: %+v %v", res, err)
	}
	msgs := parkedMessages(t, client, url)
	if len(msgs) != 2 || msgs[0].ParkID == msgs[1].ParkID {
		t.Fatalf("parked %d messages, want 2 with distinct park ids", len(msgs))
	}
	seen.mu.Lock()
	seen.fixed = true
	seen.mu.Unlock()
	rp, err := pipeline.New(NewRedriveLedger(ledger), &pipelinetest.Checkpoint{}, parker, seen.process, cfg, pipeline.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	var why []string
	d, err := NewRedriver(client, url, newMemKinesis(), rp, RedriveConfig{Group: ugroup, Stream: ustream, MaxRecordAttempts: 1,
		Backoff: time.Millisecond, VisibilityTimeout: 30 * time.Second}, WithRedriveLogger(discard()), WithRedriveProgress(func(ev RedriveEvent) {
		if ev.Outcome == OutcomeRefused {
			why = append(why, ev.Err.Error())
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := d.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.of(r.ID); !slices.Equal(got, []string{"order"}) || rep.Processed != 1 || rep.Refused != 1 {
		t.Fatalf("applied %q, report %+v: want the record applied once and the unrecorded copy refused", got, rep)
	}
	if len(why) != 1 || !strings.Contains(why[0], "of the same payload") {
		t.Fatalf("refusal reasons %q, want the stale copy named as such", why)
	}
	if left := drainParked(t, client, url); len(left) != 1 {
		t.Fatalf("%d messages left, want the refused copy", len(left))
	}
}
