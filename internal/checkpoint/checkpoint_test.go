package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.DynamoDB))
}

// newShard returns a shard key unique to the test.
func newShard(t testing.TB) recordid.Shard {
	return recordid.Shard{Group: stacktest.Name(t, "grp"), Stream: "orders", ShardID: "shardId-000000000000"}
}

// requireAtomicItemWrites skips a test whose claim rests on DynamoDB serializing writes to one
// item when the endpoint is moto_server, which does not (stacktest.RequireAtomicItemWrites).
func requireAtomicItemWrites(t *testing.T) {
	t.Helper()
	stacktest.RequireAtomicItemWrites(t)
}

// position abstracts over the checkpoint and the watermark so one table of cases drives both.
type position struct {
	name    string
	advance func(*checkpoint.Store, context.Context, recordid.Shard, string) (checkpoint.Result, error)
	read    func(checkpoint.State) (string, time.Time)
}

var positions = []position{
	{"checkpoint", (*checkpoint.Store).Advance, func(s checkpoint.State) (string, time.Time) { return s.Checkpoint, s.CheckpointAt }},
	{"watermark", (*checkpoint.Store).AdvanceWatermark, func(s checkpoint.State) (string, time.Time) { return s.Watermark, s.WatermarkAt }},
}

var (
	seq56a = "49584571934843771141903627621780519911929601359651799042"
	seq56b = "49584571934843771141903627621784146689388445315895394306"
	seq129 = "1" + strings.Repeat("0", 128)
)

// TestAdvanceSequences applies sequences of advances to a fresh shard against the emulator and
// checks each Result and the final state, for the checkpoint and the watermark.
func TestAdvanceSequences(t *testing.T) {
	t.Parallel()
	type step struct {
		seq     string
		advance bool
	}
	cases := []struct {
		name  string
		steps []step
		final string
	}{
		{"first write creates the item", []step{{"5", true}}, "5"},
		{"equal value is not an advance", []step{{"7", true}, {"7", false}}, "7"},
		{"lower value is a lost race", []step{{"20", true}, {"3", false}}, "20"},
		{"numeric not string order: 10 beats 9", []step{{"9", true}, {"10", true}, {"9", false}}, "10"},
		{"string order would say 9 > 10", []step{{"10", true}, {"9", false}}, "10"},
		{"zero is a valid start", []step{{"0", true}, {"1", true}}, "1"},
		{"56-digit Kinesis numbers", []step{{seq56a, true}, {seq56b, true}, {seq56a, false}}, seq56b},
		{"129 digits beats 56 and 128", []step{{seq56a, true}, {seq129, true}, {strings.Repeat("9", 128), false}}, seq129},
		{"short after long loses", []step{{seq56a, true}, {"99999999999999999999999999999999999999", false}}, seq56a},
	}
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	for _, pos := range positions {
		t.Run(pos.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					clock := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
					store := checkpoint.New(stacktest.DynamoDB(t), table, checkpoint.WithClock(func() time.Time { return clock }))
					shard := newShard(t)
					var lastWrite time.Time
					writes := 0
					for i, st := range tc.steps {
						clock = clock.Add(time.Second)
						res, err := pos.advance(store, ctx, shard, st.seq)
						if err != nil {
							t.Fatalf("step %d (%.12s…): %v", i, st.seq, err)
						}
						if res.Advanced != st.advance {
							t.Fatalf("step %d (%.12s…): Advanced = %v, want %v", i, st.seq, res.Advanced, st.advance)
						}
						if res.Advanced {
							lastWrite = clock
							writes++
							if res.Previous != "" {
								t.Errorf("step %d: Previous %q set on a successful advance", i, res.Previous)
							}
						} else {
							// Previous is optional (dynalite omits the old item) but, when given,
							// it is the stored value that beat the offer.
							cur, _ := read(t, store, shard, pos)
							if res.Previous != "" && res.Previous != cur {
								t.Errorf("step %d: Previous = %q, stored %q", i, res.Previous, cur)
							}
							if seqnum.Compare(cur, st.seq) < 0 {
								t.Errorf("step %d: not advanced although stored %q < offered %q", i, cur, st.seq)
							}
						}
					}
					got, at := read(t, store, shard, pos)
					if got != tc.final {
						t.Errorf("final %s = %q, want %q", pos.name, got, tc.final)
					}
					if !at.Equal(lastWrite) {
						t.Errorf("%sAt = %v, want the clock of the last successful write %v", pos.name, at, lastWrite)
					}
					st, _ := store.Get(ctx, shard)
					wantWrites := int64(0)
					if pos.name == "checkpoint" {
						wantWrites = int64(writes)
					}
					if st.CheckpointWrites != wantWrites {
						t.Errorf("checkpointWrites = %d, want %d", st.CheckpointWrites, wantWrites)
					}
				})
			}
		})
	}
}

func read(t testing.TB, store *checkpoint.Store, shard recordid.Shard, pos position) (string, time.Time) {
	t.Helper()
	st, err := store.Get(context.Background(), shard)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return pos.read(st)
}

// TestCheckpointAndWatermarkAreIndependent: one never moves the other.
func TestCheckpointAndWatermarkAreIndependent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))
	shard := newShard(t)
	mustAdvance(t, store.Advance, shard, "500")
	mustAdvance(t, store.AdvanceWatermark, shard, "100")
	mustAdvance(t, store.AdvanceWatermark, shard, "200")
	if res, err := store.Advance(ctx, shard, "300"); err != nil || res.Advanced {
		t.Fatalf("checkpoint 300 after 500: %+v, %v", res, err)
	}
	st, err := store.Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if st.Checkpoint != "500" || st.Watermark != "200" || st.CheckpointWrites != 1 {
		t.Fatalf("state = %+v", st)
	}
}

func mustAdvance(t *testing.T, f func(context.Context, recordid.Shard, string) (checkpoint.Result, error), shard recordid.Shard, seq string) {
	t.Helper()
	res, err := f(context.Background(), shard, seq)
	if err != nil || !res.Advanced {
		t.Fatalf("advance to %s: %+v, %v", seq, res, err)
	}
}

// TestLineageCloseAndCounters covers SetLineage, MarkClosed and AddCounters on the emulator.
func TestLineageCloseAndCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := checkpoint.New(stacktest.DynamoDB(t), stacktest.CheckpointTable(t))

	t.Run("lineage", func(t *testing.T) {
		cases := []struct {
			name    string
			parents []string
		}{
			{"original shard", nil},
			{"split child", []string{"shardId-000000000000"}},
			{"merge child", []string{"shardId-000000000001", "shardId-000000000002"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				shard := newShard(t)
				for i := 0; i < 2; i++ { // idempotent
					if err := store.SetLineage(ctx, shard, tc.parents); err != nil {
						t.Fatal(err)
					}
				}
				st, err := store.Get(ctx, shard)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(st.Parents, tc.parents) || st.Parents == nil {
					t.Errorf("parents = %#v, want %#v (non-nil once set)", st.Parents, tc.parents)
				}
				if st.Checkpoint != "" || st.Closed {
					t.Errorf("lineage touched other state: %+v", st)
				}
			})
		}
	})

	t.Run("close", func(t *testing.T) {
		shard := newShard(t)
		mustAdvance(t, store.Advance, shard, "40")
		steps := []struct {
			name     string
			ending   string
			conflict bool
		}{
			{"first close", seq56b, false},
			{"same again", seq56b, false},
			{"different ending sequence", seq56a, true},
		}
		for _, st := range steps {
			err := store.MarkClosed(ctx, shard, st.ending)
			if st.conflict != errors.Is(err, checkpoint.ErrConflict) || (!st.conflict && err != nil) {
				t.Fatalf("%s: err = %v, want conflict %v", st.name, err, st.conflict)
			}
		}
		got, err := store.Get(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Closed || got.EndingSeq != seq56b || got.Checkpoint != "40" {
			t.Errorf("state = %+v", got)
		}
	})

	t.Run("counters", func(t *testing.T) {
		shard := newShard(t)
		mustAdvance(t, store.Advance, shard, "1")
		adds := []checkpoint.Counters{
			{RacesLost: 2, GapsDetected: 3},
			{},
			{GapsDetected: 1, GapsReplayed: 4, Parked: 5, LostToRetention: 6, CheckpointWrites: 7},
		}
		for _, c := range adds {
			if err := store.AddCounters(ctx, shard, c); err != nil {
				t.Fatal(err)
			}
		}
		got, err := store.Get(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		want := checkpoint.Counters{CheckpointWrites: 8, RacesLost: 2, GapsDetected: 4, GapsReplayed: 4, Parked: 5, LostToRetention: 6}
		if got.Counters != want || got.Checkpoint != "1" {
			t.Errorf("state = %+v, want counters %+v", got, want)
		}
	})

	t.Run("concurrent counter adds are atomic", func(t *testing.T) {
		requireAtomicItemWrites(t)
		shard := newShard(t)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					if err := store.AddCounters(ctx, shard, checkpoint.Counters{GapsReplayed: 1, Parked: 2}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		got, err := store.Get(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		if got.GapsReplayed != 40 || got.Parked != 80 {
			t.Errorf("counters = %+v, want 40 and 80", got.Counters)
		}
	})
}

// TestGetAndList: missing shards, one group's shards listed across several pages, other groups
// and streams left out.
func TestGetAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	client := stacktest.DynamoDB(t)
	store := checkpoint.New(client, table, checkpoint.WithPageLimit(7))
	group := stacktest.Name(t, "grp")

	if _, err := store.Get(ctx, recordid.Shard{Group: group, Stream: "orders", ShardID: "shardId-000000000099"}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Get of an unknown shard: %v, want ErrNotFound", err)
	}

	const shards = 25
	var want []string
	for i := shards - 1; i >= 0; i-- { // written in reverse; List returns shard id order
		id := fmt.Sprintf("shardId-%012d", i)
		want = append([]string{id}, want...)
		mustAdvance(t, store.Advance, recordid.Shard{Group: group, Stream: "orders", ShardID: id}, fmt.Sprint(1000+i))
	}
	// Neighbours that must not show up.
	mustAdvance(t, store.Advance, recordid.Shard{Group: group, Stream: "orders-2", ShardID: "shardId-000000000000"}, "1")
	mustAdvance(t, store.Advance, recordid.Shard{Group: group + "x", Stream: "orders", ShardID: "shardId-000000000000"}, "1")

	cases := []struct {
		name          string
		group, stream string
		want          []string
	}{
		{"all shards over several pages", group, "orders", want},
		{"other stream", group, "orders-2", []string{"shardId-000000000000"}},
		{"unknown stream", group, "nothing-here", []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			states, err := store.List(ctx, tc.group, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if states == nil {
				t.Fatal("List returned nil, want an empty slice")
			}
			got := []string{}
			for _, st := range states {
				if st.Shard.Group != tc.group || st.Shard.Stream != tc.stream {
					t.Errorf("foreign shard %s listed", st.Shard)
				}
				got = append(got, st.Shard.ShardID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("shards = %v, want %v", got, tc.want)
			}
		})
	}
	states, _ := store.List(ctx, group, "orders")
	for i, st := range states {
		if st.Checkpoint != fmt.Sprint(1000+i) {
			t.Errorf("%s checkpoint = %s, want %d", st.Shard.ShardID, st.Checkpoint, 1000+i)
		}
	}
}

// genSeq returns a random canonical sequence number of a length drawn to mix short, Kinesis-like
// (56 digits) and maximal (129 digits) values.
func genSeq(r *rand.Rand) string {
	lengths := []int{1, 1, 2, 3, 9, 38, 39, 55, 56, 56, 56, 57, 100, 128, 129}
	l := lengths[r.IntN(len(lengths))]
	if l == 1 {
		return fmt.Sprint(r.IntN(10))
	}
	b := make([]byte, l)
	b[0] = byte('1' + r.IntN(9))
	for i := 1; i < l; i++ {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// TestConcurrentAdvanceIsMonotonic reproduces the seed's race: 16 writers advance one shard's
// position concurrently with overlapping batches of mixed-length sequence numbers while a
// reader samples it. The position never moves backwards, ends at the maximum ever offered, and
// every call is either a real advance or a lost race against a value at least as high.
func TestConcurrentAdvanceIsMonotonic(t *testing.T) {
	t.Parallel()
	requireAtomicItemWrites(t)
	const writers, batchesPerWriter, pool = 16, 12, 200
	table := stacktest.CheckpointTable(t)
	for pi, pos := range positions {
		t.Run(pos.name, func(t *testing.T) {
			ctx := context.Background()
			store := checkpoint.New(stacktest.DynamoDB(t), table)
			shard := newShard(t)

			r := rand.New(rand.NewPCG(uint64(pi)+1, 42))
			values := []string{"9", "10", "11", "99", "100", seq56a, seq56b, seq129}
			for len(values) < pool {
				values = append(values, genSeq(r))
			}
			slices.SortFunc(values, seqnum.Compare)
			values = slices.Compact(values)

			// Each writer walks the sorted values like a parallel lane of one shard: batch b
			// covers a window around the b-th stretch, overlapping other writers' batches (as
			// with ParallelizationFactor > 1 and retries), and offers the batch's last sequence
			// number, the way a consumer checkpoints. One batch in six is a stale replay from
			// anywhere behind.
			stretch := len(values) / batchesPerWriter
			offers := make([][]string, writers)
			for w := range offers {
				for b := 0; b < batchesPerWriter; b++ {
					start := max(0, b*stretch+r.IntN(stretch)-stretch/2)
					if r.IntN(6) == 0 {
						start = r.IntN(start + 1)
					}
					end := min(len(values)-1, start+r.IntN(stretch))
					offers[w] = append(offers[w], values[end])
				}
			}
			maxOffered := ""
			for _, ws := range offers {
				for _, v := range ws {
					if maxOffered == "" || seqnum.Compare(v, maxOffered) > 0 {
						maxOffered = v
					}
				}
			}

			stop := make(chan struct{})
			var samples atomic.Int64
			sampler := make(chan error, 1)
			go func() {
				last := ""
				for {
					select {
					case <-stop:
						sampler <- nil
						return
					default:
					}
					st, err := store.Get(ctx, shard)
					if errors.Is(err, checkpoint.ErrNotFound) {
						continue
					}
					if err != nil {
						sampler <- err
						return
					}
					cur, _ := pos.read(st)
					if last != "" && seqnum.Compare(cur, last) < 0 {
						sampler <- fmt.Errorf("%s moved backwards from %s to %s", pos.name, last, cur)
						return
					}
					last = cur
					samples.Add(1)
				}
			}()

			var advanced, lost atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for _, seq := range offers[w] {
						res, err := pos.advance(store, ctx, shard, seq)
						if err != nil {
							t.Errorf("writer %d: advance to %.20s…: %v", w, seq, err)
							return
						}
						if res.Advanced {
							advanced.Add(1)
						} else {
							lost.Add(1)
							if res.Previous != "" && seqnum.Compare(res.Previous, seq) < 0 {
								t.Errorf("lost race reports Previous %s below the offer %s", res.Previous, seq)
							}
						}
						// Either way the stored value is now at least the offer, and stays so.
						st, err := store.Get(ctx, shard)
						if err != nil {
							t.Errorf("writer %d: Get: %v", w, err)
							return
						}
						if cur, _ := pos.read(st); seqnum.Compare(cur, seq) < 0 {
							t.Errorf("after offering %s (advanced=%v) the stored value is lower: %s", seq, res.Advanced, cur)
						}
					}
				}(w)
			}
			wg.Wait()
			close(stop)
			if err := <-sampler; err != nil {
				t.Fatal(err)
			}

			st, err := store.Get(ctx, shard)
			if err != nil {
				t.Fatal(err)
			}
			final, _ := pos.read(st)
			if final != maxOffered {
				t.Errorf("final %s = %.30s…, want the maximum offered %.30s…", pos.name, final, maxOffered)
			}
			if pos.name == "checkpoint" && st.CheckpointWrites != advanced.Load() {
				t.Errorf("checkpointWrites = %d but %d calls reported Advanced: an advance was reported for a write that did not happen (or vice versa)",
					st.CheckpointWrites, advanced.Load())
			}
			if advanced.Load() == 0 || lost.Load() == 0 || samples.Load() < 2 {
				t.Errorf("race not exercised: %d advanced, %d lost, %d samples", advanced.Load(), lost.Load(), samples.Load())
			}
			t.Logf("%d writers: %d advanced, %d lost races, %d samples", writers, advanced.Load(), lost.Load(), samples.Load())
		})
	}
}

// proxiedStore returns a store whose DynamoDB traffic goes through a fault proxy, with the
// standard retryer limited to maxAttempts and no retry quota.
func proxiedStore(t *testing.T, table string, maxAttempts int, seed int64) (*checkpoint.Store, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.Start(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), faultproxy.WithSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	client := dynamodb.NewFromConfig(stacktest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = maxAttempts
			so.MaxBackoff = 20 * time.Millisecond
			so.RateLimiter = ratelimit.None
		})
	})
	return checkpoint.New(client, table), p
}

const (
	opUpdateItem = "DynamoDB_20120810.UpdateItem"
	opGetItem    = "DynamoDB_20120810.GetItem"
)

// TestFaults drives the store through the fault proxy in front of the emulator.
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	direct := checkpoint.New(stacktest.DynamoDB(t), table)
	const attempts = 3

	t.Run("retried then surfaced", func(t *testing.T) {
		cases := []struct {
			name  string
			fault faultproxy.Fault
			count int
			code  string // "" when the retries absorb the fault
		}{
			{"throttle absorbed", faultproxy.Throttle, attempts - 1, ""},
			{"5xx absorbed", faultproxy.ServerError, attempts - 1, ""},
			{"throttle surfaced", faultproxy.Throttle, 0, "ProvisionedThroughputExceededException"},
			{"5xx surfaced", faultproxy.ServerError, 0, "InternalServerError"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				store, p := proxiedStore(t, table, attempts, 1)
				shard := newShard(t)
				p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opUpdateItem), Fault: tc.fault, Rate: 1, Count: tc.count})
				res, err := store.Advance(ctx, shard, seq56a)
				s := p.Stats().Op(opUpdateItem)
				wantFaults := tc.count
				if tc.code != "" {
					wantFaults = attempts
				}
				if s.Faults() != wantFaults || s.Requests != min(wantFaults+1, attempts) {
					t.Errorf("proxy saw %d requests with %d faults, want %d faults", s.Requests, s.Faults(), wantFaults)
				}
				st, getErr := direct.Get(ctx, shard)
				if tc.code == "" {
					if err != nil || !res.Advanced || getErr != nil || st.Checkpoint != seq56a {
						t.Fatalf("res = %+v, err = %v; stored %+v (%v)", res, err, st, getErr)
					}
					return
				}
				if err == nil || res.Advanced {
					t.Fatalf("res = %+v, err = %v; want an error and no advance", res, err)
				}
				for _, part := range []string{"advance checkpoint", shard.String(), "UpdateItem", tc.code} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not name %q", err, part)
					}
				}
				if !errors.Is(getErr, checkpoint.ErrNotFound) {
					t.Errorf("nothing was forwarded, yet the shard has state %+v (%v)", st, getErr)
				}
			})
		}
	})

	// A write whose answer is lost (the SDK retries it and the retry fails the condition on the
	// value the first attempt stored) is still this call's advance: Advanced says so, checked
	// against the token the write stored on the item the failed condition returns, and
	// checkpointWrites counts it once. dynalite returns no item with a failed condition: there a
	// lost race costs no read, and the retry reads as a lost race.
	returnsItem := stacktest.IsMoto()
	for _, pos := range positions {
		t.Run(pos.name+"/response dropped once, the retry finds its own write", func(t *testing.T) {
			store, p := proxiedStore(t, table, attempts, 1)
			shard := newShard(t)
			p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1})
			res, err := pos.advance(store, ctx, shard, seq56b)
			if err != nil || res.Advanced != returnsItem {
				t.Fatalf("res = %+v, err = %v; want Advanced %v: the first attempt's write is this call's (the endpoint returns the item: %v)", res, err, returnsItem, returnsItem)
			}
			if got, _ := read(t, direct, shard, pos); got != seq56b {
				t.Fatalf("stored %s = %q, want %q", pos.name, got, seq56b)
			}
			if s := p.Stats().Op(opUpdateItem); s.Forwarded != 2 || s.DroppedAfter != 1 {
				t.Errorf("stats = %+v; want the write and one retry forwarded", s)
			}
			// A later call offering the same value is a lost race, not an advance: the token
			// on the item is the first call's.
			res, err = pos.advance(store, ctx, shard, seq56b)
			if err != nil || res.Advanced {
				t.Fatalf("second call: res = %+v, err = %v; want a lost race", res, err)
			}
		})
		t.Run(pos.name+"/response dropped on every attempt, the item read tells", func(t *testing.T) {
			store, p := proxiedStore(t, table, attempts, 1)
			shard := newShard(t)
			p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opUpdateItem), Fault: faultproxy.DropAfterForward, Rate: 1})
			res, err := pos.advance(store, ctx, shard, seq56b)
			if err != nil || !res.Advanced {
				t.Fatalf("res = %+v, err = %v; want Advanced: no attempt was answered, the consistent read finds this call's token", res, err)
			}
			if s := p.Stats().Op(opUpdateItem); s.Forwarded != attempts || s.DroppedAfter != attempts {
				t.Errorf("stats = %+v", s)
			}
		})
	}

	t.Run("response and the read both lost: an error, never a guess", func(t *testing.T) {
		store, p := proxiedStore(t, table, attempts, 1)
		shard := newShard(t)
		p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opUpdateItem, opGetItem), Fault: faultproxy.DropAfterForward, Rate: 1})
		res, err := store.Advance(ctx, shard, seq56b)
		if err == nil || res.Advanced {
			t.Fatalf("res = %+v, err = %v; the caller never got an answer, so it must see an error", res, err)
		}
		st, err := direct.Get(ctx, shard)
		if err != nil || st.Checkpoint != seq56b || st.CheckpointWrites != 1 {
			t.Fatalf("stored %+v (%v): the first attempt's write happened, the retries lost to it", st, err)
		}
	})

	t.Run("50 writes, 30% faults", func(t *testing.T) {
		store, p := proxiedStore(t, table, 2, 2026)
		shard := newShard(t)
		upd := faultproxy.Ops(opUpdateItem)
		p.SetRules(
			faultproxy.Rule{Match: upd, Fault: faultproxy.Throttle, Rate: 0.1},
			faultproxy.Rule{Match: upd, Fault: faultproxy.ServerError, Rate: 0.1},
			faultproxy.Rule{Match: upd, Fault: faultproxy.DropAfterForward, Rate: 0.12},
		)
		r := rand.New(rand.NewPCG(7, 7))
		offered := map[string]bool{}
		var advancedVals, erroredVals []string
		base := 1_000_000
		for i := 0; i < 50; i++ {
			v := fmt.Sprint(base + i*10 - r.IntN(40)) // mostly rising, with regressions
			offered[v] = true
			res, err := store.Advance(ctx, shard, v)
			switch {
			case err != nil:
				if res.Advanced {
					t.Fatalf("Advance(%s) returned Advanced=true with error %v", v, err)
				}
				erroredVals = append(erroredVals, v)
			case res.Advanced:
				advancedVals = append(advancedVals, v)
			}
		}
		st, err := direct.Get(ctx, shard)
		if err != nil {
			t.Fatal(err)
		}
		final := st.Checkpoint
		if !offered[final] {
			t.Fatalf("final checkpoint %s was never offered", final)
		}
		maxAdvanced := ""
		for _, v := range advancedVals {
			if seqnum.Compare(v, final) > 0 {
				t.Errorf("Advance(%s) reported Advanced, but the final checkpoint is lower: %s", v, final)
			}
			if maxAdvanced == "" || seqnum.Compare(v, maxAdvanced) > 0 {
				maxAdvanced = v
			}
		}
		// The final value is the highest reported advance, unless a higher write whose response
		// was lost (an error to the caller) landed.
		if final != maxAdvanced && !slices.Contains(erroredVals, final) {
			t.Errorf("final %s is neither the highest reported advance %s nor an unacknowledged write %v", final, maxAdvanced, erroredVals)
		}
		stats := p.Stats().Op(opUpdateItem)
		// Every write that happened is a reported advance where the endpoint returns the item
		// with a failed condition (a dropped answer is confirmed by the write's token, on that
		// item or by a consistent read when no attempt was answered); elsewhere a retry that
		// failed on its own write reads as a lost race, at most one per dropped answer.
		extra := st.CheckpointWrites - int64(len(advancedVals))
		if extra < 0 || extra > int64(stats.DroppedAfter) || (returnsItem && extra != 0) {
			t.Errorf("checkpointWrites = %d, %d reported advances (%d dropped responses, endpoint returns the item: %v)", st.CheckpointWrites, len(advancedVals), stats.DroppedAfter, returnsItem)
		}
		if stats.Throttled == 0 || stats.ServerErrors == 0 || stats.DroppedAfter == 0 {
			t.Errorf("faults not exercised: %+v, %d errors", stats, len(erroredVals))
		}
		t.Logf("%d requests: %d throttled, %d 5xx, %d dropped after forward; %d advanced, %d errors, final %s",
			stats.Requests, stats.Throttled, stats.ServerErrors, stats.DroppedAfter, len(advancedVals), len(erroredVals), final)
	})
}

// countingHTTP counts the HTTP round trips the SDK makes (retries included).
type countingHTTP struct {
	inner dynamodb.HTTPClient
	n     atomic.Int64
}

func (c *countingHTTP) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.inner.Do(r)
}

// BenchmarkAdvance measures the checkpoint write against the local stack and reports DynamoDB
// round trips per call: the happy path must be exactly one.
func BenchmarkAdvance(b *testing.B) {
	ctx := context.Background()
	table := stacktest.CheckpointTable(b)
	counter := &countingHTTP{}
	client := dynamodb.NewFromConfig(stacktest.Config(b), func(o *dynamodb.Options) {
		// Wrap the configured client (it already carries AWS_CA_BUNDLE) to count requests.
		counter.inner = o.HTTPClient
		o.HTTPClient = counter
	})
	store := checkpoint.New(client, table)
	cases := []struct {
		name string
		seq  func(i int) string
		want bool
	}{
		{"advancing", func(i int) string { return fmt.Sprint(seq56a[:40], 1_000_000_000+i) }, true},
		{"lost-race", func(int) string { return "1" }, false},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			shard := newShard(b)
			if !bc.want { // every offer loses to an already stored maximum
				if _, err := store.Advance(ctx, shard, seq129); err != nil {
					b.Fatal(err)
				}
			}
			counter.n.Store(0)
			calls := 0
			for b.Loop() {
				res, err := store.Advance(ctx, shard, bc.seq(calls))
				if err != nil || res.Advanced != bc.want {
					b.Fatalf("call %d: %+v, %v", calls, res, err)
				}
				calls++
			}
			b.ReportMetric(float64(counter.n.Load())/float64(calls), "roundtrips/op")
		})
	}
}
