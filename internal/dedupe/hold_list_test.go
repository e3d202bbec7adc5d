package dedupe

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// TestHoldList: ListHolds finds exactly the group's holds (plain and hashed keys) among other
// groups' holds, a released hold, a ledger entry and an item of another sort key with the hold
// prefix; with a scan limit below the table it says it is incomplete.
func TestHoldList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := dynamodb.NewFromConfig(stacktest.Config(t))
	table := stacktest.LedgerTable(t)
	h := NewHolds(client, table)
	long := strings.Repeat("k", 3000)
	a, b := rid(seqAt(1), 0), rid(seqAt(2), 0)
	hold := func(group, key string, ids ...recordid.ID) {
		t.Helper()
		if _, err := h.Hold(ctx, group, key, ids, true); err != nil {
			t.Fatal(err)
		}
	}
	hold("app", "acct-1", a, b)
	hold("app", long, b)
	hold("app", "gone", a)
	hold("app2", "acct-1", a) // "H|app2|…" must not match "H|app|"
	hold("ap", "p|acct-1", a) // "H|ap|p|acct-1" is not app's either
	if err := h.Release(ctx, "app", "gone", 1); err != nil {
		t.Fatal(err)
	}
	if err := New(client, table).Record(ctx, recordid.Shard{Group: "app", Stream: "s", ShardID: a.ShardID}, Entry{First: a.Seq, Last: b.Seq, Done: []recordid.ID{a, b}, Source: SourceConsumer}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		schema.PartitionKey: &types.AttributeValueMemberS{Value: "H|app|acct-1"},
		schema.SortKey:      &types.AttributeValueMemberS{Value: "X"},
	}}); err != nil {
		t.Fatal(err)
	}

	got, err := ListHolds(ctx, client, table, "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Complete || got.Scanned < 6 {
		t.Errorf("complete %v after %d items, want the whole table (at least 6: 4 holds, an entry, the other sort key)", got.Complete, got.Scanned)
	}
	slices.SortFunc(got.Holds, func(x, y ListedHold) int { return strings.Compare(x.Key, y.Key) })
	if len(got.Holds) != 2 {
		t.Fatalf("holds %+v, want acct-1 and the hashed long key", got.Holds)
	}
	if g := got.Holds[0]; g.Key != "acct-1" || g.Hashed || g.Head != a || !slices.Equal(g.Held, []recordid.ID{a, b}) {
		t.Errorf("acct-1: %+v", g)
	}
	if g := got.Holds[1]; !g.Hashed || !strings.HasPrefix(g.Key, "sha256:") || g.Head != b || len(g.Held) != 1 {
		t.Errorf("hashed key: %+v", g)
	}

	part, err := ListHolds(ctx, client, table, "app", 2)
	if err != nil {
		t.Fatal(err)
	}
	if part.Complete || part.Scanned > 2 {
		t.Errorf("limit 2: complete %v after %d items", part.Complete, part.Scanned)
	}
	if _, err := ListHolds(ctx, client, table, "a|b", 0); err == nil {
		t.Error("a group with the separator was listed")
	}
}
