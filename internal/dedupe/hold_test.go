package dedupe

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestHoldLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := dynamodb.NewFromConfig(stacktest.Config(t))
	h := NewHolds(client, stacktest.LedgerTable(t))
	long := strings.Repeat("k", 3000) // hashed pk (the claim rule)
	a, b, c := rid(seqAt(1), 0), rid(seqAt(2), 0), rid(seqAt(3), 1)

	if _, err := h.Hold(ctx, "app", "acct-1", []recordid.ID{b}, false); !errors.Is(err, ErrNoHold) {
		t.Fatalf("append to a key not held: %v, want ErrNoHold", err)
	}
	for _, key := range []string{"acct-1", long, "\xff\xfe"} {
		head, err := h.Hold(ctx, "app", key, []recordid.ID{a}, true)
		if err != nil || head != a {
			t.Fatalf("create %q: head %v, %v", key[:min(len(key), 8)], head, err)
		}
		// A second record racing to be the head is appended behind the first.
		if head, err = h.Hold(ctx, "app", key, []recordid.ID{b}, true); err != nil || head != a {
			t.Fatalf("second create: head %v, %v; want %v", head, err, a)
		}
		if head, err = h.Hold(ctx, "app", key, []recordid.ID{c}, false); err != nil || head != a {
			t.Fatalf("append: head %v, %v", head, err)
		}
	}
	keys := []string{"acct-1", "acct-2", long, "\xff\xfe"}
	for i := range 150 { // more than one BatchGetItem
		keys = append(keys, "free-"+strconv.Itoa(i))
	}
	heads, err := h.Heads(ctx, "app", keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(heads) != 3 || heads["acct-1"] != a || heads[long] != a || heads["\xff\xfe"] != a {
		t.Fatalf("heads = %v", heads)
	}
	if heads, err := h.Heads(ctx, "other", []string{"acct-1"}); err != nil || len(heads) != 0 {
		t.Fatalf("other group: %v, %v", heads, err)
	}

	st, ok, err := h.Get(ctx, "app", "acct-1")
	if err != nil || !ok || st.Head != a || !slices.Equal(st.Held, []recordid.ID{a, b, c}) || st.Applied != 0 {
		t.Fatalf("get: %+v %v %v", st, ok, err)
	}
	if err := h.Applied(ctx, "app", "acct-1", 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Applied(ctx, "app", "acct-1", 0, 1); !errors.Is(err, ErrHoldChanged) {
		t.Fatalf("stale applied: %v", err)
	}
	if err := h.Release(ctx, "app", "acct-1", 2); !errors.Is(err, ErrHoldChanged) {
		t.Fatalf("release with a record behind: %v", err)
	}
	if err := h.Release(ctx, "app", "acct-1", 3); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := h.Get(ctx, "app", "acct-1"); ok || err != nil {
		t.Fatalf("released hold still read: %v %v", ok, err)
	}
	if err := h.Release(ctx, "app", "acct-1", 3); err != nil {
		t.Fatalf("release of a key not held: %v", err)
	}
	if _, err := h.Hold(ctx, "app", "acct-1", []recordid.ID{c}, false); !errors.Is(err, ErrNoHold) {
		t.Fatalf("append after release: %v", err)
	}
}
