package dedupe

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// spanSteps is MaxSpan in seqAt steps (2^96 / 2^80).
const spanSteps = 1 << 16

func TestSpanWindows(t *testing.T) {
	t.Parallel()
	w := func(a, b int64) window { return window{seqAt(a), seqAt(b)} }
	tests := []struct {
		name        string
		first, last int64
		ids         []int64
		want        []window
	}{
		{"exactly MaxSpan: one window", 0, spanSteps, []int64{0, 5, spanSteps}, []window{w(0, spanSteps)}},
		{"one step wider: cut", 0, spanSteps + 1, []int64{0, spanSteps + 1}, []window{w(0, 0), w(spanSteps+1, spanSteps+1)}},
		{"clusters far apart", 0, 300000, []int64{0, 1, 2, 100000, 100002, 300000},
			[]window{w(0, 2), w(100000, 100002), w(300000, 300000)}},
		{"last far past the ids: an empty window on last", 0, 200000, []int64{0, 1, 2}, []window{w(0, 2), w(200000, 200000)}},
		{"first far below the ids: no empty window on first", 0, 100001, []int64{100000, 100001}, []window{w(100000, 100001)}},
		{"a window takes everything within MaxSpan of its first", 0, 3 * spanSteps, []int64{0, spanSteps, spanSteps + 1, 2 * spanSteps, 3 * spanSteps},
			[]window{w(0, spanSteps), w(spanSteps+1, 2*spanSteps+1-1), w(3*spanSteps, 3*spanSteps)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in []recordid.ID
			for _, k := range tc.ids {
				in = append(in, rid(seqAt(k), 0))
			}
			got := spanWindows(seqAt(tc.first), seqAt(tc.last), in)
			if len(got) != len(tc.want) {
				t.Fatalf("windows %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("window %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestLookupUpperKey(t *testing.T) {
	t.Parallel()
	up, ok := lookupUpperKey(seqAt(10))
	if !ok || up != seqnum.MustEncode(seqAt(10+spanSteps))+"$" {
		t.Errorf("upper key %q %v", up, ok)
	}
	// Every key of an item ending at last + MaxSpan is below it, every key ending after is above.
	if !(seqnum.MustEncode(seqAt(10+spanSteps))+"#M#zz" < up && up < seqnum.MustEncode(seqAt(11+spanSteps))+"#B#0#0") {
		t.Error("upper key does not separate last + MaxSpan from the next sequence number")
	}
	if _, ok := lookupUpperKey(strings.Repeat("9", seqnum.MaxDigits)); ok {
		t.Error("an upper bound past 129 digits")
	}
}

// scanCounter sums the items each Query evaluated before its filter (ScannedCount): what
// DynamoDB reads and charges for.
type scanCounter struct {
	*dynamodb.Client
	mu      sync.Mutex
	scanned int32
}

func (c *scanCounter) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := c.Client.Query(ctx, in, opts...)
	if err == nil {
		c.mu.Lock()
		c.scanned += out.ScannedCount
		c.mu.Unlock()
	}
	return out, err
}

// TestBoundedLookupFindsWideEntries: entries spanning a page from far below and far above are
// found by the bounded Lookup, an entry written in the old layout (one item, whatever its
// span) is found when its span is within MaxSpan, and entries ending past last + MaxSpan are not
// read at all.
func TestBoundedLookupFindsWideEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := stacktest.LedgerTable(t)
	sc := &scanCounter{Client: stacktest.DynamoDB(t)}
	l := New(sc, table, WithLogger(quiet))
	const p0, p1 = 200000, 200020 // the page looked up

	// A: a batch from far below to far above the page (a sparse shard, or a replay range).
	a := Entry{First: seqAt(0), Last: seqAt(400000), Source: SourceConsumer,
		Done: []recordid.ID{rid(seqAt(0), 0), rid(seqAt(1), 0), rid(seqAt(p0), 0), rid(seqAt(p0), 1), rid(seqAt(400000), 0)}}
	a.Failed = []recordid.ID{rid(seqAt(p0+2), 0)}
	// B: wider than the page on both sides, narrower than MaxSpan: one item.
	b := Entry{First: seqAt(p0 - 30000), Last: seqAt(p1 + 30000), Source: SourceReconciler,
		Done: []recordid.ID{rid(seqAt(p0-30000), 0), rid(seqAt(p0+5), 0), rid(seqAt(p1+30000), 0)}}
	for _, e := range []Entry{a, b} {
		if err := l.Record(ctx, testShard, e); err != nil {
			t.Fatal(err)
		}
	}
	// C: written by the code before bounded lookups (one PutItem of one item), 60,000 steps
	// wide, ending past the page.
	old := map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: partitionKey(testShard)},
		schema.SortKey:      &types.AttributeValueMemberS{Value: seqnum.MustEncode(seqAt(p1+40000)) + "#B#0ldf0rmat#0"},
		attrFirst:           &types.AttributeValueMemberS{Value: seqAt(p0 - 20000)},
		attrLast:            &types.AttributeValueMemberS{Value: seqAt(p1 + 40000)},
		attrFirstEnc:        &types.AttributeValueMemberS{Value: seqnum.MustEncode(seqAt(p0 - 20000))},
		attrSource:          &types.AttributeValueMemberS{Value: SourceConsumer},
		schema.TTLAttribute: &types.AttributeValueMemberN{Value: strconv.FormatInt(l.now().Add(l.ttl).Unix(), 10)},
		attrIDs:             &types.AttributeValueMemberB{Value: mustSet(t, []recordid.ID{rid(seqAt(p0-20000), 0), rid(seqAt(p0+7), 0), rid(seqAt(p1+40000), 0)})},
	}
	if _, err := sc.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: old}); err != nil {
		t.Fatal(err)
	}
	// The tail: 50 entries wholly past last + MaxSpan, which an unbounded Query would read.
	for k := range int64(50) {
		s := seqAt(p1 + spanSteps + 1 + 10*k)
		if err := l.Record(ctx, testShard, Entry{First: s, Last: s, Source: SourceConsumer, Done: []recordid.ID{rid(s, 0)}}); err != nil {
			t.Fatal(err)
		}
	}

	// A was cut: its three clusters (0..1, the page's records, and 400000) are separate items.
	all, err := sc.Client.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": schema.PartitionKey},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: partitionKey(testShard)}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(all.Items); got != 3+1+1+50 {
		t.Fatalf("%d items in the partition, want 55 (A in 3 windows, B, C, 50 tail entries)", got)
	}

	sc.scanned = 0
	r, err := l.Lookup(ctx, testShard, seqAt(p0), seqAt(p1))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []recordid.ID{rid(seqAt(p0), 0), rid(seqAt(p0), 1), rid(seqAt(p0+5), 0), rid(seqAt(p0+7), 0)} {
		if !r.Done(id) {
			t.Errorf("%s not found done", id)
		}
	}
	if got := r.Attempts(rid(seqAt(p0+2), 0)); got != 1 {
		t.Errorf("attempts %d, want 1", got)
	}
	if r.Len() != 4 {
		t.Errorf("%d done ids in the page, want 4", r.Len())
	}
	// Read: A's middle item, B, C; none of A's item at 400000 (> last + MaxSpan) nor the tail.
	if sc.scanned != 3 || r.Stats().Entries != 3 {
		t.Errorf("lookup read %d items (%d entries returned), want 3: the tail past last + MaxSpan is not read", sc.scanned, r.Stats().Entries)
	}
	// The far ends of A are found from their own ranges.
	for _, k := range []int64{1, 400000} {
		r, err := l.Lookup(ctx, testShard, seqAt(k), seqAt(k))
		if err != nil || !r.Done(rid(seqAt(k), 0)) {
			t.Errorf("record at step %d: done %v, %v", k, err == nil && r.Done(rid(seqAt(k), 0)), err)
		}
	}
}

// TestCutEntryCompletesItsMarker: an entry cut into windows still completes its invocation's
// marker for every lookup that reads the marker, including one whose range ends before the
// window holding the entry's last sequence number begins.
func TestCutEntryCompletesItsMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, _, _, _ := newStackLedger(t)
	batch := []recordid.ID{rid(seqAt(0), 0), rid(seqAt(1), 0), rid(seqAt(200000), 0), rid(seqAt(200001), 0), rid(seqAt(250000), 0)}
	m := Marker{Nonce: "cutentry", First: seqAt(0), Last: seqAt(250000), IDs: batch, Started: l.now(), Deadline: l.now(), Source: SourceConsumer}
	if err := l.Mark(ctx, testShard, m); err != nil {
		t.Fatal(err)
	}
	// The last record was not run (held, say): the entry's ids stop at 200001, its last window
	// is the empty one on 250000.
	e := Entry{First: seqAt(0), Last: seqAt(250000), Done: batch[:4], Source: SourceConsumer, Nonce: "cutentry"}
	if err := l.Record(ctx, testShard, e); err != nil {
		t.Fatal(err)
	}
	r, err := l.Lookup(ctx, testShard, seqAt(200000), seqAt(200005))
	if err != nil {
		t.Fatal(err)
	}
	ms := r.Markers()
	if len(ms) != 1 || !ms[0].Completed {
		t.Fatalf("markers %+v, want the one marker, completed", ms)
	}
	if !r.Done(batch[2]) || !r.Done(batch[3]) {
		t.Error("the page's records are not done")
	}
}
