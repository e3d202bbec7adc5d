package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func load(t *testing.T, name string) events.KinesisEvent {
	t.Helper()
	var ev events.KinesisEvent
	if err := json.Unmarshal(read(t, name), &ev); err != nil {
		t.Fatalf("%s does not unmarshal into events.KinesisEvent: %v", name, err)
	}
	return ev
}

// order is the payload of the fixtures' plain records.
type order struct {
	ID     string   `json:"id"`
	Amount *float64 `json:"amount"`
	Poison bool     `json:"poison"`
}

func decodeOrder(t *testing.T, data []byte) order {
	t.Helper()
	var o order
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		t.Fatalf("payload %q is not an order: %v", data, err)
	}
	return o
}

// checkShape checks the properties every well-formed fixture record has: sam's constant fields,
// eventID = shard:sequence, a valid sequence number, an arrival time.
func checkShape(t *testing.T, i int, r events.KinesisEventRecord, shard string) {
	t.Helper()
	k := r.Kinesis
	if r.EventSource != "aws:kinesis" || r.EventName != "aws:kinesis:record" || r.EventVersion != "1.0" ||
		k.KinesisSchemaVersion != "1.0" || r.AwsRegion != fixtures.Region || r.EventSourceArn != fixtures.StreamARN ||
		r.InvokeIdentityArn != fixtures.RoleARN {
		t.Errorf("record %d: constant fields differ from sam local generate-event's: %+v", i, r)
	}
	if r.EventID != shard+":"+k.SequenceNumber {
		t.Errorf("record %d: eventID %q, want %s:%s", i, r.EventID, shard, k.SequenceNumber)
	}
	if err := seqnum.Validate(k.SequenceNumber); err != nil || len(k.SequenceNumber) != 56 {
		t.Errorf("record %d: sequence number %q (%d digits): %v", i, k.SequenceNumber, len(k.SequenceNumber), err)
	}
	if k.ApproximateArrivalTimestamp.Unix() < 1545084650 {
		t.Errorf("record %d: arrival %v", i, k.ApproximateArrivalTimestamp)
	}
	if k.PartitionKey == "" {
		t.Errorf("record %d: no partition key", i)
	}
}

func checkIncreasing(t *testing.T, rs []events.KinesisEventRecord) {
	t.Helper()
	for i := 1; i < len(rs); i++ {
		if seqnum.Compare(rs[i-1].Kinesis.SequenceNumber, rs[i].Kinesis.SequenceNumber) >= 0 {
			t.Errorf("records %d and %d are not in increasing sequence order", i-1, i)
		}
	}
}

// TestShapeMatchesSAM checks the exact key set of a record against
// `sam local generate-event kinesis get-records` (and aws-lambda-go's kinesis-event.json).
func TestShapeMatchesSAM(t *testing.T) {
	wantTop := []string{"awsRegion", "eventID", "eventName", "eventSource", "eventSourceARN", "eventVersion", "invokeIdentityArn", "kinesis"}
	wantKinesis := []string{"approximateArrivalTimestamp", "data", "kinesisSchemaVersion", "partitionKey", "sequenceNumber"}
	for _, name := range []string{fixtures.Clean, fixtures.Poison, fixtures.KPL, fixtures.Malformed, fixtures.Redelivered} {
		t.Run(name, func(t *testing.T) {
			var ev struct {
				Records []map[string]json.RawMessage
			}
			if err := json.Unmarshal(read(t, name), &ev); err != nil {
				t.Fatal(err)
			}
			if len(ev.Records) == 0 {
				t.Fatal("no records")
			}
			for i, r := range ev.Records {
				var k map[string]json.RawMessage
				if err := json.Unmarshal(r["kinesis"], &k); err != nil {
					t.Fatal(err)
				}
				if got := slices.Sorted(maps.Keys(r)); !slices.Equal(got, wantTop) {
					t.Errorf("record %d keys %v, want %v", i, got, wantTop)
				}
				if got := slices.Sorted(maps.Keys(k)); !slices.Equal(got, wantKinesis) {
					t.Errorf("record %d kinesis keys %v, want %v", i, got, wantKinesis)
				}
			}
		})
	}
}

func TestClean(t *testing.T) {
	ev := load(t, fixtures.Clean)
	if len(ev.Records) != 10 {
		t.Fatalf("%d records, want 10", len(ev.Records))
	}
	keys := map[string]int{}
	for i, r := range ev.Records {
		checkShape(t, i, r, fixtures.Shard)
		keys[r.Kinesis.PartitionKey]++
		if kpl.IsAggregated(r.Kinesis.Data) {
			t.Errorf("record %d is a KPL aggregate", i)
		}
		o := decodeOrder(t, r.Kinesis.Data)
		if want := fmt.Sprintf("order-%04d", i+1); o.ID != want || o.Amount == nil || o.Poison {
			t.Errorf("record %d payload %+v, want id %s with an amount and no poison", i, o, want)
		}
		if r.Kinesis.SequenceNumber != fixtures.Seq(i) {
			t.Errorf("record %d sequence %s, want %s", i, r.Kinesis.SequenceNumber, fixtures.Seq(i))
		}
	}
	if len(keys) != 3 {
		t.Errorf("%d partition keys %v, want 3", len(keys), keys)
	}
	checkIncreasing(t, ev.Records)
}

func TestPoison(t *testing.T) {
	clean, poison := load(t, fixtures.Clean), load(t, fixtures.Poison)
	if len(poison.Records) != len(clean.Records) {
		t.Fatalf("%d records, want %d", len(poison.Records), len(clean.Records))
	}
	var found []int
	for i, r := range poison.Records {
		checkShape(t, i, r, fixtures.Shard)
		o := decodeOrder(t, r.Kinesis.Data)
		if o.Poison {
			found = append(found, i)
			if o.ID != "order-0005" {
				t.Errorf("poison record id %q, want order-0005", o.ID)
			}
			continue
		}
		if !reflect.DeepEqual(r, clean.Records[i]) {
			t.Errorf("record %d differs from the clean batch", i)
		}
	}
	if !slices.Equal(found, []int{fixtures.PoisonIndex}) {
		t.Fatalf("poison records at %v, want [%d]", found, fixtures.PoisonIndex)
	}
	p, c := poison.Records[fixtures.PoisonIndex], clean.Records[fixtures.PoisonIndex]
	if p.EventID != c.EventID || p.Kinesis.PartitionKey != c.Kinesis.PartitionKey {
		t.Error("the poison record must keep the clean record's id and key")
	}
}

func TestKPL(t *testing.T) {
	ev := load(t, fixtures.KPL)
	if len(ev.Records) != 3 {
		t.Fatalf("%d records, want 3", len(ev.Records))
	}
	checkIncreasing(t, ev.Records)
	for i, r := range ev.Records {
		checkShape(t, i, r, fixtures.Shard)
		users, err := kpl.Deaggregate(r.Kinesis.Data)
		if i != fixtures.KPLIndex {
			if !errors.Is(err, kpl.ErrNotAggregated) {
				t.Errorf("record %d: Deaggregate err %v, want ErrNotAggregated (a plain record)", i, err)
			}
			decodeOrder(t, r.Kinesis.Data)
			continue
		}
		if err != nil {
			t.Fatalf("aggregate: %v", err)
		}
		if len(users) != fixtures.KPLUserRecords || fixtures.KPLUserRecords != 5 {
			t.Fatalf("aggregate holds %d user records, want 5", len(users))
		}
		keys := map[string]bool{}
		for j, u := range users {
			keys[u.PartitionKey] = true
			if o := decodeOrder(t, u.Data); o.ID != fmt.Sprintf("order-%04d", 22+j) || o.Amount == nil {
				t.Errorf("user record %d payload %+v", j, o)
			}
		}
		if len(keys) != 3 || r.Kinesis.PartitionKey != users[0].PartitionKey {
			t.Errorf("aggregate keys %v under %q; want 3 keys under the first user record's", keys, r.Kinesis.PartitionKey)
		}
	}
}

// TestMalformed: the whole batch does NOT unmarshal into events.KinesisEvent (one record's data
// is not base64), so it is checked record by record.
func TestMalformed(t *testing.T) {
	var whole events.KinesisEvent
	if err := json.Unmarshal(read(t, fixtures.Malformed), &whole); err == nil {
		t.Fatal("the malformed batch unmarshals into events.KinesisEvent; its not-base64 record is not malformed")
	}
	var raw struct{ Records []json.RawMessage }
	if err := json.Unmarshal(read(t, fixtures.Malformed), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Records) != fixtures.MalformedRecords {
		t.Fatalf("%d records, want %d", len(raw.Records), fixtures.MalformedRecords)
	}
	var valid []events.KinesisEventRecord
	for i, m := range raw.Records {
		var r events.KinesisEventRecord
		err := json.Unmarshal(m, &r)
		seqErr := seqnum.Validate(r.Kinesis.SequenceNumber)
		shard, _, _ := strings.Cut(r.EventID, ":")
		_, kplErr := kpl.Deaggregate(r.Kinesis.Data)
		switch i {
		case fixtures.MalformedNotBase64:
			if err == nil {
				t.Errorf("record %d: data decodes as base64", i)
			}
		case fixtures.MalformedLeadZero:
			if err != nil || !errors.Is(seqErr, seqnum.ErrInvalid) || !strings.HasPrefix(r.Kinesis.SequenceNumber, "0") {
				t.Errorf("record %d: sequence %q: %v, want a leading-zero sequence number (decode err %v)", i, r.Kinesis.SequenceNumber, seqErr, err)
			}
		case fixtures.MalformedOtherShard:
			if err != nil || shard != fixtures.OtherShard || seqErr != nil {
				t.Errorf("record %d: eventID %q, want shard %s (decode err %v)", i, r.EventID, fixtures.OtherShard, err)
			}
		case fixtures.MalformedCorruptKPL:
			if err != nil || !kpl.IsAggregated(r.Kinesis.Data) || !errors.Is(kplErr, kpl.ErrCorrupt) {
				t.Errorf("record %d: Deaggregate err %v, want ErrCorrupt (decode err %v)", i, kplErr, err)
			}
		default:
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			checkShape(t, i, r, fixtures.Shard)
			if !errors.Is(kplErr, kpl.ErrNotAggregated) {
				t.Errorf("record %d: Deaggregate err %v, want a plain record", i, kplErr)
			}
			decodeOrder(t, r.Kinesis.Data)
			valid = append(valid, r)
		}
		if i != fixtures.MalformedOtherShard && err == nil && shard != fixtures.Shard {
			t.Errorf("record %d: shard %q, want %s", i, shard, fixtures.Shard)
		}
	}
	if len(valid) != fixtures.MalformedRecords-4 {
		t.Errorf("%d valid records, want %d", len(valid), fixtures.MalformedRecords-4)
	}
	checkIncreasing(t, valid)
}

func TestRedelivered(t *testing.T) {
	clean, re := load(t, fixtures.Clean), load(t, fixtures.Redelivered)
	if len(re.Records) != 7 {
		t.Fatalf("%d records, want 7 (clean's 4th to 10th)", len(re.Records))
	}
	if re.Records[0].Kinesis.SequenceNumber != clean.Records[3].Kinesis.SequenceNumber {
		t.Errorf("starts at %s, want clean's 4th sequence %s", re.Records[0].Kinesis.SequenceNumber, clean.Records[3].Kinesis.SequenceNumber)
	}
	if !reflect.DeepEqual(re.Records, clean.Records[fixtures.RedeliveredFrom:]) {
		t.Error("redelivered records differ from clean's records 4..10")
	}
}

func TestEnv(t *testing.T) {
	var env map[string]map[string]string
	if err := json.Unmarshal(read(t, fixtures.Env), &env); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(env)); !slices.Equal(got, []string{"ConsumerFunction", "ReconcilerFunction"}) {
		t.Fatalf("functions %v", got)
	}
	common := []string{config.EnvGroup, config.EnvCheckpointTable, config.EnvDedupeTable, config.EnvParkedQueueURL,
		config.EnvTargetQueueURL, config.EnvPayloadBucket, config.EnvMaxRecordAttempts, config.EnvMaxConcurrency, config.EnvDedupeKey,
		config.EnvLedgerTTL, config.EnvLogPayloads, config.EnvStreamName, config.EnvOnPark, chaos.EnvVar,
		// template.yaml's intrinsic values, set empty (gapless-dev invoke needs them set).
		config.EnvStreamARN, config.EnvRecordFilter}
	wantVars := map[string][]string{
		"ConsumerFunction": append(slices.Clone(common), config.EnvDeadlineMargin),
		"ReconcilerFunction": append(slices.Clone(common), config.EnvSettleAfter, config.EnvFailureBucket, config.EnvStartingPosition,
			config.EnvConsumerFunction, config.EnvParallelizationFactor, config.EnvMaxRecordAge, config.EnvVerifyQueueURL),
	}
	for fn, want := range wantVars {
		got := slices.Sorted(maps.Keys(env[fn]))
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s variables %v, want %v", fn, got, want)
		}
	}

	get := func(fn string) func(string) string { return func(k string) string { return env[fn][k] } }
	c, err := config.LoadConsumer(get("ConsumerFunction"))
	if err != nil {
		t.Fatalf("ConsumerFunction: %v", err)
	}
	r, err := config.LoadReconciler(get("ReconcilerFunction"))
	if err != nil {
		t.Fatalf("ReconcilerFunction: %v", err)
	}
	if c.Common != r.Common {
		t.Errorf("the functions disagree:\n%+v\n%+v", c.Common, r.Common)
	}
	if c.Group != "local" || c.CheckpointTable != "gapless-checkpoint" || c.DedupeTable != "gapless-ledger" ||
		c.ParkedQueueURL != "http://sqs.us-east-1.localhost:4566/000000000000/gapless-parked" ||
		c.TargetQueueURL != "http://sqs.us-east-1.localhost:4566/000000000000/gapless-target" ||
		r.StreamName != "gapless-demo" || c.StreamName != r.StreamName {
		t.Errorf("local values: %+v %+v", c, r)
	}
	// Only the poison rule: kinesis-poison.json's record fails on every attempt, nothing else.
	for fn := range env {
		cc, err := chaos.Parse(env[fn][chaos.EnvVar])
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if !cc.Poison || cc.Transient != 0 || cc.Panic != 0 || cc.Slow != 0 {
			t.Errorf("%s: %s=%q turns on more than the poison rule: %+v", fn, chaos.EnvVar, env[fn][chaos.EnvVar], cc)
		}
	}
	if c.MaxRecordAttempts != config.DefaultMaxRecordAttempts || c.LedgerTTL != config.DefaultLedgerTTL ||
		c.DeadlineMargin != config.DefaultDeadlineMargin || r.SettleAfter != config.DefaultSettleAfter {
		t.Errorf("env.json should carry the defaults: %+v %+v", c, r)
	}
}

// TestRegenerate runs the generator into a temporary directory: the committed fixtures must be
// byte-identical, and every JSON file in events/ must be one it writes.
func TestRegenerate(t *testing.T) {
	dir := t.TempDir()
	if err := fixtures.Write(dir); err != nil {
		t.Fatal(err)
	}
	files, err := fixtures.Files()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if got := read(t, filepath.Join(dir, f.Name)); !bytes.Equal(got, read(t, f.Name)) {
			t.Errorf("%s is stale: run `go run ./events/gen` from the module root", f.Name)
		}
	}
	committed, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(committed, names) {
		t.Errorf("events/ holds %v, the generator writes %v", committed, names)
	}
	again, err := fixtures.Files()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(files, again) {
		t.Error("two generator runs differ")
	}
}

// TestSAMSample: kinesis-sam-sample.json is what `sam local generate-event kinesis get-records`
// prints with its defaults (aws-sam-cli's Kinesis.json template and event-mapping.json).
func TestSAMSample(t *testing.T) {
	ev := load(t, fixtures.SAMSample)
	if len(ev.Records) != 1 {
		t.Fatalf("%d records", len(ev.Records))
	}
	r := ev.Records[0]
	if r.EventSourceArn != "arn:aws:kinesis:EXAMPLE" || r.EventID != "shardId-000000000000:"+r.Kinesis.SequenceNumber ||
		r.Kinesis.SequenceNumber != "49545115243490985018280067714973144582180062593244200961" ||
		string(r.Kinesis.Data) != "Hello, this is a test 123." || r.Kinesis.PartitionKey != "partitionKey-03" ||
		r.AwsRegion != "us-east-1" || r.InvokeIdentityArn != "arn:aws:iam::EXAMPLE" || r.Kinesis.ApproximateArrivalTimestamp.Unix() != 1428537600 {
		t.Errorf("not SAM's sample record: %+v", r)
	}
}
