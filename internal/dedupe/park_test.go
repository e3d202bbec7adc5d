package dedupe

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

func testPark(seq string, parkID string) Park {
	return Park{ID: rid(seq, 0), Receipt: park.Receipt{ParkID: parkID, Bytes: 3, SHA256: strings.Repeat("a", 64), KeySHA256: strings.Repeat("b", 64)}}
}

// TestParkRecordsRoundTrip: the ledger keeps each park of a record (park id, payload length and
// digest, key digest, payload object) in the item that counts it done, also when the entry is
// split into parts, and every recorded park of a record is returned, several when it was parked
// more than once.
func TestParkRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Unix(1_800_000_000, 0)
	now := start
	l, client, _, table := newStackLedger(t, WithMaxItemBytes(1200), WithClock(func() time.Time { return now }))
	inS3 := testPark(seqAt(40), "00000000000000b2")
	inS3.Receipt.PayloadS3 = &park.Pointer{Bucket: "payloads", Key: "parked/app/orders/" + testShardID + "/" + seqAt(40) + "-0/00000000000000b2"}
	e := Entry{First: seqAt(0), Last: seqAt(300), Source: SourceConsumer, Done: ids(0, 300),
		Parked: []recordid.ID{rid(seqAt(3), 0), rid(seqAt(40), 0)},
		Parks:  []Park{testPark(seqAt(3), "00000000000000a1"), inS3}}
	if err := l.Record(ctx, testShard, e); err != nil {
		t.Fatal(err)
	}
	again := Entry{First: seqAt(3), Last: seqAt(3), Source: SourceRedrive, Done: ids(3, 3), Parked: ids(3, 3),
		Parks: []Park{testPark(seqAt(3), "00000000000000c3")}}
	if err := l.Record(ctx, testShard, again); err != nil {
		t.Fatal(err)
	}
	r, err := l.Lookup(ctx, testShard, seqAt(0), seqAt(300))
	if err != nil {
		t.Fatal(err)
	}
	if r.Stats().Entries < 3 {
		t.Fatalf("%d items: the entry was not split as the test needs", r.Stats().Entries)
	}
	got := r.Parks(rid(seqAt(3), 0))
	if len(got) != 2 || !((got[0].Receipt.ParkID == "00000000000000a1" && got[1].Receipt.ParkID == "00000000000000c3") || (got[1].Receipt.ParkID == "00000000000000a1" && got[0].Receipt.ParkID == "00000000000000c3")) {
		t.Fatalf("parks of %s: %+v, want both recorded parks", seqAt(3), got)
	}
	if g := r.Parks(rid(seqAt(40), 0)); len(g) != 1 || !reflect.DeepEqual(g[0], inS3) {
		t.Fatalf("parks of %s: %+v, want %+v", seqAt(40), g, inS3)
	}
	if g := r.Parks(rid(seqAt(4), 0)); len(g) != 0 {
		t.Fatalf("a record processed, not parked, has parks %+v", g)
	}
	if g, _ := l.Lookup(ctx, testShard, seqAt(41), seqAt(60)); len(g.Parks(rid(seqAt(40), 0))) != 0 {
		t.Fatal("a Range answers for a park outside its range")
	}

	// An item holding a park lives past the parked queue's retention; one without keeps the TTL.
	out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: &table})
	if err != nil {
		t.Fatal(err)
	}
	withParks, without := 0, 0
	for _, it := range out.Items {
		if _, ok := it[schema.PartitionKey].(*types.AttributeValueMemberS); !ok {
			continue
		}
		n, ok := it[schema.TTLAttribute].(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		exp, _ := strconv.ParseInt(n.Value, 10, 64)
		if _, ok := it[attrParks]; ok {
			withParks++
			if exp != start.Add(DefaultParkTTL).Unix() {
				t.Errorf("item with parks expires at %d, want %d", exp, start.Add(DefaultParkTTL).Unix())
			}
		} else {
			without++
			if exp != start.Add(DefaultTTL).Unix() {
				t.Errorf("item without parks expires at %d, want %d", exp, start.Add(DefaultTTL).Unix())
			}
		}
	}
	if withParks == 0 || without == 0 {
		t.Fatalf("%d items with parks, %d without: the test needs both", withParks, without)
	}
	now = start.Add(DefaultTTL + time.Hour) // the plain entry items expired; the park items not
	r, err = l.Lookup(ctx, testShard, seqAt(0), seqAt(300))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Done(rid(seqAt(40), 0)) || len(r.Parks(rid(seqAt(40), 0))) != 1 {
		t.Fatal("the park record of a parked record expired with the ledger's TTL, before the parked queue's retention")
	}
}

func TestRecordRejectsInvalidParks(t *testing.T) {
	t.Parallel()
	l := New(nil, "t")
	base := Entry{First: seqAt(0), Last: seqAt(9), Source: SourceConsumer, Done: ids(0, 9), Parked: ids(3, 3)}
	for name, p := range map[string]Park{
		"not parked":  testPark(seqAt(4), "00000000000000a1"),
		"no park id":  testPark(seqAt(3), ""),
		"bad digest":  {ID: rid(seqAt(3), 0), Receipt: park.Receipt{ParkID: "x", SHA256: "zz", KeySHA256: strings.Repeat("b", 64)}},
		"half object": {ID: rid(seqAt(3), 0), Receipt: park.Receipt{ParkID: "x", SHA256: strings.Repeat("a", 64), KeySHA256: strings.Repeat("b", 64), PayloadS3: &park.Pointer{Bucket: "b"}}},
	} {
		e := base
		e.Parks = []Park{p}
		if err := l.Record(context.Background(), testShard, e); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Record = %v, want ErrInvalid", name, err)
		}
	}
}
