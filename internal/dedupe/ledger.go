// Package dedupe is gapless's ledger: what was really done, kept in DynamoDB.
//
// Every invocation that handles records of a shard writes one ledger entry for it (Record):
// the sequence range it covered and compact sets of the record ids it accounted for (Done),
// parked (Parked, and ParkedByRef for those parked without their payload) and failed to process
// (Failed). Before processing, one Query (Lookup) returns every entry overlapping the batch's
// range, which answers "already done?", "parked?" and "how many failed attempts so far?" for
// each record. Business-key claims (Claim) catch duplicates made by producer retries.
//
// # Table layout
//
// The table has string keys pk and sk and the TTL attribute expiresAt (internal/schema).
//
//	batch entry  pk = "L|" + group|stream|shard
//	             sk = seqnum.Encode(last) + "#B#" + nonce + "#" + part
//	             first, last, firstEnc (S), ids, parked, parkedRef, failed (B), src (S), wt (N), expiresAt (N)
//	claim        pk = "K|" + group + "|" + key, sk = "K", owner (S, record id), expiresAt (N)
//
// Sort keys start with the encoded last sequence number, and no item spans more than MaxSpan
// (wider entries are cut into windows), so Query(sk BETWEEN Encode(first) AND
// Encode(last+MaxSpan)+"$") finds every item holding a record of a range without reading the
// ledger's tail after it; the filter firstEnc <= Encode(last) keeps those that begin at or
// before its last. The nonce (random per Record call) keeps two
// invocations that end on the same record from overwriting each other. An entry whose encoded
// sets exceed the item budget (WithMaxItemBytes) is split into parts, each a self-contained
// entry covering its own ids, written with BatchWriteItem.
//
// # Set encoding
//
// ids, parked, parkedRef and failed hold sets of (sequence number, sub-index) in the format
// described at AppendSet: a version byte, a count, then per id a delta to the previous sequence
// number as significant bytes with whole zero bytes stripped, and the sub-index, all as minimal
// uvarints. A record of a typical Kinesis batch costs 3 bytes. DecodeSet rejects malformed input
// with ErrCorrupt and never panics.
//
// # Expiry
//
// DynamoDB deletes expired items lazily, hours or days late (and the local emulators never do):
// every read here treats expiresAt < now as absent, with now from WithClock.
package dedupe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid: bad input (shard, sequence numbers, ids outside the entry's range, subsets
	// that are not subsets, unknown source). Invalid sequence numbers also wrap
	// seqnum.ErrInvalid.
	ErrInvalid = errors.New("dedupe: invalid input")
	// ErrCorrupt: stored bytes or attributes that do not decode.
	ErrCorrupt = errors.New("dedupe: corrupt ledger data")
	// ErrItemTooLarge: a single record id cannot fit in the item budget.
	ErrItemTooLarge = errors.New("dedupe: ledger entry part exceeds the item budget")
)

// Sources of an entry (attribute src).
const (
	SourceConsumer   = "consumer"
	SourceReconciler = "reconciler"
	SourceRedrive    = "redrive"
)

// Attribute names of a batch entry.
const (
	attrFirst     = "first"
	attrLast      = "last"
	attrFirstEnc  = "firstEnc"
	attrIDs       = "ids"
	attrParked    = "parked"
	attrParkedRef = "parkedRef"
	attrFailed    = "failed"
	attrSource    = "src"
	attrOwner     = "owner"
	// attrWritten (N, Unix milliseconds) is when an entry that completes a marker (Entry.Nonce
	// given) was written: the end of the run that wrote the marker, which the marker alone
	// cannot tell (its deadline is capped by the invocation's, so the deadline less the lease
	// need not be its last renewal). MarkerState.CompletedAt.
	attrWritten = "wt"
)

// Defaults.
const (
	DefaultTTL = 192 * time.Hour
	// DefaultMaxItemBytes leaves headroom under DynamoDB's 400 KB item limit.
	DefaultMaxItemBytes = 350 * 1024
	// maxBatchWrite is BatchWriteItem's limit of put requests per call.
	maxBatchWrite = 25
)

// dynamoAPI is the subset of *dynamodb.Client the ledger calls.
type dynamoAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ dynamoAPI = (*dynamodb.Client)(nil)

// Ledger reads and writes ledger entries and claims in one table. It is safe for concurrent
// use.
type Ledger struct {
	client         dynamoAPI
	table          string
	ttl            time.Duration
	now            func() time.Time
	maxItem        int
	consistentRead bool
	log            *slog.Logger
	backoff        time.Duration // first wait before retrying unprocessed items
	maxBackoff     time.Duration
	nonce          func() string
	parkTTL        time.Duration // least lifetime of an item holding park records (park.go)
}

// Option configures a Ledger.
type Option func(*Ledger)

// WithTTL sets how long entries and claims live (default 192h). It must cover the stream's
// retention plus the reconciler's settle window.
func WithTTL(d time.Duration) Option { return func(l *Ledger) { l.ttl = d } }

// WithClock sets the clock used for expiresAt and for expiry checks on reads.
func WithClock(now func() time.Time) Option { return func(l *Ledger) { l.now = now } }

// WithMaxItemBytes sets the item budget above which an entry is split into parts (default
// 350 KB; DynamoDB's limit is 400 KB). Small values let tests force splits.
func WithMaxItemBytes(n int) Option { return func(l *Ledger) { l.maxItem = n } }

// WithConsistentRead chooses strongly consistent (default, true) or eventually consistent
// Lookup reads. Eventually consistent reads cost half but may miss an entry written a moment
// earlier, which turns into a duplicate delivery.
func WithConsistentRead(b bool) Option { return func(l *Ledger) { l.consistentRead = b } }

// WithLogger sets the logger for skipped corrupt entries (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(l *Ledger) { l.log = log } }

// New returns a ledger on table.
func New(client dynamoAPI, table string, opts ...Option) *Ledger {
	l := &Ledger{
		client:         client,
		table:          table,
		ttl:            DefaultTTL,
		now:            time.Now,
		maxItem:        DefaultMaxItemBytes,
		consistentRead: true,
		log:            slog.Default(),
		backoff:        50 * time.Millisecond,
		maxBackoff:     2 * time.Second,
		nonce:          randomNonce,
		parkTTL:        DefaultParkTTL,
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

func randomNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// partitionKey is the ledger partition of a shard.
func partitionKey(shard recordid.Shard) string { return "L" + recordid.Separator + shard.String() }

// Entry is what one invocation did on one shard.
type Entry struct {
	// First and Last are the Kinesis sequence range the invocation covered (its batch's first
	// and last record); every id below must lie in it.
	First, Last string
	// Done holds every id accounted for in this invocation: processed or parked.
	Done []recordid.ID
	// Parked ⊆ Done: parked with the payload.
	Parked []recordid.ID
	// ParkedByRef ⊆ Parked: parked without the payload (too large for SQS; only a reference).
	ParkedByRef []recordid.ID
	// Failed holds the ids that failed in this invocation; each entry listing an id counts as
	// one failed attempt. An id may also be in Done (e.g. parked after its last failure).
	Failed []recordid.ID
	// Source is SourceConsumer, SourceReconciler or SourceRedrive.
	Source string
	// Nonce, when set, is the nonce of the invocation's in-flight Marker: the entry completes
	// it. Empty: a random nonce.
	Nonce string
	// Parks are the parks of records in Parked (at most one each per entry; see park.go):
	// written in the same item as the record's id, so the ledger never counts a record done
	// by a park it does not know.
	Parks []Park
}

// entrySets are an Entry's sets, validated, sorted and unique.
type entrySets struct {
	done, parked, byRef, failed []recordid.ID
	parks                       []Park // sorted by id
}

// Validate reports whether Record accepts e for shard: its range, source and form (ids of the
// shard inside the range, sorted and unique once sorted, Parked within Done, ParkedByRef within
// Parked, well-formed parks of parked records), without writing anything. An in-memory ledger
// standing in for this one refuses what it refuses.
func (e Entry) Validate(shard recordid.Shard) error {
	_, err := validateEntry(shard, e)
	return err
}

func validateEntry(shard recordid.Shard, e Entry) (entrySets, error) {
	var s entrySets
	if err := shard.Validate(); err != nil {
		return s, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, v := range []struct{ name, seq string }{{"first", e.First}, {"last", e.Last}} {
		if err := seqnum.Validate(v.seq); err != nil {
			return s, fmt.Errorf("%w: %s: %w", ErrInvalid, v.name, err)
		}
	}
	if seqnum.Compare(e.First, e.Last) > 0 {
		return s, fmt.Errorf("%w: first %s after last %s", ErrInvalid, e.First, e.Last)
	}
	switch e.Source {
	case SourceConsumer, SourceReconciler, SourceRedrive:
	default:
		return s, fmt.Errorf("%w: source %q", ErrInvalid, e.Source)
	}
	var err error
	for _, v := range []struct {
		name string
		in   []recordid.ID
		out  *[]recordid.ID
	}{{attrIDs, e.Done, &s.done}, {attrParked, e.Parked, &s.parked}, {attrParkedRef, e.ParkedByRef, &s.byRef}, {attrFailed, e.Failed, &s.failed}} {
		for _, id := range v.in {
			if id.ShardID != shard.ShardID {
				return s, fmt.Errorf("%w: %s: record %s is not of shard %s", ErrInvalid, v.name, id, shard.ShardID)
			}
		}
		if *v.out, err = sortedUnique(v.in); err != nil {
			return s, fmt.Errorf("%s: %w", v.name, err)
		}
		for _, id := range *v.out {
			if seqnum.Compare(id.Seq, e.First) < 0 || seqnum.Compare(id.Seq, e.Last) > 0 {
				return s, fmt.Errorf("%w: %s: record %s outside the entry's range %s..%s", ErrInvalid, v.name, id, e.First, e.Last)
			}
		}
	}
	if id, ok := notSubset(s.parked, s.done); ok {
		return s, fmt.Errorf("%w: parked record %s is not in Done", ErrInvalid, id)
	}
	if id, ok := notSubset(s.byRef, s.parked); ok {
		return s, fmt.Errorf("%w: parked-by-reference record %s is not in Parked", ErrInvalid, id)
	}
	if s.parks, err = sortedParks(e.Parks, shard, s.parked); err != nil {
		return s, err
	}
	return s, nil
}

// notSubset returns an element of sub missing from super (both sorted and unique).
func notSubset(sub, super []recordid.ID) (recordid.ID, bool) {
	j := 0
	for _, id := range sub {
		for j < len(super) && recordid.Compare(super[j], id) < 0 {
			j++
		}
		if j == len(super) || recordid.Compare(super[j], id) != 0 {
			return id, true
		}
	}
	return recordid.ID{}, false
}

// Record stores e for shard. When the entry fits the item budget it is one PutItem; otherwise
// it is split into self-contained parts written with BatchWriteItem, unprocessed items being
// retried with backoff until stored or ctx ends. Record returns nil only when every part is
// stored. Parts stored before a failure stay: each is true on its own, so a retry of the
// whole entry only adds a duplicate record of the same facts.
func (l *Ledger) Record(ctx context.Context, shard recordid.Shard, e Entry) error {
	sets, err := validateEntry(shard, e)
	if err != nil {
		return fmt.Errorf("dedupe: record %s %s..%s: %w", shard, e.First, e.Last, err)
	}
	pk := partitionKey(shard)
	nonce := e.Nonce
	if nonce == "" {
		nonce = l.nonce()
	} else if !validNonce(nonce) {
		return fmt.Errorf("dedupe: record %s %s..%s: %w: nonce %q", shard, e.First, e.Last, ErrInvalid, nonce)
	}
	meta := entryMeta{expires: strconv.FormatInt(l.now().Add(l.ttl).Unix(), 10)}
	if e.Nonce != "" {
		meta.written = strconv.FormatInt(l.now().UnixMilli(), 10)
	}

	// One item per window of at most MaxSpan (one window unless the entry is wider), each
	// split further when it exceeds the item budget.
	var items []map[string]types.AttributeValue
	for _, w := range spanWindows(e.First, e.Last, mergeUnique(sets.done, sets.failed)) {
		ws := sets
		if w.first != e.First || w.last != e.Last {
			ws = entrySets{
				done: withinSeq(sets.done, w.first, w.last), parked: withinSeq(sets.parked, w.first, w.last),
				byRef: withinSeq(sets.byRef, w.first, w.last), failed: withinSeq(sets.failed, w.first, w.last),
				parks: parksWithinSeq(sets.parks, w.first, w.last),
			}
		}
		whole := l.item(pk, nonce, len(items), w.first, w.last, e.Source, meta, ws)
		if ddbsize.ItemSize(whole) <= l.maxItem {
			items = append(items, whole)
			continue
		}
		we := e
		we.First, we.Last = w.first, w.last
		parts, err := l.split(pk, nonce, len(items), we, meta, ws)
		if err != nil {
			return fmt.Errorf("dedupe: record %s %s..%s: %w", shard, e.First, e.Last, err)
		}
		items = append(items, parts...)
	}
	if len(items) == 1 {
		if _, err := l.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &l.table, Item: items[0]}); err != nil {
			return fmt.Errorf("dedupe: put entry %s %s..%s: %w", shard, e.First, e.Last, err)
		}
		return nil
	}
	// Every item of a cut entry carries the entry's own firstEnc: the Lookup filter
	// (firstEnc <= Encode(last)) then keeps the item keyed on the entry's last sequence number
	// whenever it keeps the invocation's marker (same first, same last), so the marker reads as
	// completed. Items whose own first is past a lookup's range pass the filter but hold no id
	// of it (ids are clipped to the range).
	entryFirstEnc, _ := seqnum.Encode(e.First) // validated
	for _, it := range items {
		it[attrFirstEnc] = &types.AttributeValueMemberS{Value: entryFirstEnc}
	}
	if err := l.batchWrite(ctx, items); err != nil {
		return fmt.Errorf("dedupe: write %d parts of %s %s..%s: %w", len(items), shard, e.First, e.Last, err)
	}
	return nil
}

// entryMeta are the scalar attributes every item of one entry carries.
type entryMeta struct {
	expires string // schema.TTLAttribute, Unix seconds
	written string // attrWritten, Unix ms; "" for an entry that completes no marker
}

// item builds one entry item.
func (l *Ledger) item(pk, nonce string, part int, first, last, source string, meta entryMeta, s entrySets) map[string]types.AttributeValue {
	lastEnc, _ := seqnum.Encode(last) // validated
	firstEnc, _ := seqnum.Encode(first)
	it := map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: pk},
		schema.SortKey:      &types.AttributeValueMemberS{Value: lastEnc + "#B#" + nonce + "#" + strconv.Itoa(part)},
		attrFirst:           &types.AttributeValueMemberS{Value: first},
		attrLast:            &types.AttributeValueMemberS{Value: last},
		attrFirstEnc:        &types.AttributeValueMemberS{Value: firstEnc},
		attrSource:          &types.AttributeValueMemberS{Value: source},
		schema.TTLAttribute: &types.AttributeValueMemberN{Value: meta.expires},
		attrIDs:             &types.AttributeValueMemberB{Value: appendSorted(nil, s.done)},
	}
	if meta.written != "" {
		it[attrWritten] = &types.AttributeValueMemberN{Value: meta.written}
	}
	// Empty optional sets are left out: absent means empty.
	for _, v := range []struct {
		name string
		ids  []recordid.ID
	}{{attrParked, s.parked}, {attrParkedRef, s.byRef}, {attrFailed, s.failed}} {
		if len(v.ids) > 0 {
			it[v.name] = &types.AttributeValueMemberB{Value: appendSorted(nil, v.ids)}
		}
	}
	if len(s.parks) > 0 {
		// The record confirming a parked message outlives the message (park.go).
		it[attrParks] = &types.AttributeValueMemberB{Value: encodeParks(s.parks)}
		if l.parkTTL > l.ttl {
			it[schema.TTLAttribute] = &types.AttributeValueMemberN{Value: strconv.FormatInt(l.now().Add(l.parkTTL).Unix(), 10)}
		}
	}
	return it
}

// split cuts an entry into parts that each fit the item budget, numbered from base. Parts cover consecutive slices
// of the union of all ids; part i's range is from its first id (the entry's First for part 0)
// to its last id (the entry's Last for the last part).
func (l *Ledger) split(pk, nonce string, base int, e Entry, meta entryMeta, s entrySets) ([]map[string]types.AttributeValue, error) {
	union := mergeUnique(s.done, s.failed) // parked ⊆ done, byRef ⊆ parked
	if len(union) == 0 {
		return nil, fmt.Errorf("%w: an entry without ids needs more than %d bytes", ErrItemTooLarge, l.maxItem)
	}
	total := encodedSize(s.done) + encodedSize(s.parked) + encodedSize(s.byRef) + encodedSize(s.failed)
	// Start from an even cut with 10% headroom, then halve any part still too large.
	budget := l.maxItem - l.fixedSize(pk, nonce, e, meta)
	if budget <= 0 {
		return nil, fmt.Errorf("%w: budget %d bytes leaves no room for ids", ErrItemTooLarge, l.maxItem)
	}
	n := max(1, (total*10/9+budget-1)/budget)
	var cuts [][2]int // [lo, hi) indexes into union
	for i := range n {
		lo, hi := len(union)*i/n, len(union)*(i+1)/n
		if hi > lo {
			cuts = append(cuts, [2]int{lo, hi})
		}
	}
	var parts []map[string]types.AttributeValue
	for len(cuts) > 0 {
		c := cuts[0]
		cuts = cuts[1:]
		first, last := e.First, e.Last
		if c[0] > 0 {
			first = union[c[0]].Seq
		}
		if c[1] < len(union) {
			last = union[c[1]-1].Seq
		}
		lo, hi := union[c[0]], union[c[1]-1]
		ps := entrySets{
			done:   within(s.done, lo, hi),
			parked: within(s.parked, lo, hi),
			byRef:  within(s.byRef, lo, hi),
			failed: within(s.failed, lo, hi),
			parks:  parksWithin(s.parks, lo, hi),
		}
		it := l.item(pk, nonce, base+len(parts), first, last, e.Source, meta, ps)
		if ddbsize.ItemSize(it) <= l.maxItem {
			parts = append(parts, it)
			continue
		}
		if c[1]-c[0] == 1 {
			return nil, fmt.Errorf("%w: record %s needs %d bytes, budget %d", ErrItemTooLarge, union[c[0]], ddbsize.ItemSize(it), l.maxItem)
		}
		mid := (c[0] + c[1]) / 2
		cuts = append([][2]int{{c[0], mid}, {mid, c[1]}}, cuts...)
	}
	return parts, nil
}

// fixedSize estimates the size of an entry item without its id sets: the keys and scalar
// attributes, room for a part's own first and last (up to 129 digits each) and the names and
// headers of the optional sets. It only sizes the first cut; every part is measured exactly.
func (l *Ledger) fixedSize(pk, nonce string, e Entry, meta entryMeta) int {
	it := l.item(pk, nonce, 999999, e.First, e.Last, e.Source, meta, entrySets{})
	return ddbsize.ItemSize(it) + 2*seqnum.MaxDigits + len(attrParked) + len(attrParkedRef) + len(attrFailed) + 3*maxVarintLen
}

// within returns the sub-slice of sorted ids between lo and hi inclusive.
func within(ids []recordid.ID, lo, hi recordid.ID) []recordid.ID {
	i, _ := binarySearchID(ids, lo)
	j, found := binarySearchID(ids, hi)
	if found {
		j++
	}
	return ids[i:j]
}

func binarySearchID(ids []recordid.ID, id recordid.ID) (int, bool) {
	lo, hi := 0, len(ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if recordid.Compare(ids[m], id) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ids) && recordid.Compare(ids[lo], id) == 0
}

// mergeUnique merges two sorted unique slices.
func mergeUnique(a, b []recordid.ID) []recordid.ID {
	out := make([]recordid.ID, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := recordid.Compare(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// batchWrite stores items with BatchWriteItem, 25 per call, retrying unprocessed items with
// exponential backoff until all are stored or ctx ends.
func (l *Ledger) batchWrite(ctx context.Context, items []map[string]types.AttributeValue) error {
	pending := make([]types.WriteRequest, len(items))
	for i, it := range items {
		pending[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
	}
	wait := l.backoff
	for len(pending) > 0 {
		n := min(len(pending), maxBatchWrite)
		chunk := pending[:n]
		out, err := l.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{l.table: chunk},
		})
		if err != nil {
			return fmt.Errorf("batch write: %w", err)
		}
		var unprocessed []types.WriteRequest
		if out != nil {
			unprocessed = out.UnprocessedItems[l.table]
		}
		pending = append(unprocessed, pending[n:]...)
		if len(unprocessed) == 0 {
			wait = l.backoff
			continue
		}
		// DynamoDB returns unprocessed items when throttled; back off before resubmitting.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("batch write: %d items unprocessed: %w", len(pending), ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, l.maxBackoff)
	}
	return nil
}
