package dedupe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// claimSortKey is the sort key of every claim item.
const claimSortKey = "K"

// First parts of claim partition keys: the key itself, or its SHA-256 (see claimPartitionKey).
const (
	claimPrefix       = "K"
	claimHashedPrefix = "KH"
)

// maxPartitionKeyBytes is DynamoDB's limit on a partition key value.
const maxPartitionKeyBytes = 2048

// ErrInvalidKey: a business key that can never be claimed (the empty key). It is the record's
// own fault, unlike a throttle or an outage: retrying cannot help. Wrapped together with ErrInvalid.
var ErrInvalidKey = errors.New("dedupe: invalid business key")

// claimTries bounds the claim/read-back loop when the competing claim vanishes (expires or is
// deleted) between the failed put and the read.
const claimTries = 3

// ClaimResult is the outcome of a business-key claim.
type ClaimResult struct {
	// Duplicate is true when another record id holds a live claim on the key.
	Duplicate bool
	// Owner is the record id holding the claim: the caller's id unless Duplicate.
	Owner recordid.ID
}

// Claim claims a business key of a consumer group for record id with one conditional PutItem
// (partition "K|group|key", or "KH|group|sha256" for a key too long for DynamoDB;
// sort key "K"): it succeeds when the key is unclaimed, already
// claimed by the same id (a retry of the same record, not a duplicate) or the claim has
// expired. Otherwise the result is Duplicate with the current owner, read from the failed
// condition's item (ReturnValuesOnConditionCheckFailure) or, where the endpoint does not return
// it, with a consistent GetItem. A successful claim lives for the ledger's TTL.
func (l *Ledger) Claim(ctx context.Context, group, bizKey string, id recordid.ID) (ClaimResult, error) {
	pk, err := claimPartitionKey(group, bizKey)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("dedupe: claim: %w", err)
	}
	if err := id.Validate(); err != nil {
		return ClaimResult{}, fmt.Errorf("dedupe: claim %s: %w: %w", pk, ErrInvalid, err)
	}
	me := id.String()
	for range claimTries {
		now := l.now()
		_, err := l.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &l.table,
			Item: map[string]types.AttributeValue{
				schema.PartitionKey: &types.AttributeValueMemberS{Value: pk},
				schema.SortKey:      &types.AttributeValueMemberS{Value: claimSortKey},
				attrOwner:           &types.AttributeValueMemberS{Value: me},
				schema.TTLAttribute: &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(l.ttl).Unix(), 10)},
			},
			ConditionExpression:      aws.String("attribute_not_exists(#pk) OR #owner = :me OR #exp < :now"),
			ExpressionAttributeNames: map[string]string{"#pk": schema.PartitionKey, "#owner": attrOwner, "#exp": schema.TTLAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":me":  &types.AttributeValueMemberS{Value: me},
				":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix(), 10)},
			},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return ClaimResult{Owner: id}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return ClaimResult{}, fmt.Errorf("dedupe: claim %s for %s: %w", pk, me, err)
		}
		current := ccf.Item
		if current == nil {
			out, err := l.client.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:      &l.table,
				ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{
					schema.PartitionKey: &types.AttributeValueMemberS{Value: pk},
					schema.SortKey:      &types.AttributeValueMemberS{Value: claimSortKey},
				},
			})
			if err != nil {
				return ClaimResult{}, fmt.Errorf("dedupe: claim %s for %s: read owner: %w", pk, me, err)
			}
			current = out.Item
		}
		if current == nil || claimExpired(current, l.now().Unix()) {
			continue // the competing claim is gone: try again
		}
		owner, err := claimOwner(current)
		if err != nil {
			return ClaimResult{}, fmt.Errorf("dedupe: claim %s: %w", pk, err)
		}
		return ClaimResult{Duplicate: owner != id, Owner: owner}, nil
	}
	return ClaimResult{}, fmt.Errorf("dedupe: claim %s for %s: competing claim kept changing after %d tries", pk, me, claimTries)
}

// claimPartitionKey validates group and key and builds the claim partition key: "K|group|key"
// when that is valid UTF-8 and fits DynamoDB's 2,048-byte partition key (readable in the table),
// otherwise "KH|group|" + hex(SHA-256(key)). Keys of any length and any bytes can be claimed: a
// key that could never be claimed would fail its record forever. The two forms cannot collide
// (their first parts differ and a group holds no separator); two long keys collide only if
// SHA-256 does.
func claimPartitionKey(group, bizKey string) (string, error) {
	if bizKey == "" && validGroup(group) {
		return "", fmt.Errorf("%w: %w: empty business key", ErrInvalid, ErrInvalidKey)
	}
	return keyPartition(claimPrefix, claimHashedPrefix, group, bizKey)
}

// keyPartition builds the partition key of an item per (group, user key), claims and holds:
// prefix|group|key when that is valid UTF-8 and fits DynamoDB's partition key, otherwise
// hashedPrefix|group|hex(SHA-256(key)) (see claimPartitionKey for why the forms cannot collide).
func keyPartition(prefix, hashedPrefix, group, key string) (string, error) {
	if !validGroup(group) {
		return "", fmt.Errorf("%w: group %q", ErrInvalid, group)
	}
	pk := prefix + recordid.Separator + group + recordid.Separator + key
	if len(pk) <= maxPartitionKeyBytes && utf8.ValidString(key) {
		return pk, nil
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + recordid.Separator + group + recordid.Separator + hex.EncodeToString(sum[:]), nil
}

func validGroup(group string) bool {
	return group != "" && !strings.Contains(group, recordid.Separator) && utf8.ValidString(group)
}

func claimExpired(it map[string]types.AttributeValue, now int64) bool {
	n, ok := it[schema.TTLAttribute].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	exp, err := strconv.ParseInt(n.Value, 10, 64)
	return err == nil && exp < now
}

func claimOwner(it map[string]types.AttributeValue) (recordid.ID, error) {
	return recordAttr(it, attrOwner, "claim owner")
}

// recordAttr reads the record id stored in attribute name of it (what names it in errors).
func recordAttr(it map[string]types.AttributeValue, name, what string) (recordid.ID, error) {
	s, ok := it[name].(*types.AttributeValueMemberS)
	if !ok {
		return recordid.ID{}, fmt.Errorf("%w: %s is not a string", ErrCorrupt, what)
	}
	id, err := recordid.Parse(s.Value)
	if err != nil {
		return recordid.ID{}, fmt.Errorf("%w: %s %q: %w", ErrCorrupt, what, s.Value, err)
	}
	return id, nil
}
