package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/ddbsize"
)

var errValidation = errors.New("ValidationException")

// maxItemBytes is DynamoDB's item size limit (400 KB, attribute names and values together).
const maxItemBytes = 400 * 1024

// queryPageBytes is the 1 MB a Query or Scan page reads at most.
const queryPageBytes = 1 << 20

// Dynamo is an in-memory DynamoDB: tables keyed by a hash and an optional range attribute
// (both S), items kept exactly, the expression subset of expr.go evaluated exactly. It holds
// the state; the calls are made through a Client, which adds faults.
type Dynamo struct {
	mu     sync.Mutex
	tables map[string]*table
}

type table struct {
	hash, rng string
	keys      map[string][]string                                   // hash -> sorted range keys (nil: stale)
	parts     map[string]map[string]map[string]types.AttributeValue // hash -> range -> item
}

// NewDynamo returns a model with no tables.
func NewDynamo() *Dynamo { return &Dynamo{tables: map[string]*table{}} }

// CreateTable adds a table keyed by hash and rng ("" for a hash-only table).
func (d *Dynamo) CreateTable(name, hash, rng string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tables[name] = &table{hash: hash, rng: rng, keys: map[string][]string{}, parts: map[string]map[string]map[string]types.AttributeValue{}}
}

// Items returns a copy of every item of a table, in key order.
func (d *Dynamo) Items(name string) []map[string]types.AttributeValue {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tables[name]
	var out []map[string]types.AttributeValue
	for _, h := range sortedKeys(t.parts) {
		for _, r := range t.sorted(h) {
			out = append(out, clone(t.parts[h][r]))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sattr(item map[string]types.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func (d *Dynamo) table(name *string) (*table, error) {
	t, ok := d.tables[aws.ToString(name)]
	if !ok {
		return nil, &types.ResourceNotFoundException{Message: aws.String("table " + aws.ToString(name) + " not found")}
	}
	return t, nil
}

func (t *table) keyOf(item map[string]types.AttributeValue) (h, r string, err error) {
	h, ok := sattr(item, t.hash)
	if !ok {
		return "", "", fmt.Errorf("%w: missing key %s", errValidation, t.hash)
	}
	if t.rng != "" {
		if r, ok = sattr(item, t.rng); !ok {
			return "", "", fmt.Errorf("%w: missing key %s", errValidation, t.rng)
		}
	}
	return h, r, nil
}

func (t *table) get(h, r string) map[string]types.AttributeValue {
	return t.parts[h][r]
}

func (t *table) sorted(h string) []string {
	if ks, ok := t.keys[h]; ok {
		return ks
	}
	ks := sortedKeys(t.parts[h])
	t.keys[h] = ks
	return ks
}

// put stores item; a new range key is inserted into the partition's sorted keys in place
// (re-sorting a partition per new item was a tenth of the model's time in a profile).
func (t *table) put(h, r string, item map[string]types.AttributeValue) {
	if _, ok := t.parts[h][r]; !ok {
		if ks, ok := t.keys[h]; ok {
			i, _ := slices.BinarySearch(ks, r)
			t.keys[h] = slices.Insert(ks, i, r)
		}
	}
	p := t.parts[h]
	if p == nil {
		p = map[string]map[string]types.AttributeValue{}
		t.parts[h] = p
	}
	p[r] = item
}

func (t *table) del(h, r string) {
	if _, ok := t.parts[h][r]; ok {
		if ks, ok := t.keys[h]; ok {
			if i, found := slices.BinarySearch(ks, r); found {
				t.keys[h] = slices.Delete(ks, i, i+1)
			}
		}
	}
	delete(t.parts[h], r)
	if len(t.parts[h]) == 0 {
		delete(t.parts, h)
	}
}

func condFailed(old map[string]types.AttributeValue, rv types.ReturnValuesOnConditionCheckFailure) error {
	e := &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	if rv == types.ReturnValuesOnConditionCheckFailureAllOld && old != nil {
		e.Item = clone(old)
	}
	return e
}

func checkSize(item map[string]types.AttributeValue) error {
	if n := ddbsize.ItemSize(item); n > maxItemBytes {
		return fmt.Errorf("%w: Item size has exceeded the maximum allowed size (%d bytes)", errValidation, n)
	}
	return nil
}

// PutItem stores an item if its condition holds.
func (d *Dynamo) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	h, r, err := t.keyOf(in.Item)
	if err != nil {
		return nil, err
	}
	if err := checkSize(in.Item); err != nil {
		return nil, err
	}
	old := t.get(h, r)
	ok, err := evalCond(aws.ToString(in.ConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, old)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, condFailed(old, in.ReturnValuesOnConditionCheckFailure)
	}
	t.put(h, r, clone(in.Item))
	return &dynamodb.PutItemOutput{}, nil
}

// UpdateItem applies an update expression (creating the item) if its condition holds.
func (d *Dynamo) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	h, r, err := t.keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	old := t.get(h, r)
	ok, err := evalCond(aws.ToString(in.ConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, old)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, condFailed(old, in.ReturnValuesOnConditionCheckFailure)
	}
	base := old
	if base == nil {
		base = clone(in.Key)
	}
	next, err := applyUpdate(aws.ToString(in.UpdateExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, base)
	if err != nil {
		return nil, err
	}
	if err := checkSize(next); err != nil {
		return nil, err
	}
	t.put(h, r, next)
	out := &dynamodb.UpdateItemOutput{}
	switch in.ReturnValues {
	case types.ReturnValueAllNew, types.ReturnValueUpdatedNew:
		out.Attributes = clone(next)
	case types.ReturnValueAllOld, types.ReturnValueUpdatedOld:
		if old != nil {
			out.Attributes = clone(old)
		}
	}
	return out, nil
}

// GetItem reads one item (reads are always strongly consistent here).
func (d *Dynamo) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	h, r, err := t.keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	it, err := project(aws.ToString(in.ProjectionExpression), in.ExpressionAttributeNames, t.get(h, r))
	if err != nil {
		return nil, err
	}
	if it != nil {
		it = clone(it)
	}
	return &dynamodb.GetItemOutput{Item: it}, nil
}

// DeleteItem removes an item if its condition holds.
func (d *Dynamo) DeleteItem(_ context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	h, r, err := t.keyOf(in.Key)
	if err != nil {
		return nil, err
	}
	old := t.get(h, r)
	ok, err := evalCond(aws.ToString(in.ConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, old)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, condFailed(old, in.ReturnValuesOnConditionCheckFailure)
	}
	t.del(h, r)
	return &dynamodb.DeleteItemOutput{}, nil
}

// BatchWriteItem applies put and delete requests; unprocessed says which to hand back (the
// fault layer's partial result), by position.
func (d *Dynamo) batchWrite(in *dynamodb.BatchWriteItemInput, unprocessed func(i int) bool) (*dynamodb.BatchWriteItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := &dynamodb.BatchWriteItemOutput{UnprocessedItems: map[string][]types.WriteRequest{}}
	n := 0
	for _, name := range sortedKeys(in.RequestItems) {
		t, err := d.table(aws.String(name))
		if err != nil {
			return nil, err
		}
		for _, w := range in.RequestItems[name] {
			n++
			if n > 25 {
				return nil, fmt.Errorf("%w: too many items in BatchWriteItem", errValidation)
			}
			if unprocessed != nil && unprocessed(n-1) {
				out.UnprocessedItems[name] = append(out.UnprocessedItems[name], w)
				continue
			}
			switch {
			case w.PutRequest != nil:
				h, r, err := t.keyOf(w.PutRequest.Item)
				if err != nil {
					return nil, err
				}
				if err := checkSize(w.PutRequest.Item); err != nil {
					return nil, err
				}
				t.put(h, r, clone(w.PutRequest.Item))
			case w.DeleteRequest != nil:
				h, r, err := t.keyOf(w.DeleteRequest.Key)
				if err != nil {
					return nil, err
				}
				t.del(h, r)
			}
		}
	}
	return out, nil
}

// BatchWriteItem applies every request.
func (d *Dynamo) BatchWriteItem(_ context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return d.batchWrite(in, nil)
}

// BatchGetItem reads items (all of them: partial results come from the fault layer).
func (d *Dynamo) BatchGetItem(_ context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	for _, name := range sortedKeys(in.RequestItems) {
		ka := in.RequestItems[name]
		t, err := d.table(aws.String(name))
		if err != nil {
			return nil, err
		}
		for _, k := range ka.Keys {
			h, r, err := t.keyOf(k)
			if err != nil {
				return nil, err
			}
			it, err := project(aws.ToString(ka.ProjectionExpression), ka.ExpressionAttributeNames, t.get(h, r))
			if err != nil {
				return nil, err
			}
			if it != nil {
				out.Responses[name] = append(out.Responses[name], clone(it))
			}
		}
	}
	return out, nil
}

// Query reads one partition in range-key order: the key condition selects, Limit counts items
// read before the filter, a page stops at 1 MB, LastEvaluatedKey resumes.
func (d *Dynamo) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	pkv, ok := in.ExpressionAttributeValues[":pk"].(*types.AttributeValueMemberS)
	if !ok {
		return nil, fmt.Errorf("%w: query without :pk", errValidation)
	}
	part := t.parts[pkv.Value]
	rks := t.sorted(pkv.Value)
	// The key conditions gapless writes bound the range key from below (>= :from, BETWEEN
	// :from AND :upto): start there; every item is still checked against the condition.
	if from, ok := in.ExpressionAttributeValues[":from"].(*types.AttributeValueMemberS); ok && (in.ScanIndexForward == nil || *in.ScanIndexForward) {
		rks = rks[sort.SearchStrings(rks, from.Value):]
	}
	if in.ScanIndexForward != nil && !*in.ScanIndexForward {
		rks = slices.Clone(rks)
		for i, j := 0, len(rks)-1; i < j; i, j = i+1, j-1 {
			rks[i], rks[j] = rks[j], rks[i]
		}
	}
	var items []map[string]types.AttributeValue
	read, bytes := 0, 0
	start := ""
	if in.ExclusiveStartKey != nil {
		start, _ = sattr(in.ExclusiveStartKey, t.rng)
	}
	out := &dynamodb.QueryOutput{}
	for _, rk := range rks {
		if in.ExclusiveStartKey != nil {
			if (in.ScanIndexForward == nil || *in.ScanIndexForward) && rk <= start {
				continue
			}
			if in.ScanIndexForward != nil && !*in.ScanIndexForward && rk >= start {
				continue
			}
		}
		it := part[rk]
		ok, err := evalCond(aws.ToString(in.KeyConditionExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, it)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		read++
		bytes += ddbsize.ItemSize(it)
		ok, err = evalCond(aws.ToString(in.FilterExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, it)
		if err != nil {
			return nil, err
		}
		if ok {
			p, err := project(aws.ToString(in.ProjectionExpression), in.ExpressionAttributeNames, it)
			if err != nil {
				return nil, err
			}
			items = append(items, clone(p))
		}
		if (in.Limit != nil && read >= int(*in.Limit)) || bytes >= queryPageBytes {
			out.LastEvaluatedKey = map[string]types.AttributeValue{t.hash: pkv, t.rng: &types.AttributeValueMemberS{Value: rk}}
			break
		}
	}
	out.Items, out.Count, out.ScannedCount = items, int32(len(items)), int32(read)
	return out, nil
}

// Scan reads every item in key order with the same paging rules as Query.
func (d *Dynamo) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, err := d.table(in.TableName)
	if err != nil {
		return nil, err
	}
	type key struct{ h, r string }
	var keys []key
	for _, h := range sortedKeys(t.parts) {
		for _, r := range sortedKeys(t.parts[h]) {
			keys = append(keys, key{h, r})
		}
	}
	if in.ExclusiveStartKey != nil {
		h, _ := sattr(in.ExclusiveStartKey, t.hash)
		r, _ := sattr(in.ExclusiveStartKey, t.rng)
		i := sort.Search(len(keys), func(i int) bool {
			return keys[i].h > h || (keys[i].h == h && keys[i].r > r)
		})
		keys = keys[i:]
	}
	out := &dynamodb.ScanOutput{}
	read, bytes := 0, 0
	for _, k := range keys {
		it := t.parts[k.h][k.r]
		read++
		bytes += ddbsize.ItemSize(it)
		ok, err := evalCond(aws.ToString(in.FilterExpression), in.ExpressionAttributeNames, in.ExpressionAttributeValues, it)
		if err != nil {
			return nil, err
		}
		if ok {
			p, err := project(aws.ToString(in.ProjectionExpression), in.ExpressionAttributeNames, it)
			if err != nil {
				return nil, err
			}
			out.Items = append(out.Items, clone(p))
		}
		if (in.Limit != nil && read >= int(*in.Limit)) || bytes >= queryPageBytes {
			lek := map[string]types.AttributeValue{t.hash: &types.AttributeValueMemberS{Value: k.h}}
			if t.rng != "" {
				lek[t.rng] = &types.AttributeValueMemberS{Value: k.r}
			}
			out.LastEvaluatedKey = lek
			break
		}
	}
	out.Count, out.ScannedCount = int32(len(out.Items)), int32(read)
	return out, nil
}
