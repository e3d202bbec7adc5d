package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// fakeDynamo is a function-typed fake: each method runs its function, or fails the test when
// the function is nil (a call the test did not expect). Calls are counted.
type fakeDynamo struct {
	t          *testing.T
	calls      atomic.Int64
	updateItem func(*dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error)
	getItem    func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error)
	query      func(*dynamodb.QueryInput) (*dynamodb.QueryOutput, error)
}

var errUnexpectedCall = errors.New("unexpected call")

func (f *fakeDynamo) UpdateItem(_ context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.calls.Add(1)
	if f.updateItem == nil {
		f.t.Errorf("unexpected UpdateItem %s", aws.ToString(in.UpdateExpression))
		return nil, errUnexpectedCall
	}
	return f.updateItem(in)
}

func (f *fakeDynamo) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.calls.Add(1)
	if f.getItem == nil {
		f.t.Error("unexpected GetItem")
		return nil, errUnexpectedCall
	}
	return f.getItem(in)
}

func (f *fakeDynamo) Query(_ context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.calls.Add(1)
	if f.query == nil {
		f.t.Error("unexpected Query")
		return nil, errUnexpectedCall
	}
	return f.query(in)
}

var unitShard = recordid.Shard{Group: "g", Stream: "orders", ShardID: "shardId-000000000001"}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

// TestInvalidInputsAreRejectedWithoutACall covers invalid sequence numbers and keys for every
// method: each is a clear error wrapping the right sentinel, and DynamoDB is never called.
func TestInvalidInputsAreRejectedWithoutACall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	badSeqs := []struct{ name, seq, want string }{
		{"empty", "", "empty"},
		{"leading zero", "0123", "leading zero"},
		{"non-digit", "12a4", "non-digit"},
		{"sign", "-1", "non-digit"},
		{"space", " 1", "non-digit"},
		{"130 digits", "1" + strings.Repeat("0", 129), "130 digits"},
	}
	type call struct {
		name string
		run  func(*checkpoint.Store, string) error
	}
	seqCalls := []call{
		{"Advance", func(st *checkpoint.Store, seq string) error { _, err := st.Advance(ctx, unitShard, seq); return err }},
		{"AdvanceWatermark", func(st *checkpoint.Store, seq string) error {
			_, err := st.AdvanceWatermark(ctx, unitShard, seq)
			return err
		}},
		{"MarkClosed", func(st *checkpoint.Store, seq string) error { return st.MarkClosed(ctx, unitShard, seq) }},
	}
	for _, c := range seqCalls {
		for _, b := range badSeqs {
			t.Run(c.name+"/"+b.name, func(t *testing.T) {
				fake := &fakeDynamo{t: t}
				err := c.run(checkpoint.New(fake, "tbl"), b.seq)
				if !errors.Is(err, seqnum.ErrInvalid) {
					t.Fatalf("err = %v, want one wrapping seqnum.ErrInvalid", err)
				}
				if !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), unitShard.String()) {
					t.Errorf("error %q should say %q and name the shard", err, b.want)
				}
				if got := fake.calls.Load(); got != 0 {
					t.Errorf("%d DynamoDB calls for an invalid sequence number", got)
				}
			})
		}
	}

	badShards := []recordid.Shard{
		{Group: "", Stream: "s", ShardID: "shardId-1"},
		{Group: "a|b", Stream: "s", ShardID: "shardId-1"},
		{Group: "g", Stream: "s|t", ShardID: "shardId-1"},
		{Group: "g", Stream: "s", ShardID: ""},
	}
	keyCalls := []struct {
		name string
		run  func(*checkpoint.Store, recordid.Shard) error
	}{
		{"Advance", func(st *checkpoint.Store, sh recordid.Shard) error { _, err := st.Advance(ctx, sh, "1"); return err }},
		{"AdvanceWatermark", func(st *checkpoint.Store, sh recordid.Shard) error {
			_, err := st.AdvanceWatermark(ctx, sh, "1")
			return err
		}},
		{"Get", func(st *checkpoint.Store, sh recordid.Shard) error { _, err := st.Get(ctx, sh); return err }},
		{"List", func(st *checkpoint.Store, sh recordid.Shard) error {
			_, err := st.List(ctx, sh.Group, sh.Stream)
			return err
		}},
		{"SetLineage", func(st *checkpoint.Store, sh recordid.Shard) error { return st.SetLineage(ctx, sh, nil) }},
		{"MarkClosed", func(st *checkpoint.Store, sh recordid.Shard) error { return st.MarkClosed(ctx, sh, "1") }},
		{"AddCounters", func(st *checkpoint.Store, sh recordid.Shard) error {
			return st.AddCounters(ctx, sh, checkpoint.Counters{Parked: 1})
		}},
	}
	for _, c := range keyCalls {
		for i, sh := range badShards {
			if c.name == "List" && sh.ShardID == "" {
				continue // List takes no shard id
			}
			t.Run(fmt.Sprintf("%s/bad shard %d", c.name, i), func(t *testing.T) {
				fake := &fakeDynamo{t: t}
				if err := c.run(checkpoint.New(fake, "tbl"), sh); !errors.Is(err, recordid.ErrInvalid) {
					t.Fatalf("err = %v, want one wrapping recordid.ErrInvalid", err)
				}
				if got := fake.calls.Load(); got != 0 {
					t.Errorf("%d DynamoDB calls for an invalid key", got)
				}
			})
		}
	}

	t.Run("SetLineage/bad parent", func(t *testing.T) {
		fake := &fakeDynamo{t: t}
		err := checkpoint.New(fake, "tbl").SetLineage(ctx, unitShard, []string{"shardId-000000000000", "a|b"})
		if !errors.Is(err, recordid.ErrInvalid) || fake.calls.Load() != 0 {
			t.Fatalf("err = %v, calls = %d", err, fake.calls.Load())
		}
	})
	t.Run("AddCounters/negative", func(t *testing.T) {
		fake := &fakeDynamo{t: t}
		err := checkpoint.New(fake, "tbl").AddCounters(ctx, unitShard, checkpoint.Counters{GapsReplayed: 2, Parked: -1})
		if err == nil || !strings.Contains(err.Error(), "parked") || fake.calls.Load() != 0 {
			t.Fatalf("err = %v, calls = %d", err, fake.calls.Load())
		}
	})
	t.Run("AddCounters/all zero", func(t *testing.T) {
		fake := &fakeDynamo{t: t}
		if err := checkpoint.New(fake, "tbl").AddCounters(ctx, unitShard, checkpoint.Counters{}); err != nil || fake.calls.Load() != 0 {
			t.Fatalf("err = %v, calls = %d", err, fake.calls.Load())
		}
	})
}

// TestAdvanceRequest pins the one UpdateItem an advance makes: encoded condition, raw and
// encoded values as strings (never Numbers), timestamp from the clock, the write counter for
// checkpoints only, and ALL_OLD on a failed condition.
func TestAdvanceRequest(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	seq := "49584571934843771141903627621785355615208059945070100482"
	cases := []struct {
		name        string
		advance     func(*checkpoint.Store) (checkpoint.Result, error)
		raw, enc    string
		atAttr      string
		wantCounter string
	}{
		{"checkpoint", func(st *checkpoint.Store) (checkpoint.Result, error) {
			return st.Advance(context.Background(), unitShard, seq)
		},
			"checkpoint", "checkpointEnc", "checkpointAt", "checkpointWrites"},
		{"watermark", func(st *checkpoint.Store) (checkpoint.Result, error) {
			return st.AdvanceWatermark(context.Background(), unitShard, seq)
		}, "watermark", "watermarkEnc", "watermarkAt", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *dynamodb.UpdateItemInput
			fake := &fakeDynamo{t: t, updateItem: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				got = in
				return &dynamodb.UpdateItemOutput{}, nil
			}}
			res, err := tc.advance(checkpoint.New(fake, "cp-table", checkpoint.WithClock(func() time.Time { return at })))
			if err != nil || !res.Advanced {
				t.Fatalf("res = %+v, err = %v", res, err)
			}
			if fake.calls.Load() != 1 {
				t.Fatalf("%d calls, want exactly one round trip", fake.calls.Load())
			}
			if aws.ToString(got.TableName) != "cp-table" {
				t.Errorf("table = %q", aws.ToString(got.TableName))
			}
			if pk, sk := got.Key["pk"], got.Key["sk"]; !equalS(pk, "g|orders") || !equalS(sk, "shardId-000000000001") {
				t.Errorf("key = %#v", got.Key)
			}
			names, values := got.ExpressionAttributeNames, got.ExpressionAttributeValues
			if cond := aws.ToString(got.ConditionExpression); cond != "attribute_not_exists(#enc) OR #enc < :enc" || names["#enc"] != tc.enc {
				t.Errorf("condition %q with #enc=%q, want comparison on %s", cond, names["#enc"], tc.enc)
			}
			if !equalS(values[":enc"], seqnum.MustEncode(seq)) || !equalS(values[":raw"], seq) || names["#raw"] != tc.raw {
				t.Errorf("values = %#v names = %#v", values, names)
			}
			if names["#at"] != tc.atAttr || !equalS(values[":at"], "2026-03-04T05:06:07.000000008Z") {
				t.Errorf("timestamp %s = %#v", names["#at"], values[":at"])
			}
			for k, v := range values {
				if _, isNum := v.(*types.AttributeValueMemberN); isNum && k != ":one" {
					t.Errorf("value %s is a DynamoDB Number", k)
				}
			}
			update := aws.ToString(got.UpdateExpression)
			if hasAdd := strings.Contains(update, "ADD #n :one"); hasAdd != (tc.wantCounter != "") || names["#n"] != tc.wantCounter {
				t.Errorf("update %q names %v, want counter %q", update, names, tc.wantCounter)
			}
			if got.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("ReturnValuesOnConditionCheckFailure = %q", got.ReturnValuesOnConditionCheckFailure)
			}
		})
	}
}

func equalS(av types.AttributeValue, want string) bool {
	v, ok := av.(*types.AttributeValueMemberS)
	return ok && v.Value == want
}

// TestAdvanceOutcomes translates UpdateItem outcomes: success, a lost race with and without
// the old item, an attempt whose answer was lost (the item holds the call's own token), and
// failures that must stay errors. Where no attempt was answered, the store reads the item; read
// says what that read finds: "" nothing, "other" another writer's token, "own" this call's, and
// "unread" that the case must not read.
func TestAdvanceOutcomes(t *testing.T) {
	t.Parallel()
	throttled := &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem",
		Err: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}}
	lostWithItem := &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem",
		Err: &types.ConditionalCheckFailedException{Item: map[string]types.AttributeValue{
			"checkpointEnc": s(seqnum.MustEncode("100")), "checkpoint": s("100"), "checkpointToken": s("another")}}}
	lostBareItem := &types.ConditionalCheckFailedException{}
	lostBadItem := &types.ConditionalCheckFailedException{Item: map[string]types.AttributeValue{"checkpointEnc": n("100")}}

	cases := []struct {
		name     string
		err      error
		read     string
		want     checkpoint.Result
		wantErr  bool
		errMatch func(error) bool
	}{
		{"written", nil, "", checkpoint.Result{Advanced: true}, false, nil},
		{"lost race, old item returned", lostWithItem, "", checkpoint.Result{Previous: "100"}, false, nil},
		{"lost race, no item (dynalite): no read", lostBareItem, "unread", checkpoint.Result{}, false, nil},
		{"lost race, unreadable item", lostBadItem, "", checkpoint.Result{}, false, nil},
		{"throttled after retries", throttled, "other", checkpoint.Result{}, true, func(err error) bool {
			var e *types.ProvisionedThroughputExceededException
			return errors.As(err, &e)
		}},
		{"no answer, but the read finds the write applied", throttled, "own", checkpoint.Result{Advanced: true}, false, nil},
		{"context canceled", context.Canceled, "", checkpoint.Result{}, true, func(err error) bool { return errors.Is(err, context.Canceled) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var token string
			fake := &fakeDynamo{t: t, updateItem: func(in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
				token = in.ExpressionAttributeValues[":tok"].(*types.AttributeValueMemberS).Value
				if tc.err != nil {
					return nil, tc.err
				}
				return &dynamodb.UpdateItemOutput{}, nil
			}, getItem: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				if tc.read == "unread" {
					t.Error("a failed condition without the item is read: a lost race costs one round trip more")
				}
				if !aws.ToBool(in.ConsistentRead) {
					t.Error("the read after a failed write is not consistent")
				}
				item := map[string]types.AttributeValue{"checkpointEnc": s(seqnum.MustEncode("100")), "checkpoint": s("100")}
				switch tc.read {
				case "":
					return &dynamodb.GetItemOutput{}, nil
				case "own": // this call's write of 99 landed
					item = map[string]types.AttributeValue{"checkpointEnc": s(seqnum.MustEncode("99")), "checkpoint": s("99"), "checkpointToken": s(token)}
				default:
					item["checkpointToken"] = s("another")
				}
				return &dynamodb.GetItemOutput{Item: item}, nil
			}}
			res, err := checkpoint.New(fake, "tbl").Advance(context.Background(), unitShard, "99")
			if res != tc.want {
				t.Errorf("result = %+v, want %+v", res, tc.want)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				if !tc.errMatch(err) {
					t.Errorf("error %v lost its cause", err)
				}
				for _, part := range []string{"advance checkpoint", unitShard.String(), "99"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not name %q", err, part)
					}
				}
			}
		})
	}
}

// TestDecodeRejectsMalformedItems: Get never turns a malformed item into a plausible State.
func TestDecodeRejectsMalformedItems(t *testing.T) {
	t.Parallel()
	base := func() map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			"pk": s("g|orders"), "sk": s("shardId-000000000001"),
			"checkpoint": s("10"), "checkpointEnc": s(seqnum.MustEncode("10")),
			"checkpointAt": s("2026-01-02T03:04:05Z"), "checkpointWrites": n("3"),
		}
	}
	cases := []struct {
		name   string
		mutate func(map[string]types.AttributeValue)
	}{
		{"checkpoint stored as a Number", func(m map[string]types.AttributeValue) { m["checkpointEnc"] = n("10") }},
		{"raw disagrees with encoding", func(m map[string]types.AttributeValue) { m["checkpoint"] = s("9") }},
		{"raw without encoding", func(m map[string]types.AttributeValue) { delete(m, "checkpointEnc") }},
		{"bad encoding", func(m map[string]types.AttributeValue) { m["checkpointEnc"] = s("0029") }},
		{"bad timestamp", func(m map[string]types.AttributeValue) { m["checkpointAt"] = s("yesterday") }},
		{"counter as string", func(m map[string]types.AttributeValue) { m["checkpointWrites"] = s("3") }},
		{"parents not a list", func(m map[string]types.AttributeValue) { m["parents"] = s("shardId-0") }},
		{"parent not a string", func(m map[string]types.AttributeValue) {
			m["parents"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{n("1")}}
		}},
		{"closed not a bool", func(m map[string]types.AttributeValue) { m["closed"] = s("true") }},
		{"bad ending sequence", func(m map[string]types.AttributeValue) { m["endingSeq"] = s("01") }},
		{"pk without separator", func(m map[string]types.AttributeValue) { m["pk"] = s("orders") }},
	}
	t.Run("well-formed", func(t *testing.T) {
		fake := &fakeDynamo{t: t, getItem: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			return &dynamodb.GetItemOutput{Item: base()}, nil
		}}
		st, err := checkpoint.New(fake, "tbl").Get(context.Background(), unitShard)
		want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		if err != nil || st.Shard != unitShard || st.Checkpoint != "10" || st.CheckpointWrites != 3 || !st.CheckpointAt.Equal(want) {
			t.Fatalf("state = %+v, err = %v", st, err)
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			item := base()
			tc.mutate(item)
			fake := &fakeDynamo{t: t, getItem: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
				return &dynamodb.GetItemOutput{Item: item}, nil
			}}
			st, err := checkpoint.New(fake, "tbl").Get(context.Background(), unitShard)
			if !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("state = %+v, err = %v; want ErrCorrupt", st, err)
			}
		})
	}
}

// TestListFollowsPages: List keeps querying while LastEvaluatedKey is set.
func TestListFollowsPages(t *testing.T) {
	t.Parallel()
	pages := [][]string{{"shardId-000000000000", "shardId-000000000001"}, {"shardId-000000000002"}, {}}
	var starts []map[string]types.AttributeValue
	fake := &fakeDynamo{t: t, query: func(in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
		if !aws.ToBool(in.ConsistentRead) || !equalS(in.ExpressionAttributeValues[":pk"], "g|orders") {
			t.Errorf("query = %+v", in)
		}
		starts = append(starts, in.ExclusiveStartKey)
		i := len(starts) - 1
		out := &dynamodb.QueryOutput{}
		for _, id := range pages[i] {
			out.Items = append(out.Items, map[string]types.AttributeValue{"pk": s("g|orders"), "sk": s(id)})
		}
		if i < len(pages)-1 {
			out.LastEvaluatedKey = map[string]types.AttributeValue{"pk": s("g|orders"), "sk": s(fmt.Sprint("page", i))}
		}
		return out, nil
	}}
	states, err := checkpoint.New(fake, "tbl").List(context.Background(), "g", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 || states[2].Shard.ShardID != "shardId-000000000002" || len(starts) != 3 || starts[0] != nil || !equalS(starts[2]["sk"], "page1") {
		t.Fatalf("states = %+v, start keys = %v", states, starts)
	}
}
