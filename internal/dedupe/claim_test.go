package dedupe

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

func TestClaimSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l, _, m, _ := newStackLedger(t, WithClock(clock), WithTTL(time.Hour))

	a, b, c := rid(seqAt(1), 0), rid(seqAt(2), 0), rid(seqAt(3), 4)
	steps := []struct {
		name  string
		at    time.Duration
		group string
		key   string
		id    recordid.ID
		want  ClaimResult
	}{
		{"first claim wins", 0, "app", "order-1", a, ClaimResult{Owner: a}},
		{"same owner retry is not a duplicate", time.Minute, "app", "order-1", a, ClaimResult{Owner: a}},
		{"other record is a duplicate", 2 * time.Minute, "app", "order-1", b, ClaimResult{Duplicate: true, Owner: a}},
		{"other key is free", 2 * time.Minute, "app", "order-2", b, ClaimResult{Owner: b}},
		{"other group is separate", 2 * time.Minute, "billing", "order-1", c, ClaimResult{Owner: c}},
		// The retry at 1m extended a's claim to 1h01m.
		{"still live before expiry", time.Hour + time.Minute, "app", "order-1", c, ClaimResult{Duplicate: true, Owner: a}},
		{"expired claim is taken over", time.Hour + time.Minute + time.Second, "app", "order-1", c, ClaimResult{Owner: c}},
		{"previous owner is now the duplicate", time.Hour + 2*time.Minute, "app", "order-1", a, ClaimResult{Duplicate: true, Owner: c}},
		{"key with separators and unicode", 0, "app", "a|b:ü", a, ClaimResult{Owner: a}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			mu.Lock()
			now = t0.Add(s.at)
			mu.Unlock()
			got, err := l.Claim(ctx, s.group, s.key, s.id)
			if err != nil {
				t.Fatal(err)
			}
			if got != s.want {
				t.Fatalf("Claim = %+v, want %+v", got, s.want)
			}
		})
	}
	// Where the endpoint returns the item with the failed condition, duplicates cost one call.
	t.Logf("owner read back with GetItem %d times for 3 duplicates", m.Snapshot().Ops["GetItem"].Calls)
}

// TestClaimConcurrent: many records claim one key at once; exactly one wins and every other
// sees it as the owner.
func TestClaimConcurrent(t *testing.T) {
	t.Parallel()
	stacktest.RequireAtomicItemWrites(t) // moto lets two conditional PutItems on one item both win
	ctx := context.Background()
	l, _, _, _ := newStackLedger(t)
	const claimers = 16
	results := make([]ClaimResult, claimers)
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = l.Claim(ctx, "app", "payment-42", rid(seqAt(int64(i)), 0))
		}()
	}
	close(start)
	wg.Wait()
	var winners []recordid.ID
	for i := range claimers {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		if !results[i].Duplicate {
			winners = append(winners, rid(seqAt(int64(i)), 0))
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d winners: %v", len(winners), winners)
	}
	for i, r := range results {
		if r.Owner != winners[0] {
			t.Fatalf("claimer %d sees owner %v, winner is %v", i, r.Owner, winners[0])
		}
	}
}

// TestClaimReadsOwnerWhenNotReturned covers endpoints that ignore
// ReturnValuesOnConditionCheckFailure: the owner is read with a consistent GetItem.
func TestClaimReadsOwnerWhenNotReturned(t *testing.T) {
	t.Parallel()
	owner := rid(seqAt(7), 0)
	var gets int
	fake := fakeDynamo{
		put: func(in *dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
			if in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
				t.Errorf("ReturnValuesOnConditionCheckFailure = %q", in.ReturnValuesOnConditionCheckFailure)
			}
			return nil, &types.ConditionalCheckFailedException{Message: aws.String("failed")}
		},
		get: func(in *dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) {
			gets++
			if in.ConsistentRead == nil || !*in.ConsistentRead {
				t.Error("owner read is not consistent")
			}
			return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{
				attrOwner:           &types.AttributeValueMemberS{Value: owner.String()},
				schema.TTLAttribute: &types.AttributeValueMemberN{Value: "99999999999"},
			}}, nil
		},
	}
	got, err := New(fake, "t").Claim(context.Background(), "app", "k", rid(seqAt(1), 0))
	if err != nil {
		t.Fatal(err)
	}
	if gets != 1 || got != (ClaimResult{Duplicate: true, Owner: owner}) {
		t.Fatalf("Claim = %+v after %d reads", got, gets)
	}
}

// TestClaimRetriesWhenCompetitorVanishes: the competing claim is gone by the time it is read;
// the claim is tried again and succeeds.
func TestClaimRetriesWhenCompetitorVanishes(t *testing.T) {
	t.Parallel()
	puts := 0
	fake := fakeDynamo{
		put: func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
			puts++
			if puts == 1 {
				return nil, &types.ConditionalCheckFailedException{Message: aws.String("failed")}
			}
			return &dynamodb.PutItemOutput{}, nil
		},
		get: func(*dynamodb.GetItemInput) (*dynamodb.GetItemOutput, error) { return &dynamodb.GetItemOutput{}, nil },
	}
	me := rid(seqAt(1), 0)
	got, err := New(fake, "t").Claim(context.Background(), "app", "k", me)
	if err != nil || got != (ClaimResult{Owner: me}) || puts != 2 {
		t.Fatalf("Claim = %+v, %v after %d puts", got, err, puts)
	}
}

func TestClaimErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("throttled")
	corrupt := fakeDynamo{put: func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
		return nil, &types.ConditionalCheckFailedException{Item: map[string]types.AttributeValue{
			attrOwner: &types.AttributeValueMemberS{Value: "garbage"}}}
	}}
	failing := fakeDynamo{put: func(*dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) { return nil, boom }}
	tests := []struct {
		name   string
		client fakeDynamo
		group  string
		key    string
		id     recordid.ID
		is     error
	}{
		{"empty key", fakeDynamo{}, "app", "", rid("1", 0), ErrInvalid},
		{"empty key is the key's fault", fakeDynamo{}, "app", "", rid("1", 0), ErrInvalidKey},
		{"bad group", fakeDynamo{}, "a|b", "k", rid("1", 0), ErrInvalid},
		{"invalid utf-8 group", fakeDynamo{}, "\xff", "k", rid("1", 0), ErrInvalid},
		{"bad id", fakeDynamo{}, "app", "k", rid("01", 0), ErrInvalid},
		{"corrupt owner", corrupt, "app", "k", rid("1", 0), ErrCorrupt},
		{"put error", failing, "app", "k", rid("1", 0), boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.client, "t").Claim(context.Background(), tt.group, tt.key, tt.id)
			if !errors.Is(err, tt.is) {
				t.Fatalf("Claim = %v, want %v", err, tt.is)
			}
		})
	}
}

// TestClaimKeysOfAnyLength: a business key of any length (or bytes that are not UTF-8) claims,
// dedupes and stays distinct from every other key, against the real table. A key that made the
// partition key exceed DynamoDB's 2,048-byte limit used to fail every claim, so its record
// could never be processed or parked.
func TestClaimKeysOfAnyLength(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, client, _, table := newStackLedger(t)
	long := func(n int, last string) string { return strings.Repeat("k", n-len(last)) + last }
	keys := []string{
		"order-1",
		long(2048-len("K|app|"), "a"), // exactly at the limit: stays readable
		long(2048-len("K|app|")+1, "a"),
		long(2048-len("K|app|")+1, "b"), // differs from the previous only in its last byte
		long(4096, "a"),
		long(100_000, "a"),
		"\xff\xfe not utf-8",
		"\xff\xfd not utf-8",
	}
	for i, key := range keys {
		first, second := rid(seqAt(int64(2*i+1)), 0), rid(seqAt(int64(2*i+2)), 0)
		got, err := l.Claim(ctx, "app", key, first)
		if err != nil {
			t.Fatalf("key %d (%d bytes): first claim: %v", i, len(key), err)
		}
		if got != (ClaimResult{Owner: first}) {
			t.Fatalf("key %d (%d bytes): first claim = %+v: another key's claim collided with it", i, len(key), got)
		}
		if got, err = l.Claim(ctx, "app", key, first); err != nil || got != (ClaimResult{Owner: first}) {
			t.Fatalf("key %d: retry by the owner = %+v, %v", i, got, err)
		}
		if got, err = l.Claim(ctx, "app", key, second); err != nil || got != (ClaimResult{Duplicate: true, Owner: first}) {
			t.Fatalf("key %d: claim by another record = %+v, %v; want a duplicate of %v", i, got, err, first)
		}
	}
	// Short keys stay readable in the table (an operator can find them); every partition key
	// fits DynamoDB's limit.
	out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: &table})
	if err != nil {
		t.Fatal(err)
	}
	readable := false
	for _, it := range out.Items {
		pk, _ := it[schema.PartitionKey].(*types.AttributeValueMemberS)
		if pk == nil {
			continue
		}
		if len(pk.Value) > maxPartitionKeyBytes {
			t.Errorf("partition key of %d bytes stored", len(pk.Value))
		}
		readable = readable || pk.Value == "K|app|order-1"
	}
	if !readable {
		t.Errorf("short key not stored readable as K|app|order-1")
	}
}
