package baseline_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.DynamoDB)) }

// setup returns a fresh idempotency table and a metered client.
func setup(t *testing.T) (*dynamodb.Client, *ddbmeter.Meter, string) {
	t.Helper()
	table := stacktest.Name(t, "idem")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := baseline.Ensure(ctx, stacktest.DynamoDB(t), table); err != nil {
		t.Fatal(err)
	}
	// Ensure twice is fine (the table exists).
	if err := baseline.Ensure(ctx, stacktest.DynamoDB(t), table); err != nil {
		t.Fatal(err)
	}
	m := ddbmeter.New()
	return dynamodb.NewFromConfig(stacktest.Config(t), m.Options()), m, table
}

func item(t *testing.T, c *dynamodb.Client, table, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{baseline.AttrID: &types.AttributeValueMemberS{Value: key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func status(it map[string]types.AttributeValue) string {
	if s, ok := it[baseline.AttrStatus].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// A new record costs exactly one conditional PutItem and one UpdateItem (2 write units); a
// redelivered one is skipped without Process, for one failed conditional write (and one read
// where the endpoint does not return the old item).
func TestIdempotentWritesAndSkips(t *testing.T) {
	client, m, table := setup(t)
	const n = 25
	ev := event(n, oneKey)
	rec := &recorder{}
	var st baseline.Stats
	h := baseline.Idempotent(client, table, rec.process, baseline.WithStats(&st), baseline.WithFunctionName("bench"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resp, err := h(ctx, ev)
	if err != nil || failure(t, resp) != "" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	s := m.Snapshot()
	if s.Ops["PutItem"].Calls != n || s.Ops["UpdateItem"].Calls != n || s.Total.Calls != 2*n {
		t.Errorf("first delivery: %d PutItem, %d UpdateItem, %d calls in all; want %d, %d, %d",
			s.Ops["PutItem"].Calls, s.Ops["UpdateItem"].Calls, s.Total.Calls, n, n, 2*n)
	}
	if s.Total.WriteUnits != 2*n {
		t.Errorf("write units %.1f, want %d", s.Total.WriteUnits, 2*n)
	}
	for _, r := range ev.Records {
		it := item(t, client, table, baseline.Key("bench", r.EventID))
		if status(it) != baseline.StatusCompleted {
			t.Fatalf("record %s: status %q", r.Kinesis.SequenceNumber, status(it))
		}
		if _, ok := it[baseline.AttrInProgressExpiry].(*types.AttributeValueMemberN); !ok {
			t.Errorf("no in-progress expiry although the context has a deadline: %v", it)
		}
		exp, _ := strconv.ParseInt(it[baseline.AttrExpiration].(*types.AttributeValueMemberN).Value, 10, 64)
		if d := exp - time.Now().Unix(); d < 3500 || d > 3700 {
			t.Errorf("expiration in %d s, want about 3600", d)
		}
	}

	m.Reset()
	resp, err = h(ctx, ev)
	if err != nil || failure(t, resp) != "" {
		t.Fatalf("redelivery: resp %+v err %v", resp, err)
	}
	if len(rec.calls) != n || st.Duplicates.Load() != n {
		t.Errorf("after redelivery: %d Process calls, %d duplicates; want %d, %d", len(rec.calls), st.Duplicates.Load(), n, n)
	}
	s = m.Snapshot()
	if s.Ops["PutItem"].Calls != n || s.Ops["PutItem"].Errors != n || s.Ops["UpdateItem"].Calls != 0 {
		t.Errorf("redelivery: %+v", s.Ops)
	}
	if g := s.Ops["GetItem"].Calls; g != 0 && g != n {
		t.Errorf("redelivery: %d GetItem, want 0 (old item returned) or %d", g, n)
	}
}

// A failed Process deletes the claim: the record is reported, retried, and runs again; the
// records that succeeded are not run again on the retry.
func TestIdempotentFailureDeletesClaim(t *testing.T) {
	client, m, table := setup(t)
	ev := event(6, oneKey)
	bad := ev.Records[2].Kinesis.SequenceNumber
	rec := &recorder{fail: map[string]error{bad: errors.New("downstream down")}}
	h := baseline.Idempotent(client, table, rec.process, baseline.WithFunctionName("f"))
	ctx := context.Background()

	resp, err := h(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failure(t, resp); got != bad {
		t.Fatalf("failure = %q, want %q", got, bad)
	}
	if it := item(t, client, table, baseline.Key("f", ev.Records[2].EventID)); it != nil {
		t.Errorf("claim of the failed record left behind: %v", it)
	}
	if d := m.Snapshot().Ops["DeleteItem"].Calls; d != 1 {
		t.Errorf("%d DeleteItem, want 1", d)
	}
	delete(rec.fail, bad)
	// Lambda retries from the reported record.
	ev.Records = ev.Records[2:]
	if resp, err = h(ctx, ev); err != nil || failure(t, resp) != "" {
		t.Fatalf("retry: resp %+v err %v", resp, err)
	}
	for i, r := range event(6, oneKey).Records {
		want := 1
		if i == 2 {
			want = 2
		}
		if got := rec.count(r.Kinesis.SequenceNumber); got != want {
			t.Errorf("record %d ran %d times, want %d", i, got, want)
		}
	}
}

// An INPROGRESS claim fails the record while its in-progress expiry is ahead, and is taken over
// once it has passed; a COMPLETED item stops protecting its record after expires_after.
func TestIdempotentExpiry(t *testing.T) {
	client, _, table := setup(t)
	ev := event(1, oneKey)
	key := baseline.Key("f", ev.Records[0].EventID)
	now := time.Now()
	putInProgress := func(inProgressUntil time.Time) {
		_, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			baseline.AttrID:               &types.AttributeValueMemberS{Value: key},
			baseline.AttrStatus:           &types.AttributeValueMemberS{Value: baseline.StatusInProgress},
			baseline.AttrExpiration:       &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
			baseline.AttrInProgressExpiry: &types.AttributeValueMemberN{Value: strconv.FormatInt(inProgressUntil.UnixMilli(), 10)},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	var st baseline.Stats
	h := baseline.Idempotent(client, table, rec.process, baseline.WithFunctionName("f"), baseline.WithStats(&st))

	putInProgress(now.Add(time.Minute))
	resp, err := h(context.Background(), ev)
	if err != nil || failure(t, resp) != ev.Records[0].Kinesis.SequenceNumber {
		t.Fatalf("held claim: resp %+v err %v", resp, err)
	}
	if len(rec.calls) != 0 || st.InProgress.Load() != 1 {
		t.Fatalf("held claim: %d calls, %d in progress", len(rec.calls), st.InProgress.Load())
	}

	putInProgress(now.Add(-time.Second))
	if resp, err = h(context.Background(), ev); err != nil || failure(t, resp) != "" {
		t.Fatalf("expired claim: resp %+v err %v", resp, err)
	}
	if len(rec.calls) != 1 || status(item(t, client, table, key)) != baseline.StatusCompleted {
		t.Fatalf("expired claim: %d calls, status %q", len(rec.calls), status(item(t, client, table, key)))
	}

	// Two hours later the COMPLETED item (one hour) no longer protects the record.
	later := baseline.Idempotent(client, table, rec.process, baseline.WithFunctionName("f"),
		baseline.WithClock(func() int64 { return now.Add(2 * time.Hour).UnixMilli() }))
	if resp, err = later(context.Background(), ev); err != nil || failure(t, resp) != "" {
		t.Fatalf("expired item: resp %+v err %v", resp, err)
	}
	if len(rec.calls) != 2 {
		t.Errorf("expired item: %d calls, want 2", len(rec.calls))
	}
}

// Two invocations racing on the same records: each record runs exactly once; the loser of a
// race either skips the record (COMPLETED) or fails it (INPROGRESS) and a retry skips it.
func TestIdempotentConcurrentInvocations(t *testing.T) {
	stacktest.RequireAtomicItemWrites(t) // moto lets two claims of one record both win
	client, _, table := setup(t)
	const n = 40
	ev := event(n, func(i int) string { return strconv.Itoa(i % 5) })
	rec := &recorder{}
	h := baseline.Idempotent(client, table, rec.process, baseline.WithConcurrency(5))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			if _, err := h(ctx, ev); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Lambda retries whatever failed; by now nothing is in flight.
	if resp, err := h(ctx, ev); err != nil || failure(t, resp) != "" {
		t.Fatalf("retry: resp %+v err %v", resp, err)
	}
	for _, r := range ev.Records {
		if c := rec.count(r.Kinesis.SequenceNumber); c != 1 {
			t.Errorf("record %s ran %d times", r.Kinesis.SequenceNumber, c)
		}
	}
}
