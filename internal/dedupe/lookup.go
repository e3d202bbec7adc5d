package dedupe

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Stats describe the reads behind one Lookup, for metrics.
type Stats struct {
	Pages   int // Query pages (1 unless DynamoDB's 1 MB page limit split the result)
	Entries int // live entry items read (a split entry counts each part)
	Expired int // items ignored because expiresAt < now
	Corrupt int // items ignored because they did not decode (logged)
	Bytes   int // DynamoDB size of all items returned
	IDs     int // distinct done ids in the range
	Markers int // live in-flight markers read (see Marker)
}

// Range is what the ledger knows about the records of one shard between two sequence numbers
// (inclusive): the ids some live entry accounted for, parked, and failed. It only answers for
// ids inside the range it was looked up for. A Range is read-only and safe for concurrent use.
type Range struct {
	shardID     string
	first, last string
	done        []key // sorted, unique
	parked      []key // sorted, unique
	byRef       []key // sorted, unique
	failed      []key // sorted, one element per entry listing the id
	markers     []MarkerState
	parks       []Park // in the order read (park.go)
	redriven    []key  // sorted, unique: processed by a redrive (RedriveProcessed)
	stats       Stats
}

// key is a record id within the range's shard.
type key struct {
	seq string
	sub uint32
}

func cmpKey(a, b key) int {
	if c := seqnum.Compare(a.seq, b.seq); c != 0 {
		return c
	}
	switch {
	case a.sub < b.sub:
		return -1
	case a.sub > b.sub:
		return 1
	}
	return 0
}

// Lookup reads every live entry of shard that overlaps first..last with one Query (more pages
// only when DynamoDB's 1 MB page limit forces them): key condition pk = shard's partition AND
// sk BETWEEN Encode(first) AND Encode(last + MaxSpan) + "$", filter firstEnc <= Encode(last).
// The upper bound is complete because no item spans more than MaxSpan (see MaxSpan). Entries with expiresAt before now are
// ignored, as are entries that do not decode (counted in Stats and logged: ignoring one can only
// cause a duplicate, never a loss).
func (l *Ledger) Lookup(ctx context.Context, shard recordid.Shard, first, last string) (*Range, error) {
	if err := shard.Validate(); err != nil {
		return nil, fmt.Errorf("dedupe: lookup: %w: %w", ErrInvalid, err)
	}
	firstEnc, err := seqnum.Encode(first)
	if err != nil {
		return nil, fmt.Errorf("dedupe: lookup %s: %w: first: %w", shard, ErrInvalid, err)
	}
	lastEnc, err := seqnum.Encode(last)
	if err != nil {
		return nil, fmt.Errorf("dedupe: lookup %s: %w: last: %w", shard, ErrInvalid, err)
	}
	if seqnum.Compare(first, last) > 0 {
		return nil, fmt.Errorf("dedupe: lookup %s: %w: first %s after last %s", shard, ErrInvalid, first, last)
	}
	lo, _ := parseDec(first)
	hi, _ := parseDec(last)
	now := l.now().Unix()

	b := rangeBuilder{lo: &lo, hi: &hi, shardID: shard.ShardID, first: first, last: last}
	// Bounded: no item spans more than MaxSpan, so none holding a record of first..last ends
	// after last + MaxSpan (docs/ledger.md, "Bounded lookups").
	keyCond := "#pk = :pk AND #sk >= :from"
	upper, bounded := lookupUpperKey(last)
	if bounded {
		keyCond = "#pk = :pk AND #sk BETWEEN :from AND :upto"
	}
	in := &dynamodb.QueryInput{
		TableName:              &l.table,
		KeyConditionExpression: aws.String(keyCond),
		FilterExpression:       aws.String("#fe <= :to"),
		ExpressionAttributeNames: map[string]string{
			"#pk": schema.PartitionKey, "#sk": schema.SortKey, "#fe": attrFirstEnc,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk":   &types.AttributeValueMemberS{Value: partitionKey(shard)},
			":from": &types.AttributeValueMemberS{Value: firstEnc},
			":to":   &types.AttributeValueMemberS{Value: lastEnc},
		},
		ConsistentRead: aws.Bool(l.consistentRead),
	}
	if bounded {
		in.ExpressionAttributeValues[":upto"] = &types.AttributeValueMemberS{Value: upper}
	}
	for {
		out, err := l.client.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("dedupe: lookup %s %s..%s: query: %w", shard, first, last, err)
		}
		b.stats.Pages++
		for _, it := range out.Items {
			b.stats.Bytes += ddbsize.ItemSize(it)
			if err := b.add(it, now); err != nil {
				b.stats.Corrupt++
				l.log.WarnContext(ctx, "ignoring corrupt ledger entry",
					"group", shard.Group, "stream", shard.Stream, "shard_id", shard.ShardID,
					"sk", stringAttr(it, schema.SortKey), "error", err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return b.build(shard.ShardID, first, last), nil
}

func stringAttr(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// rangeBuilder decodes entries into offsets of one shared digits buffer, so that a Lookup
// allocates one string for all sequence numbers instead of one per record.
type rangeBuilder struct {
	lo, hi   *dec
	buf      []byte
	lists    [4][]rawID // done, parked, byRef, failed
	entries  [4]int     // entries that contributed to each list (sorting needed when > 1)
	stats    Stats
	markers  []MarkerState
	nonces   map[string]int64 // nonces of the entries read -> latest attrWritten (0: none)
	parks    []Park
	redriven []key
	shardID  string
	first    string
	last     string
}

var listAttrs = [4]string{attrIDs, attrParked, attrParkedRef, attrFailed}

// add decodes one item; on error nothing of it is kept.
func (b *rangeBuilder) add(it map[string]types.AttributeValue, now int64) error {
	entriesBefore := b.stats.Entries
	if v, ok := it[schema.TTLAttribute]; ok {
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return fmt.Errorf("%w: %s is not a number", ErrCorrupt, schema.TTLAttribute)
		}
		exp, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %s %q: %v", ErrCorrupt, schema.TTLAttribute, n.Value, err)
		}
		if exp < now {
			b.stats.Expired++
			return nil
		}
	}
	switch kind, nonce := parseSortKey(stringAttr(it, schema.SortKey)); kind {
	case kindMarker:
		if err := b.addMarker(it, nonce); err != nil {
			return err
		}
		b.stats.Markers++
		return nil
	case kindEntry:
		if b.nonces == nil {
			b.nonces = map[string]int64{}
		}
		var written int64
		if n, ok := it[attrWritten].(*types.AttributeValueMemberN); ok {
			written, _ = strconv.ParseInt(n.Value, 10, 64) // unparsable: unknown, as when absent
		}
		defer func() {
			if b.stats.Entries > entriesBefore {
				b.nonces[nonce] = max(b.nonces[nonce], written)
			}
		}()
	}
	bufLen := len(b.buf)
	var lens [4]int
	for i := range b.lists {
		lens[i] = len(b.lists[i])
	}
	undo := func() {
		b.buf = b.buf[:bufLen]
		for i := range b.lists {
			b.lists[i] = b.lists[i][:lens[i]]
		}
	}
	for i, name := range listAttrs {
		v, ok := it[name]
		if !ok {
			continue // absent set: empty
		}
		bin, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			undo()
			return fmt.Errorf("%w: %s is not binary", ErrCorrupt, name)
		}
		var err error
		b.buf, b.lists[i], err = decodeRaw(bin.Value, b.lo, b.hi, b.buf, b.lists[i])
		if err != nil {
			undo()
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if v, ok := it[attrParks]; ok {
		bin, ok := v.(*types.AttributeValueMemberB)
		if !ok {
			undo()
			return fmt.Errorf("%w: %s is not binary", ErrCorrupt, attrParks)
		}
		ps, err := decodeParks(bin.Value, b.shardID, b.first, b.last)
		if err != nil {
			undo()
			return err
		}
		b.parks = append(b.parks, ps...)
	}
	if stringAttr(it, attrSource) == SourceRedrive {
		// Done and not Parked in a redrive's entry: the redrive processed it (or found it a
		// business-key duplicate).
		for _, r := range b.lists[0][lens[0]:] {
			k := key{seq: string(b.buf[r.off:r.end]), sub: r.sub}
			parked := false
			for _, q := range b.lists[1][lens[1]:] {
				if q.sub == r.sub && string(b.buf[q.off:q.end]) == k.seq {
					parked = true
					break
				}
			}
			if !parked {
				b.redriven = append(b.redriven, k)
			}
		}
	}
	for i := range b.lists {
		if len(b.lists[i]) > lens[i] {
			b.entries[i]++
		}
	}
	b.stats.Entries++
	return nil
}

func (b *rangeBuilder) build(shardID, first, last string) *Range {
	digits := string(b.buf)
	var out [4][]key
	for i, raw := range b.lists {
		keys := make([]key, len(raw))
		for j, r := range raw {
			keys[j] = key{seq: digits[r.off:r.end], sub: r.sub}
		}
		if b.entries[i] > 1 {
			if !slices.IsSortedFunc(keys, cmpKey) {
				slices.SortFunc(keys, cmpKey)
			}
			if i != 3 { // failed keeps one element per entry: that is the attempt count
				keys = slices.CompactFunc(keys, func(a, b key) bool { return cmpKey(a, b) == 0 })
			}
		}
		out[i] = keys
	}
	for i := range b.markers {
		m := &b.markers[i]
		if written, ok := b.nonces[m.Nonce]; ok {
			m.Completed = true
			if written > 0 {
				m.CompletedAt = time.UnixMilli(written)
			}
		}
		for j := range m.IDs {
			m.IDs[j].ShardID = shardID
		}
	}
	r := &Range{shardID: shardID, first: first, last: last,
		done: out[0], parked: out[1], byRef: out[2], failed: out[3], markers: b.markers, parks: b.parks, stats: b.stats}
	slices.SortFunc(b.redriven, cmpKey)
	r.redriven = slices.CompactFunc(b.redriven, func(a, b key) bool { return cmpKey(a, b) == 0 })
	r.stats.IDs = len(r.done)
	return r
}

func (r *Range) find(list []key, id recordid.ID) (int, bool) {
	if id.ShardID != r.shardID {
		return 0, false
	}
	return slices.BinarySearchFunc(list, key{seq: id.Seq, sub: id.Sub}, cmpKey)
}

// Done reports whether some live entry accounted for id (processed or parked).
func (r *Range) Done(id recordid.ID) bool {
	_, ok := r.find(r.done, id)
	return ok
}

// Parked reports whether id was parked (with or without its payload).
func (r *Range) Parked(id recordid.ID) bool {
	_, ok := r.find(r.parked, id)
	return ok
}

// RedriveProcessed reports whether a redrive processed id: an entry of source redrive lists it
// done and not parked. A parked record stays Parked after it is redriven; this tells that its
// redrive is over, so a redrive that lost a response does not apply it again.
func (r *Range) RedriveProcessed(id recordid.ID) bool {
	_, ok := r.find(r.redriven, id)
	return ok
}

// ParkedByRef reports whether id was parked without its payload (only a reference).
func (r *Range) ParkedByRef(id recordid.ID) bool {
	_, ok := r.find(r.byRef, id)
	return ok
}

// Attempts is the number of failed attempts recorded for id: the number of live entries that
// list it as failed.
func (r *Range) Attempts(id recordid.ID) int {
	i, ok := r.find(r.failed, id)
	if !ok {
		return 0
	}
	n := 0
	k := key{seq: id.Seq, sub: id.Sub}
	for ; i < len(r.failed) && cmpKey(r.failed[i], k) == 0; i++ {
		n++
	}
	return n
}

// Each calls fn for every done id in the range, in (sequence, sub-index) order.
func (r *Range) Each(fn func(id recordid.ID, parked, byRef bool)) {
	p, q := 0, 0
	for _, k := range r.done {
		for p < len(r.parked) && cmpKey(r.parked[p], k) < 0 {
			p++
		}
		for q < len(r.byRef) && cmpKey(r.byRef[q], k) < 0 {
			q++
		}
		parked := p < len(r.parked) && cmpKey(r.parked[p], k) == 0
		byRef := q < len(r.byRef) && cmpKey(r.byRef[q], k) == 0
		fn(recordid.ID{ShardID: r.shardID, Seq: k.seq, Sub: k.sub}, parked, byRef)
	}
}

// Len is the number of distinct done ids in the range.
func (r *Range) Len() int { return len(r.done) }

// Bounds returns the sequence range the Range was looked up for.
func (r *Range) Bounds() (first, last string) { return r.first, r.last }

// Stats describes the reads behind the Range.
func (r *Range) Stats() Stats { return r.stats }
