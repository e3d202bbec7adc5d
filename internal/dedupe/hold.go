package dedupe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// Key holds (ON_PARK=hold-key): once a record of a partition key is parked, the key is held and
// every later record of it is parked behind that record until `gapless redrive` applies them in
// order and releases the key. The hold is one item per (group, partition key) in the ledger
// table, so it is the same for every shard the key ever lands on (reshards) and for every
// reader (consumer, reconciler replays):
//
//	hold  pk = "H|" + group + "|" + key, or "HH|" + group + "|" + hex(SHA-256(key)) for a key
//	      that is not valid UTF-8 or makes pk longer than 2,048 bytes (the claim rule, claim.go)
//	      sk = "H"
//	      head (S, record id), held (L of S: record ids in the order they were parked, head
//	      first), n (N, length of held), applied (N, how many of held redrive applied), at (S)
//
// A hold has no expiresAt: it lasts until redrive releases it (a hold that expired while its
// records wait in the parked queue would let later records of the key overtake them).

// Hold item attributes.
const (
	holdSortKey      = "H"
	holdPrefix       = "H"
	holdHashedPrefix = "HH"
	attrHead         = "head"
	attrHeld         = "held"
	attrHeldN        = "n"
	attrApplied      = "applied"
	attrHeldAt       = "at"
	// maxBatchGet is BatchGetItem's limit of keys per call.
	maxBatchGet = 100
)

// Hold errors.
var (
	// ErrNoHold: Hold(create=false) found no hold for the key (it was released meanwhile).
	ErrNoHold = errors.New("dedupe: partition key is not held")
	// ErrHoldChanged: a conditional Applied or Release lost to a concurrent change of the hold
	// (records parked behind it meanwhile): read it again.
	ErrHoldChanged = errors.New("dedupe: hold changed meanwhile")
)

// HoldState is one held partition key.
type HoldState struct {
	Key  string
	Head recordid.ID
	// Held lists the record ids parked on the key in the order they were parked, head first. An
	// id may appear twice (a record parked again); its first place is its place in order.
	Held []recordid.ID
	// Applied is how many of Held a redrive has applied in order.
	Applied int
}

// holdAPI is the subset of *dynamodb.Client the hold store calls.
type holdAPI interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ holdAPI = (*dynamodb.Client)(nil)

// Holds reads and writes key holds in the ledger table. It is safe for concurrent use.
type Holds struct {
	client holdAPI
	table  string
	now    func() time.Time
}

// NewHolds returns the hold store of the ledger table (DEDUPE_TABLE).
func NewHolds(client holdAPI, table string) *Holds {
	return &Holds{client: client, table: table, now: time.Now}
}

// holdPartitionKey builds a hold's pk with the claim rule (see claimPartitionKey).
func holdPartitionKey(group, key string) (string, error) {
	return keyPartition(holdPrefix, holdHashedPrefix, group, key)
}

func holdKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: pk},
		schema.SortKey:      &types.AttributeValueMemberS{Value: holdSortKey},
	}
}

// Heads returns the head of every held key among keys (keys not held are absent), with
// strongly consistent reads: one BatchGetItem per 100 distinct keys, all in parallel, unprocessed
// keys retried. Each key costs one read capacity unit whether held or not ("Requests for
// nonexistent items consume the minimum read capacity units according to the type of read",
// BatchGetItem API reference), more only for a hold listing over ~60 records (4 KB).
func (h *Holds) Heads(ctx context.Context, group string, keys []string) (map[string]recordid.ID, error) {
	byPK := make(map[string]string, len(keys))
	var pks []string
	for _, k := range keys {
		pk, err := holdPartitionKey(group, k)
		if err != nil {
			return nil, fmt.Errorf("dedupe: hold heads: %w", err)
		}
		if _, ok := byPK[pk]; !ok {
			byPK[pk] = k
			pks = append(pks, pk)
		}
	}
	out := map[string]recordid.ID{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for start := 0; start < len(pks); start += maxBatchGet {
		chunk := pks[start:min(start+maxBatchGet, len(pks))]
		wg.Go(func() {
			items, err := h.batchGet(ctx, chunk)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, it := range items {
				pk, _ := it[schema.PartitionKey].(*types.AttributeValueMemberS)
				if pk == nil {
					errs = append(errs, fmt.Errorf("%w: hold without pk", ErrCorrupt))
					continue
				}
				head, err := holdHead(it)
				if err != nil {
					errs = append(errs, fmt.Errorf("dedupe: hold %s: %w", pk.Value, err))
					continue
				}
				out[byPK[pk.Value]] = head
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (h *Holds) batchGet(ctx context.Context, pks []string) ([]map[string]types.AttributeValue, error) {
	keys := make([]map[string]types.AttributeValue, len(pks))
	for i, pk := range pks {
		keys[i] = holdKey(pk)
	}
	req := map[string]types.KeysAndAttributes{h.table: {
		Keys: keys, ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#pk, #head"),
		ExpressionAttributeNames: map[string]string{"#pk": schema.PartitionKey, "#head": attrHead},
	}}
	var items []map[string]types.AttributeValue
	wait := 20 * time.Millisecond
	for try := 0; len(req) > 0; try++ {
		if try > 0 {
			if try > 8 {
				return nil, fmt.Errorf("dedupe: hold heads: keys still unprocessed after %d tries", try)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, time.Second)
		}
		out, err := h.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, fmt.Errorf("dedupe: hold heads: %w", err)
		}
		items = append(items, out.Responses[h.table]...)
		req = out.UnprocessedKeys
		if ka, ok := req[h.table]; ok && len(ka.Keys) == 0 {
			req = nil
		}
	}
	return items, nil
}

// Hold appends ids (in order) to key's hold and returns its head. With create, a key not held
// yet becomes held with ids[0] as its head; without, a key not held is ErrNoHold and nothing is
// written. One UpdateItem, atomic: of two records racing to become the head, one wins and the
// other is appended behind it.
func (h *Holds) Hold(ctx context.Context, group, key string, ids []recordid.ID, create bool) (recordid.ID, error) {
	pk, err := holdPartitionKey(group, key)
	if err != nil {
		return recordid.ID{}, fmt.Errorf("dedupe: hold: %w", err)
	}
	if len(ids) == 0 {
		return recordid.ID{}, fmt.Errorf("dedupe: hold %s: %w: no ids", pk, ErrInvalid)
	}
	list := make([]types.AttributeValue, len(ids))
	for i, id := range ids {
		if err := id.Validate(); err != nil {
			return recordid.ID{}, fmt.Errorf("dedupe: hold %s: %w: %w", pk, ErrInvalid, err)
		}
		list[i] = &types.AttributeValueMemberS{Value: id.String()}
	}
	in := &dynamodb.UpdateItemInput{
		TableName: &h.table, Key: holdKey(pk),
		UpdateExpression: aws.String("SET #head = if_not_exists(#head, :head), #held = list_append(if_not_exists(#held, :empty), :ids), " +
			"#n = if_not_exists(#n, :zero) + :k, #applied = if_not_exists(#applied, :zero), #at = if_not_exists(#at, :at)"),
		ExpressionAttributeNames: map[string]string{"#head": attrHead, "#held": attrHeld, "#n": attrHeldN, "#applied": attrApplied, "#at": attrHeldAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":head":  &types.AttributeValueMemberS{Value: ids[0].String()},
			":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":ids":   &types.AttributeValueMemberL{Value: list},
			":zero":  &types.AttributeValueMemberN{Value: "0"},
			":k":     &types.AttributeValueMemberN{Value: strconv.Itoa(len(ids))},
			":at":    &types.AttributeValueMemberS{Value: h.now().UTC().Format(time.RFC3339Nano)},
		},
		ReturnValues: types.ReturnValueAllNew, // (UPDATED_NEW omits an unchanged head on moto)
	}
	if !create {
		in.ConditionExpression = aws.String("attribute_exists(#head)")
	}
	out, err := h.client.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return recordid.ID{}, fmt.Errorf("dedupe: hold %s: %w", pk, ErrNoHold)
	case err != nil:
		return recordid.ID{}, fmt.Errorf("dedupe: hold %s: %w", pk, err)
	}
	head, err := holdHead(out.Attributes)
	if err != nil {
		return recordid.ID{}, fmt.Errorf("dedupe: hold %s: %w", pk, err)
	}
	return head, nil
}

// Get reads key's hold with a strongly consistent read; false when the key is not held.
func (h *Holds) Get(ctx context.Context, group, key string) (HoldState, bool, error) {
	pk, err := holdPartitionKey(group, key)
	if err != nil {
		return HoldState{}, false, fmt.Errorf("dedupe: hold: %w", err)
	}
	out, err := h.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &h.table, Key: holdKey(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return HoldState{}, false, fmt.Errorf("dedupe: hold %s: %w", pk, err)
	}
	if out.Item == nil {
		return HoldState{}, false, nil
	}
	st := HoldState{Key: key}
	if st.Head, err = holdHead(out.Item); err != nil {
		return HoldState{}, false, fmt.Errorf("dedupe: hold %s: %w", pk, err)
	}
	l, ok := out.Item[attrHeld].(*types.AttributeValueMemberL)
	if !ok {
		return HoldState{}, false, fmt.Errorf("dedupe: hold %s: %w: no held list", pk, ErrCorrupt)
	}
	for _, v := range l.Value {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return HoldState{}, false, fmt.Errorf("dedupe: hold %s: %w: held entry not a string", pk, ErrCorrupt)
		}
		id, err := recordid.Parse(s.Value)
		if err != nil {
			return HoldState{}, false, fmt.Errorf("dedupe: hold %s: %w: %w", pk, ErrCorrupt, err)
		}
		st.Held = append(st.Held, id)
	}
	if n, ok := out.Item[attrApplied].(*types.AttributeValueMemberN); ok {
		st.Applied, _ = strconv.Atoi(n.Value)
	}
	return st, true, nil
}

// Applied records that redrive applied the held records up to index to (exclusive), from index
// from: a conditional update, ErrHoldChanged when another redrive moved it meanwhile, ErrNoHold
// when the key is no longer held.
func (h *Holds) Applied(ctx context.Context, group, key string, from, to int) error {
	pk, err := holdPartitionKey(group, key)
	if err != nil {
		return fmt.Errorf("dedupe: hold: %w", err)
	}
	_, err = h.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &h.table, Key: holdKey(pk),
		UpdateExpression:         aws.String("SET #applied = :to"),
		ConditionExpression:      aws.String("attribute_exists(#head) AND #applied = :from"),
		ExpressionAttributeNames: map[string]string{"#applied": attrApplied, "#head": attrHead},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":to":   &types.AttributeValueMemberN{Value: strconv.Itoa(to)},
			":from": &types.AttributeValueMemberN{Value: strconv.Itoa(from)},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("dedupe: hold %s applied %d->%d: %w", pk, from, to, ErrHoldChanged)
	case err != nil:
		return fmt.Errorf("dedupe: hold %s applied %d->%d: %w", pk, from, to, err)
	}
	return nil
}

// Release deletes key's hold if it still lists exactly n records: ErrHoldChanged when records
// were parked behind it meanwhile (they must be applied first). Releasing a key not held is nil.
func (h *Holds) Release(ctx context.Context, group, key string, n int) error {
	pk, err := holdPartitionKey(group, key)
	if err != nil {
		return fmt.Errorf("dedupe: hold: %w", err)
	}
	_, err = h.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &h.table, Key: holdKey(pk),
		ConditionExpression:       aws.String("attribute_not_exists(#n) OR #n = :n"),
		ExpressionAttributeNames:  map[string]string{"#n": attrHeldN},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: strconv.Itoa(n)}},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("dedupe: release hold %s at %d: %w", pk, n, ErrHoldChanged)
	case err != nil:
		return fmt.Errorf("dedupe: release hold %s: %w", pk, err)
	}
	return nil
}

func holdHead(it map[string]types.AttributeValue) (recordid.ID, error) {
	return recordAttr(it, attrHead, "hold head")
}
