package dedupe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

var testShard = recordid.Shard{Group: "app", Stream: "orders", ShardID: testShardID}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ids returns records seqAt(k) sub 0 for k in [from, to].
func ids(from, to int64) []recordid.ID {
	var out []recordid.ID
	for k := from; k <= to; k++ {
		out = append(out, rid(seqAt(k), 0))
	}
	return out
}

// newStackLedger returns a ledger on a fresh table of the local stack, metered.
func newStackLedger(t testing.TB, opts ...Option) (*Ledger, *dynamodb.Client, *ddbmeter.Meter, string) {
	t.Helper()
	table := stacktest.LedgerTable(t)
	m := ddbmeter.New()
	client := dynamodb.NewFromConfig(stacktest.Config(t), m.Options())
	opts = append([]Option{WithLogger(quiet)}, opts...)
	return New(client, table, opts...), client, m, table
}

func TestRecordLookupRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, m, _ := newStackLedger(t)

	// Invocation 1 covers 0..9 (with two sub-records of a KPL aggregate at 4): 0..7 processed,
	// 8 parked, 9 failed, then parked by reference. Invocation 2 covers 10..14 and fails 12..14;
	// a reconciler replay of 12..14 processes 13 and 14 and fails 12 again.
	agg := []recordid.ID{rid(seqAt(4), 1), rid(seqAt(4), 2)}
	e1 := Entry{First: seqAt(0), Last: seqAt(9), Source: SourceConsumer,
		Done:        append(ids(0, 9), agg...),
		Parked:      ids(8, 9),
		ParkedByRef: ids(9, 9),
		Failed:      ids(9, 9),
	}
	e2 := Entry{First: seqAt(10), Last: seqAt(14), Source: SourceConsumer, Done: ids(10, 11), Failed: ids(12, 14)}
	e3 := Entry{First: seqAt(12), Last: seqAt(14), Source: SourceReconciler, Done: ids(13, 14), Failed: ids(12, 12)}
	for _, e := range []Entry{e1, e2, e3} {
		if err := l.Record(ctx, testShard, e); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Snapshot().Ops["PutItem"].Calls; got != 3 {
		t.Fatalf("%d PutItem calls for 3 entries, want 3", got)
	}

	m.Reset()
	r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(20))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Snapshot(); s.Total.Calls != 1 || s.Ops["Query"].Calls != 1 {
		t.Fatalf("Lookup made %+v calls, want one Query", s.Ops)
	}
	if st := r.Stats(); st.Entries != 3 || st.Pages != 1 || st.Expired != 0 || st.Corrupt != 0 || st.IDs != 16 {
		t.Fatalf("stats %+v", st)
	}
	tests := []struct {
		id                  recordid.ID
		done, parked, byRef bool
		attempts            int
	}{
		{rid(seqAt(0), 0), true, false, false, 0},
		{rid(seqAt(4), 1), true, false, false, 0},
		{rid(seqAt(4), 3), false, false, false, 0},
		{rid(seqAt(8), 0), true, true, false, 0},
		{rid(seqAt(9), 0), true, true, true, 1},
		{rid(seqAt(11), 0), true, false, false, 0},
		{rid(seqAt(12), 0), false, false, false, 2},
		{rid(seqAt(13), 0), true, false, false, 1},
		{rid(seqAt(15), 0), false, false, false, 0},
		{recordid.ID{ShardID: "shardId-000000000001", Seq: seqAt(0)}, false, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			if got := r.Done(tt.id); got != tt.done {
				t.Errorf("Done = %v, want %v", got, tt.done)
			}
			if got := r.Parked(tt.id); got != tt.parked {
				t.Errorf("Parked = %v, want %v", got, tt.parked)
			}
			if got := r.ParkedByRef(tt.id); got != tt.byRef {
				t.Errorf("ParkedByRef = %v, want %v", got, tt.byRef)
			}
			if got := r.Attempts(tt.id); got != tt.attempts {
				t.Errorf("Attempts = %d, want %d", got, tt.attempts)
			}
		})
	}

	var each []string
	r.Each(func(id recordid.ID, parked, byRef bool) {
		each = append(each, fmt.Sprintf("%s/%v/%v", id, parked, byRef))
	})
	var want []string
	for _, id := range append(append(append(ids(0, 4), agg...), ids(5, 11)...), ids(13, 14)...) {
		k := int64(slices.Index(ids(0, 14), rid(id.Seq, 0)))
		want = append(want, fmt.Sprintf("%s/%v/%v", id, k == 8 || k == 9, k == 9))
	}
	if !slices.Equal(each, want) {
		t.Fatalf("Each\n got %v\nwant %v", each, want)
	}
}

// TestLookupReturnsExactlyOverlappingEntries records three disjoint entries and checks which
// ones each range sees, including the boundaries.
func TestLookupReturnsExactlyOverlappingEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, _, _ := newStackLedger(t)
	entries := [][2]int64{{10, 20}, {30, 40}, {50, 60}}
	for _, e := range entries {
		if err := l.Record(ctx, testShard, Entry{First: seqAt(e[0]), Last: seqAt(e[1]), Source: SourceConsumer, Done: ids(e[0], e[1])}); err != nil {
			t.Fatal(err)
		}
	}
	// Another shard's entry must never show up.
	other := testShard
	other.ShardID = "shardId-000000000001"
	if err := l.Record(ctx, other, Entry{First: seqAt(0), Last: seqAt(100), Source: SourceConsumer,
		Done: []recordid.ID{{ShardID: other.ShardID, Seq: seqAt(35)}}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		from, to int64
		entries  int
		done     []int64 // every k in [from, to] not listed is expected not done
	}{
		{"inside first", 12, 15, 1, []int64{12, 13, 14, 15}},
		{"spanning two", 15, 35, 2, []int64{15, 16, 17, 18, 19, 20, 30, 31, 32, 33, 34, 35}},
		{"gap between", 21, 29, 0, nil},
		{"ends at first's last", 0, 10, 1, []int64{10}},
		{"starts at last", 20, 25, 1, []int64{20}},
		{"starts at an entry's first", 40, 50, 2, []int64{40, 50}},
		{"beyond all", 61, 70, 0, nil},
		{"everything", 0, 70, 3, append(append(rangeK(10, 20), rangeK(30, 40)...), rangeK(50, 60)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := l.Lookup(ctx, testShard, seqAt(tt.from), seqAt(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Stats().Entries; got != tt.entries {
				t.Errorf("%d entries, want %d", got, tt.entries)
			}
			// Ids outside the looked-up range are never reported, even when an overlapping
			// entry holds them.
			for k := tt.from - 12; k <= tt.to+12; k++ {
				want := slices.Contains(tt.done, k)
				if got := r.Done(rid(seqAt(k), 0)); got != want {
					t.Errorf("Done(%d) = %v, want %v", k, got, want)
				}
			}
			if r.Len() != len(tt.done) {
				t.Errorf("Len = %d, want %d", r.Len(), len(tt.done))
			}
		})
	}
}

func rangeK(from, to int64) []int64 {
	var out []int64
	for k := from; k <= to; k++ {
		out = append(out, k)
	}
	return out
}

// TestConcurrentWritersOneShard has goroutines record overlapping and identical ranges on one
// shard at once; afterwards every id is found and every entry survived (distinct nonces).
func TestConcurrentWritersOneShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, _, _ := newStackLedger(t)
	const writers, perWriter = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				var from, to int64
				switch i % 3 {
				case 0: // identical range for everybody
					from, to = 0, 9
				case 1: // overlapping ranges
					from, to = int64(w*5), int64(w*5+12)
				default: // pairs of writers end on the same record
					from, to = int64(100+w*20), int64(100+(w/2)*40+39)
				}
				done := ids(from, to)
				// Each writer marks one record of its own with a sub-index, to prove its entry
				// was stored rather than merged with an identical one.
				done = append(done, rid(seqAt(from), uint32(1000+w*perWriter+i)))
				errs <- l.Record(ctx, testShard, Entry{First: seqAt(from), Last: seqAt(to), Source: SourceConsumer, Done: done})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(400))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().Entries; got != writers*perWriter {
		t.Fatalf("%d entries stored, want %d (an entry was overwritten)", got, writers*perWriter)
	}
	for w := range writers {
		for i := range perWriter {
			var from int64
			switch i % 3 {
			case 0:
				from = 0
			case 1:
				from = int64(w * 5)
			default:
				from = int64(100 + w*20)
			}
			if id := rid(seqAt(from), uint32(1000+w*perWriter+i)); !r.Done(id) {
				t.Errorf("writer %d entry %d: %s not done", w, i, id)
			}
		}
	}
	for _, k := range append(rangeK(0, 47), rangeK(100, 259)...) {
		if !r.Done(rid(seqAt(k), 0)) {
			t.Errorf("record %d not done", k)
		}
	}
}

// TestExpiredEntriesAreIgnored: readers treat expiresAt < now as absent (dynalite and moto
// never delete).
func TestExpiredEntriesAreIgnored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	l, _, _, _ := newStackLedger(t, WithClock(clock), WithTTL(time.Hour))

	if err := l.Record(ctx, testShard, Entry{First: seqAt(0), Last: seqAt(5), Source: SourceConsumer, Done: ids(0, 4), Failed: ids(5, 5)}); err != nil {
		t.Fatal(err)
	}
	set(t0.Add(30 * time.Minute))
	if err := l.Record(ctx, testShard, Entry{First: seqAt(5), Last: seqAt(9), Source: SourceConsumer, Done: ids(6, 9), Failed: ids(5, 5)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		at       time.Duration
		done0    bool
		done6    bool
		attempts int
		expired  int
	}{
		{59 * time.Minute, true, true, 2, 0},
		{time.Hour, true, true, 2, 0}, // expiresAt == now is still live
		{time.Hour + time.Second, false, true, 1, 1},
		{90*time.Minute + time.Second, false, false, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.at.String(), func(t *testing.T) {
			set(t0.Add(tt.at))
			r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(9))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Done(rid(seqAt(0), 0)); got != tt.done0 {
				t.Errorf("Done(0) = %v, want %v", got, tt.done0)
			}
			if got := r.Done(rid(seqAt(6), 0)); got != tt.done6 {
				t.Errorf("Done(6) = %v, want %v", got, tt.done6)
			}
			if got := r.Attempts(rid(seqAt(5), 0)); got != tt.attempts {
				t.Errorf("Attempts(5) = %d, want %d", got, tt.attempts)
			}
			if got := r.Stats().Expired; got != tt.expired {
				t.Errorf("Expired = %d, want %d", got, tt.expired)
			}
		})
	}
}

// TestSplitLargeEntry forces a 10,000-id entry into parts with a small item budget.
func TestSplitLargeEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const budget = 8 * 1024
	l, client, m, table := newStackLedger(t, WithMaxItemBytes(budget))
	const n = 10_000
	done := ids(0, n-1)
	var parked, failed []recordid.ID
	for i := 0; i < n; i += 97 {
		parked = append(parked, done[i])
	}
	for i := 5; i < n; i += 101 {
		failed = append(failed, done[i])
	}
	e := Entry{First: seqAt(0), Last: seqAt(n + 5), Source: SourceConsumer, Done: done, Parked: parked, ParkedByRef: parked[:10], Failed: failed}
	if err := l.Record(ctx, testShard, e); err != nil {
		t.Fatal(err)
	}
	s := m.Snapshot()
	if s.Ops["PutItem"].Calls != 0 || s.Ops["BatchWriteItem"].Calls == 0 {
		t.Fatalf("split entry written with %+v", s.Ops)
	}

	// Inspect the stored parts directly.
	out, err := client.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: partitionKey(testShard)}},
		ConsistentRead:            aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) < 3 || out.LastEvaluatedKey != nil {
		t.Fatalf("%d parts stored (more pages: %v)", len(out.Items), out.LastEvaluatedKey != nil)
	}
	var storedIDs int
	for _, it := range out.Items {
		if size := ddbsize.ItemSize(it); size > budget {
			t.Errorf("part of %d bytes exceeds budget %d", size, budget)
		}
		b, ok := it[attrIDs].(*types.AttributeValueMemberB)
		if !ok {
			t.Fatalf("part without binary ids: %v", it[attrIDs])
		}
		part, err := DecodeSet(b.Value, testShardID)
		if err != nil {
			t.Fatal(err)
		}
		storedIDs += len(part)
		first, last := stringAttr(it, attrFirst), stringAttr(it, attrLast)
		for _, id := range part {
			if seqnum.Compare(id.Seq, first) < 0 || seqnum.Compare(id.Seq, last) > 0 {
				t.Fatalf("part %s..%s holds %s", first, last, id)
			}
		}
	}
	if storedIDs != n {
		t.Fatalf("parts hold %d ids, want %d", storedIDs, n)
	}
	t.Logf("10,000 ids in %d parts of ≤ %d bytes, %d BatchWriteItem calls", len(out.Items), budget, s.Ops["BatchWriteItem"].Calls)

	r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(n+5))
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != n || r.Stats().Entries != len(out.Items) {
		t.Fatalf("Lookup: %d ids from %d entries, want %d from %d", r.Len(), r.Stats().Entries, n, len(out.Items))
	}
	for i, id := range done {
		parkedWant := i%97 == 0
		if !r.Done(id) || r.Parked(id) != parkedWant || r.Attempts(id) != btoi(i >= 5 && (i-5)%101 == 0) {
			t.Fatalf("record %d: done %v parked %v attempts %d", i, r.Done(id), r.Parked(id), r.Attempts(id))
		}
		if r.ParkedByRef(id) != (parkedWant && i/97 < 10) {
			t.Fatalf("record %d: byRef %v", i, r.ParkedByRef(id))
		}
	}
	// A sub-range sees only its part(s).
	r, err = l.Lookup(ctx, testShard, seqAt(5000), seqAt(5010))
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 11 || r.Stats().Entries >= len(out.Items) {
		t.Fatalf("sub-range: %d ids from %d entries", r.Len(), r.Stats().Entries)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestRecordRejectsInvalidEntries(t *testing.T) {
	t.Parallel()
	l := New(fakeDynamo{}, "t")
	ok := Entry{First: seqAt(0), Last: seqAt(9), Source: SourceConsumer, Done: ids(0, 9)}
	other := rid(seqAt(1), 0)
	other.ShardID = "shardId-000000000009"
	tests := []struct {
		name  string
		shard recordid.Shard
		edit  func(*Entry)
		is    error
	}{
		{"bad shard", recordid.Shard{Group: "a|b", Stream: "s", ShardID: "x"}, func(*Entry) {}, recordid.ErrInvalid},
		{"bad first", testShard, func(e *Entry) { e.First = "01" }, seqnum.ErrInvalid},
		{"bad last", testShard, func(e *Entry) { e.Last = "" }, seqnum.ErrInvalid},
		{"bad id", testShard, func(e *Entry) { e.Done = append(e.Done, rid("x", 0)) }, seqnum.ErrInvalid},
		{"first after last", testShard, func(e *Entry) { e.First, e.Last = e.Last, e.First }, ErrInvalid},
		{"id before first", testShard, func(e *Entry) { e.First = seqAt(1) }, ErrInvalid},
		{"id after last", testShard, func(e *Entry) { e.Last = seqAt(8) }, ErrInvalid},
		{"failed outside range", testShard, func(e *Entry) { e.Failed = ids(10, 10) }, ErrInvalid},
		{"id of another shard", testShard, func(e *Entry) { e.Done = append(e.Done, other) }, ErrInvalid},
		{"parked not done", testShard, func(e *Entry) { e.Done = ids(0, 8); e.Parked = ids(9, 9) }, ErrInvalid},
		{"by-ref not parked", testShard, func(e *Entry) { e.Parked = ids(1, 1); e.ParkedByRef = ids(2, 2) }, ErrInvalid},
		{"unknown source", testShard, func(e *Entry) { e.Source = "cron" }, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ok
			e.Done = slices.Clone(ok.Done)
			tt.edit(&e)
			err := l.Record(context.Background(), tt.shard, e)
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, tt.is) {
				t.Fatalf("Record = %v, want ErrInvalid and %v", err, tt.is)
			}
		})
	}
	if _, err := l.Lookup(context.Background(), testShard, seqAt(2), seqAt(1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Lookup(first > last) = %v", err)
	}
	if _, err := l.Lookup(context.Background(), testShard, "1.5", seqAt(1)); !errors.Is(err, seqnum.ErrInvalid) {
		t.Fatalf("Lookup(bad first) = %v", err)
	}
}

// fakeDynamo is a function-typed fake; a nil function fails the call.
type fakeDynamo struct {
	put   func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error)
	batch func(*dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error)
	query func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error)
	get   func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
}

var errUnexpected = errors.New("fake: unexpected call")

func (f fakeDynamo) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.put == nil {
		return nil, errUnexpected
	}
	return f.put(in)
}

func (f fakeDynamo) BatchWriteItem(_ context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if f.batch == nil {
		return nil, errUnexpected
	}
	return f.batch(in)
}

func (f fakeDynamo) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if f.query == nil {
		return nil, errUnexpected
	}
	return f.query(in)
}

func (f fakeDynamo) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, errUnexpected
}

func (f fakeDynamo) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if f.get == nil {
		return nil, errUnexpected
	}
	return f.get(in)
}

// TestBatchWriteRetriesUnprocessedItems: the fake leaves items unprocessed on the first calls;
// Record resubmits them until every part is stored.
func TestBatchWriteRetriesUnprocessedItems(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stored := map[string]map[string]types.AttributeValue{}
	calls, refusals := 0, 0
	fake := fakeDynamo{batch: func(in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		reqs := in.RequestItems["t"]
		if len(reqs) > maxBatchWrite {
			return nil, fmt.Errorf("fake: %d requests in one call", len(reqs))
		}
		var unprocessed []types.WriteRequest
		for i, r := range reqs {
			// Refuse every other item on the first three calls.
			if calls <= 3 && i%2 == 1 {
				unprocessed = append(unprocessed, r)
				refusals++
				continue
			}
			stored[stringAttr(r.PutRequest.Item, schema.SortKey)] = r.PutRequest.Item
		}
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: map[string][]types.WriteRequest{"t": unprocessed}}, nil
	}}
	l := New(fake, "t", WithMaxItemBytes(1024))
	l.backoff = time.Millisecond
	const n = 3000
	if err := l.Record(context.Background(), testShard, Entry{First: seqAt(0), Last: seqAt(n - 1), Source: SourceConsumer, Done: ids(0, n-1)}); err != nil {
		t.Fatal(err)
	}
	if refusals == 0 || len(stored) <= maxBatchWrite {
		t.Fatalf("test did not exercise the path: %d refusals, %d parts", refusals, len(stored))
	}
	var all []recordid.ID
	for _, it := range stored {
		b, ok := it[attrIDs].(*types.AttributeValueMemberB)
		if !ok {
			t.Fatalf("part without binary ids: %v", it[attrIDs])
		}
		part, err := DecodeSet(b.Value, testShardID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, part...)
	}
	slices.SortFunc(all, recordid.Compare)
	if !slices.Equal(all, ids(0, n-1)) {
		t.Fatalf("stored %d ids, want %d", len(all), n)
	}
	t.Logf("%d parts, %d calls, %d refusals", len(stored), calls, refusals)
}

// TestBatchWriteGivesUpWhenContextEnds: items that stay unprocessed make Record fail once the
// context ends, never report success.
func TestBatchWriteGivesUpWhenContextEnds(t *testing.T) {
	t.Parallel()
	fake := fakeDynamo{batch: func(in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: in.RequestItems}, nil
	}}
	l := New(fake, "t", WithMaxItemBytes(1024))
	l.backoff = time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := l.Record(ctx, testShard, Entry{First: seqAt(0), Last: seqAt(999), Source: SourceConsumer, Done: ids(0, 999)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Record = %v, want context.DeadlineExceeded", err)
	}
}

func TestRecordItemTooLarge(t *testing.T) {
	t.Parallel()
	l := New(fakeDynamo{}, "t", WithMaxItemBytes(200))
	err := l.Record(context.Background(), testShard, Entry{First: seqAt(0), Last: seqAt(9), Source: SourceConsumer, Done: ids(0, 9)})
	if !errors.Is(err, ErrItemTooLarge) {
		t.Fatalf("Record = %v, want ErrItemTooLarge", err)
	}
}

// TestLookupSkipsCorruptEntries: an entry that does not decode is ignored and counted, the
// others still answer.
func TestLookupSkipsCorruptEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, client, _, table := newStackLedger(t)
	if err := l.Record(ctx, testShard, Entry{First: seqAt(0), Last: seqAt(4), Source: SourceConsumer, Done: ids(0, 4)}); err != nil {
		t.Fatal(err)
	}
	for i, bad := range []map[string]types.AttributeValue{
		{attrIDs: &types.AttributeValueMemberB{Value: []byte{1, 9, 9}}},
		{attrIDs: &types.AttributeValueMemberS{Value: "not binary"}},
		{schema.TTLAttribute: &types.AttributeValueMemberS{Value: "soon"}},
		{attrFailed: &types.AttributeValueMemberB{Value: []byte{7}}},
	} {
		item := map[string]types.AttributeValue{
			schema.PartitionKey: &types.AttributeValueMemberS{Value: partitionKey(testShard)},
			schema.SortKey:      &types.AttributeValueMemberS{Value: seqnum.MustEncode(seqAt(3)) + "#B#bad#" + fmt.Sprint(i)},
			attrFirstEnc:        &types.AttributeValueMemberS{Value: seqnum.MustEncode(seqAt(3))},
			attrIDs:             &types.AttributeValueMemberB{Value: mustSet(t, ids(5, 6))},
		}
		for k, v := range bad {
			item[k] = v
		}
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(9))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Corrupt != 4 || st.Entries != 1 {
		t.Fatalf("stats %+v, want 4 corrupt, 1 entry", st)
	}
	if !r.Done(rid(seqAt(4), 0)) || r.Done(rid(seqAt(5), 0)) || r.Len() != 5 {
		t.Fatalf("corrupt entries leaked: Len %d", r.Len())
	}
}

func mustSet(t testing.TB, ids []recordid.ID) []byte {
	b, err := AppendSet(nil, ids)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLookupPaginates serves the Query result in pages, as DynamoDB does above 1 MB.
func TestLookupPaginates(t *testing.T) {
	t.Parallel()
	item := func(k int64) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			schema.SortKey: &types.AttributeValueMemberS{Value: seqnum.MustEncode(seqAt(k)) + "#B#x#0"},
			attrIDs:        &types.AttributeValueMemberB{Value: mustSet(t, ids(k, k))},
		}
	}
	var starts []map[string]types.AttributeValue
	fake := fakeDynamo{query: func(in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		starts = append(starts, in.ExclusiveStartKey)
		if in.ExclusiveStartKey == nil {
			return &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{item(2), item(1)},
				LastEvaluatedKey: map[string]types.AttributeValue{"sk": &types.AttributeValueMemberS{Value: "page2"}}}, nil
		}
		return &dynamodb.QueryOutput{Items: []map[string]types.AttributeValue{item(3)}}, nil
	}}
	r, err := New(fake, "t").Lookup(context.Background(), testShard, seqAt(0), seqAt(9))
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 2 || stringAttr(starts[1], "sk") != "page2" {
		t.Fatalf("pages requested from %v", starts)
	}
	if st := r.Stats(); st.Pages != 2 || st.Entries != 3 || r.Len() != 3 {
		t.Fatalf("stats %+v", st)
	}
	var got []recordid.ID
	r.Each(func(id recordid.ID, _, _ bool) { got = append(got, id) })
	if !slices.Equal(got, ids(1, 3)) {
		t.Fatalf("Each = %v", got)
	}
}

func TestLookupQueryError(t *testing.T) {
	t.Parallel()
	boom := errors.New("throttled")
	fake := fakeDynamo{query: func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error) { return nil, boom }}
	if _, err := New(fake, "t").Lookup(context.Background(), testShard, seqAt(0), seqAt(1)); !errors.Is(err, boom) {
		t.Fatalf("Lookup = %v, want the query error", err)
	}
}
