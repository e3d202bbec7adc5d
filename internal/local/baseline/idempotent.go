package baseline

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// Attribute names and statuses of the Powertools DynamoDB persistence layer (its defaults).
const (
	AttrID                 = "id"
	AttrExpiration         = "expiration"
	AttrInProgressExpiry   = "in_progress_expiration"
	AttrStatus             = "status"
	AttrData               = "data"
	StatusInProgress       = "INPROGRESS"
	StatusCompleted        = "COMPLETED"
	DefaultExpiresAfter    = time.Hour // expires_after_seconds default 3600
	claimTries             = 3         // MAX_RETRIES = 2 after the first try
	completedResponseValue = "null"    // json.dumps(None): the record handler returns nothing
)

// DynamoAPI is what Idempotent calls on *dynamodb.Client.
type DynamoAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// WithFunctionName sets the key prefix (Powertools uses the function and handler names;
// default "baseline").
func WithFunctionName(name string) Option { return func(o *options) { o.functionName = name } }

// WithExpiresAfter sets how long a COMPLETED item protects its record (default one hour).
func WithExpiresAfter(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Second {
			o.expiresAfter = int64(d / time.Second)
		}
	}
}

// WithClock replaces the wall clock (epoch milliseconds) for expiry decisions (tests).
func WithClock(nowMillis func() int64) Option { return func(o *options) { o.now = nowMillis } }

func nowMillis() int64 { return time.Now().UnixMilli() }

// Key is the idempotency key of a Kinesis record: "<function name>#" + md5 hex of the JSON of
// its eventID, as Powertools builds it with event_key_jmespath = "eventID".
func Key(functionName, eventID string) string {
	js, _ := json.Marshal(eventID) // a string always marshals
	sum := md5.Sum(js)
	return functionName + "#" + hex.EncodeToString(sum[:])
}

// Idempotent returns the handler with Powertools' record-level idempotency over table (see the
// package doc for the exact requests). process runs at most once per record while its item is
// alive, except after a crash between Process and the COMPLETED write once the in-progress
// expiry (the invocation's deadline) has passed.
func Idempotent(client DynamoAPI, table string, process pipeline.ProcessFunc, opts ...Option) Handler {
	o := newOptions(opts)
	s := &store{client: client, table: table, o: o}
	return o.handler(func(ctx context.Context, raw *events.KinesisEventRecord, r pipeline.Record) error {
		key := Key(o.functionName, raw.EventID)
		done, err := s.claim(ctx, key)
		if err != nil {
			return err
		}
		if done {
			o.stats.Duplicates.Add(1)
			return nil
		}
		if perr := call(ctx, process, r); perr != nil {
			if derr := s.delete(ctx, key); derr != nil {
				return errors.Join(perr, derr)
			}
			return perr
		}
		o.stats.Processed.Add(1)
		return s.complete(ctx, key)
	})
}

type store struct {
	client DynamoAPI
	table  string
	o      *options
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrID: &types.AttributeValueMemberS{Value: key}}
}

// claim writes the INPROGRESS item. done is true when the record is already COMPLETED.
func (s *store) claim(ctx context.Context, key string) (done bool, err error) {
	for range claimTries {
		now := s.o.now()
		item := map[string]types.AttributeValue{
			AttrID:         &types.AttributeValueMemberS{Value: key},
			AttrExpiration: num(now/1000 + s.o.expiresAfter),
			AttrStatus:     &types.AttributeValueMemberS{Value: StatusInProgress},
		}
		if dl, ok := ctx.Deadline(); ok { // now + remaining invocation time
			item[AttrInProgressExpiry] = num(dl.UnixMilli())
		}
		_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(s.table),
			Item:      item,
			ConditionExpression: aws.String("attribute_not_exists(#id) OR #expiry < :now OR " +
				"(#status = :inprogress AND attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)"),
			ExpressionAttributeNames: map[string]string{
				"#id": AttrID, "#expiry": AttrExpiration, "#status": AttrStatus, "#in_progress_expiry": AttrInProgressExpiry,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now": num(now / 1000), ":now_in_millis": num(now),
				":inprogress": &types.AttributeValueMemberS{Value: StatusInProgress},
			},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return false, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return false, fmt.Errorf("%w: put INPROGRESS %s: %w", ErrPersistence, key, err)
		}
		old := ccf.Item
		if old == nil { // the endpoint did not return the item (dynalite): read it
			out, gerr := s.client.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(s.table), Key: keyOf(key), ConsistentRead: aws.Bool(true),
			})
			if gerr != nil {
				return false, fmt.Errorf("%w: get %s: %w", ErrPersistence, key, gerr)
			}
			old = out.Item
		}
		if old == nil {
			continue // deleted in between: inconsistent state, try again
		}
		now = s.o.now()
		if exp, ok := numAttr(old, AttrExpiration); ok && exp < now/1000 {
			continue // expired in between
		}
		status, _ := old[AttrStatus].(*types.AttributeValueMemberS)
		switch {
		case status != nil && status.Value == StatusCompleted:
			return true, nil
		case status != nil && status.Value == StatusInProgress:
			if ip, ok := numAttr(old, AttrInProgressExpiry); ok && ip < now {
				continue // the holder's invocation is over
			}
			return false, fmt.Errorf("%w: %s", ErrInProgress, key)
		default:
			return false, fmt.Errorf("%w: item %s has no known status", ErrPersistence, key)
		}
	}
	return false, fmt.Errorf("%w: %s: state kept changing after %d tries", ErrPersistence, key, claimTries)
}

// complete is save_success: the item becomes COMPLETED with the (empty) response.
func (s *store) complete(ctx context.Context, key string) error {
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              keyOf(key),
		UpdateExpression: aws.String("SET #response_data = :response_data, #expiry = :expiry, #status = :status"),
		ExpressionAttributeNames: map[string]string{
			"#response_data": AttrData, "#expiry": AttrExpiration, "#status": AttrStatus,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":response_data": &types.AttributeValueMemberS{Value: completedResponseValue},
			":expiry":        num(s.o.now()/1000 + s.o.expiresAfter),
			":status":        &types.AttributeValueMemberS{Value: StatusCompleted},
		},
	})
	if err != nil {
		return fmt.Errorf("%w: update COMPLETED %s: %w", ErrPersistence, key, err)
	}
	return nil
}

// delete is delete_record: Process failed, so a retry must run it again.
func (s *store) delete(ctx context.Context, key string) error {
	if _, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: keyOf(key)}); err != nil {
		return fmt.Errorf("%w: delete %s: %w", ErrPersistence, key, err)
	}
	return nil
}

func numAttr(item map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}
