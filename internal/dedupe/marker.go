package dedupe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Attribute names of an in-flight marker (sk = Encode(last) + "#M#" + nonce). firstEnc and
// expiresAt are shared with batch entries, so Lookup's one Query finds both.
const (
	attrInFlight = "inflight" // B: set of the record ids the invocation is about to process
	attrDeadline = "dl"       // N: the invocation's deadline, Unix milliseconds
	attrStarted  = "st"       // N: when the invocation started, Unix milliseconds
)

// Sort-key kinds.
const (
	kindEntry  = "B"
	kindMarker = "M"
)

// Marker is the durable trace an invocation leaves before it runs Process: the exact record ids
// it is about to work on and the deadline past which, without an entry of the same Nonce, it is
// presumed dead (crashed, killed, timed out). The entry the invocation writes at the end names
// the same Nonce (Entry.Nonce) and so completes the marker; nothing is deleted.
type Marker struct {
	Nonce       string // [0-9a-zA-Z]{1,64}; the invocation's entry uses the same nonce
	First, Last string // sequence range of IDs (inclusive)
	IDs         []recordid.ID
	Started     time.Time
	Deadline    time.Time
	Source      string
}

// MarkerState is a marker as Lookup found it.
type MarkerState struct {
	// Marker is the marker as written, except: First and Last are "" when the item's keys do
	// not decode, and IDs holds only its ids inside the looked-up range, sorted.
	Marker
	Size int // all its ids, inside the range or not
	// Completed: an entry with the marker's nonce was read by the same Lookup (the invocation
	// recorded its outcome).
	Completed bool
	// CompletedAt is when that entry was written, by the writer's clock (zero: an entry
	// written without the time).
	CompletedAt time.Time
}

func validNonce(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// NewNonce returns a random nonce for an invocation's marker and entry.
func NewNonce() string { return randomNonce() }

// Validate reports whether Mark accepts m for shard (nonce, source, range, ids of the shard
// inside it), without writing anything. An in-memory ledger standing in for this one refuses
// what it refuses.
func (m Marker) Validate(shard recordid.Shard) error {
	_, err := validateMarker(shard, m)
	return err
}

// validateMarker checks m and returns its ids sorted.
func validateMarker(shard recordid.Shard, m Marker) ([]recordid.ID, error) {
	if err := shard.Validate(); err != nil {
		return nil, fmt.Errorf("dedupe: mark: %w: %w", ErrInvalid, err)
	}
	if !validNonce(m.Nonce) {
		return nil, fmt.Errorf("dedupe: mark %s: %w: nonce %q", shard, ErrInvalid, m.Nonce)
	}
	switch m.Source {
	case SourceConsumer, SourceReconciler, SourceRedrive:
	default:
		return nil, fmt.Errorf("dedupe: mark %s: %w: source %q", shard, ErrInvalid, m.Source)
	}
	for _, v := range []struct{ name, seq string }{{"first", m.First}, {"last", m.Last}} {
		if err := seqnum.Validate(v.seq); err != nil {
			return nil, fmt.Errorf("dedupe: mark %s: %w: %s: %w", shard, ErrInvalid, v.name, err)
		}
	}
	ids, err := sortedUnique(m.IDs)
	if err != nil {
		return nil, fmt.Errorf("dedupe: mark %s: %w", shard, err)
	}
	for _, id := range ids {
		if id.ShardID != shard.ShardID || seqnum.Compare(id.Seq, m.First) < 0 || seqnum.Compare(id.Seq, m.Last) > 0 {
			return nil, fmt.Errorf("dedupe: mark %s: %w: record %s outside %s..%s of the shard", shard, ErrInvalid, id, m.First, m.Last)
		}
	}
	return ids, nil
}

// Mark writes m for shard with one PutItem (an overwrite of the same nonce replaces it: an
// invocation narrowing what it will run rewrites its marker).
func (l *Ledger) Mark(ctx context.Context, shard recordid.Shard, m Marker) error {
	ids, err := validateMarker(shard, m)
	if err != nil {
		return err
	}
	firstEnc, _ := seqnum.Encode(m.First) // validated
	lastEnc, _ := seqnum.Encode(m.Last)
	item := map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: partitionKey(shard)},
		schema.SortKey:      &types.AttributeValueMemberS{Value: lastEnc + "#" + kindMarker + "#" + m.Nonce},
		attrFirstEnc:        &types.AttributeValueMemberS{Value: firstEnc},
		attrInFlight:        &types.AttributeValueMemberB{Value: appendSorted(nil, ids)},
		attrDeadline:        &types.AttributeValueMemberN{Value: strconv.FormatInt(m.Deadline.UnixMilli(), 10)},
		attrStarted:         &types.AttributeValueMemberN{Value: strconv.FormatInt(m.Started.UnixMilli(), 10)},
		attrSource:          &types.AttributeValueMemberS{Value: m.Source},
		schema.TTLAttribute: &types.AttributeValueMemberN{Value: strconv.FormatInt(l.now().Add(l.ttl).Unix(), 10)},
	}
	if n := ddbsize.ItemSize(item); n > l.maxItem {
		// Markers are not split: a batch this large (huge KPL aggregates) runs without one.
		return fmt.Errorf("dedupe: mark %s %s..%s: %w: %d ids need %d bytes, budget %d", shard, m.First, m.Last, ErrItemTooLarge, len(ids), n, l.maxItem)
	}
	if _, err := l.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &l.table, Item: item}); err != nil {
		return fmt.Errorf("dedupe: put marker %s %s..%s: %w", shard, m.First, m.Last, err)
	}
	return nil
}

// parseSortKey splits an item's sort key into its kind (kindEntry, kindMarker) and nonce.
func parseSortKey(sk string) (kind, nonce string) {
	parts := strings.Split(sk, "#")
	if len(parts) < 3 {
		return "", ""
	}
	return parts[1], parts[2]
}

// addMarker decodes one marker item into b.
func (b *rangeBuilder) addMarker(it map[string]types.AttributeValue, nonce string) error {
	ms := func(name string) (time.Time, error) {
		v, ok := it[name].(*types.AttributeValueMemberN)
		if !ok {
			return time.Time{}, fmt.Errorf("%w: marker %s missing or not a number", ErrCorrupt, name)
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: marker %s %q: %v", ErrCorrupt, name, v.Value, err)
		}
		return time.UnixMilli(n), nil
	}
	dl, err := ms(attrDeadline)
	if err != nil {
		return err
	}
	st, err := ms(attrStarted)
	if err != nil {
		return err
	}
	bin, ok := it[attrInFlight].(*types.AttributeValueMemberB)
	if !ok {
		return fmt.Errorf("%w: marker %s missing or not binary", ErrCorrupt, attrInFlight)
	}
	all, raw, err := decodeRaw(bin.Value, b.lo, b.hi, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", attrInFlight, err)
	}
	size, err := (&setReader{b: bin.Value}).header()
	if err != nil {
		return fmt.Errorf("%s: %w", attrInFlight, err)
	}
	m := MarkerState{Marker: Marker{Nonce: nonce, Started: st, Deadline: dl, Source: stringAttr(it, attrSource)}, Size: int(size)}
	if first, err := seqnum.Decode(stringAttr(it, attrFirstEnc)); err == nil {
		m.First = first
	}
	if lastEnc, _, ok := strings.Cut(stringAttr(it, schema.SortKey), "#"); ok {
		if last, err := seqnum.Decode(lastEnc); err == nil {
			m.Last = last
		}
	}
	digits := string(all)
	m.IDs = make([]recordid.ID, len(raw))
	for i, r := range raw {
		m.IDs[i] = recordid.ID{Seq: digits[r.off:r.end], Sub: r.sub} // ShardID set in build
	}
	b.markers = append(b.markers, m)
	return nil
}

// Markers returns the markers overlapping the range, in the order the Query returned them
// (by last sequence number), with Completed set when the same Lookup read an entry of the same
// nonce. Expired and corrupt markers are left out, like entries.
func (r *Range) Markers() []MarkerState { return r.markers }

// Unmark deletes the marker of nonce ending at last (one DeleteItem; nothing when absent). An
// invocation that writes no entry (nothing to record, or a failed ledger write) releases its
// marker so it never reads as a death.
func (l *Ledger) Unmark(ctx context.Context, shard recordid.Shard, last, nonce string) error {
	if err := shard.Validate(); err != nil {
		return fmt.Errorf("dedupe: unmark: %w: %w", ErrInvalid, err)
	}
	lastEnc, err := seqnum.Encode(last)
	if err != nil {
		return fmt.Errorf("dedupe: unmark %s: %w: last: %w", shard, ErrInvalid, err)
	}
	if !validNonce(nonce) {
		return fmt.Errorf("dedupe: unmark %s: %w: nonce %q", shard, ErrInvalid, nonce)
	}
	_, err = l.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &l.table, Key: map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: partitionKey(shard)},
		schema.SortKey:      &types.AttributeValueMemberS{Value: lastEnc + "#" + kindMarker + "#" + nonce},
	}})
	if err != nil {
		return fmt.Errorf("dedupe: delete marker %s %s: %w", shard, last, err)
	}
	return nil
}
