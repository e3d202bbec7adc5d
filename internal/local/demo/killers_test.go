package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/loadgen"
)

// countingSQS is an SQS endpoint that counts the requests reaching it and answers every
// SendMessage.
func countingSQS(t *testing.T) (*sqs.Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		fmt.Fprint(w, `{"MessageId":"m","MD5OfMessageBody":"9dd4e461268c8034f5c8564e155c67a6"}`)
	}))
	t.Cleanup(srv.Close)
	cfg := deadRuntimeGuard(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) }), &n
}

// TestInProcessCrashAbandonsTheInvocation: under the in-process runtime a crash killer ends the
// invocation at once with a Runtime.ExitError, and nothing the invocation's code does after
// the crash reaches a service, not even through a context detached from its cancellation.
// A hang (the invocation's timeout) ends the same way.
func TestInProcessCrashAbandonsTheInvocation(t *testing.T) {
	t.Parallel()
	client, requests := countingSQS(t)
	send := func(ctx context.Context) error {
		_, err := client.SendMessage(context.WithoutCancel(ctx), &sqs.SendMessageInput{QueueUrl: aws.String("http://q/1"), MessageBody: aws.String("x")})
		return err
	}
	invoke := func(ctx context.Context, fn func(context.Context) error) error {
		_, err := runInvocation(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
		return err
	}
	cfg := chaos.Config{Seed: 1, Crash: 1}
	ch, err := chaos.New(cfg, chaos.WithCrash(crashInProcess))
	if err != nil {
		t.Fatal(err)
	}

	// A live invocation reaches the service (the counter can count).
	if err := invoke(context.Background(), send); err != nil || requests.Load() != 1 {
		t.Fatalf("live invocation: %v, %d requests; want nil, 1", err, requests.Load())
	}

	after := make(chan error, 1)
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = invoke(ctx, func(ctx context.Context) error {
		err := ch.Before(ctx, "killer", nil)
		<-release // the dead invocation's code goes on only after its caller has moved on
		after <- send(ctx)
		return err
	})
	if !errors.Is(err, errRuntimeExited) {
		t.Fatalf("crashed invocation returned %v, want %v", err, errRuntimeExited)
	}
	close(release)
	if err := <-after; !errors.Is(err, errDeadRuntime) {
		t.Fatalf("a call after the crash: %v, want %v", err, errDeadRuntime)
	}
	if requests.Load() != 1 {
		t.Fatalf("%d requests reached the service, want only the live invocation's", requests.Load())
	}
	if ch.Stats().Crashes != 1 {
		t.Fatalf("Stats %+v, want one crash", ch.Stats())
	}

	// Timed out: the caller gets the deadline, the invocation's later calls fail.
	tctx, tcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer tcancel()
	hung := make(chan struct{})
	err = invoke(tctx, func(ctx context.Context) error {
		<-hung // ignores its context, like a hang killer
		after <- send(ctx)
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung invocation returned %v, want the deadline", err)
	}
	close(hung)
	if err := <-after; !errors.Is(err, errDeadRuntime) || requests.Load() != 1 {
		t.Fatalf("a call after the timeout: %v (%d requests), want %v and none sent", err, requests.Load(), errDeadRuntime)
	}
}

// TestKillerFates: each killer gets one fate from what arrived downstream and the ranges the
// mapping gave up on, matched by shard, lane and sequence number.
func TestKillerFates(t *testing.T) {
	t.Parallel()
	const parallelization = 2
	c := DefaultConfig()
	c.Faults.Crash, c.Faults.Hang = 0.3, 0.3
	c = c.withDefaults()
	cfg := c.chaosConfig("")
	// Six killers, keys in both lanes.
	var ids []string
	for i := 0; len(ids) < 6; i++ {
		if id := fmt.Sprintf("k-%d", i); cfg.Killer(id) != chaos.NotKiller {
			ids = append(ids, id)
		}
	}
	key := func(lane int) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("pk-%d", i); laneOf(k, parallelization) == lane {
				return k
			}
		}
	}
	v := &variant{e: &env{cfg: c}, target: loadgen.NewTally(), parked: loadgen.NewTally(), writes: newLedgerOfWrites(nil)}
	const shard = "shardId-000000000000"
	for i, id := range ids {
		v.writes.byID[id] = written{id: id, key: key(i % 2), shard: shard, seq: fmt.Sprint(100 + i)}
	}
	for i := 0; ; i++ { // one innocent record, not counted
		if id := fmt.Sprintf("i-%d", i); cfg.Killer(id) == chaos.NotKiller {
			v.writes.byID[id] = written{id: id, key: key(0), shard: shard, seq: "99"}
			break
		}
	}
	v.target.Add(ids[0], nil)
	v.parked.Add(ids[1], nil)
	// ids[2] (lane 0, seq 102): given up after retries; ids[3] (lane 1, 103): for its age;
	// ids[4] (lane 0, 104) lies inside a range given up in lane 1 only: held; ids[5]: held.
	v.gaveUp.note(esm.Event{Type: esm.EventRetriesExhausted, ShardID: shard, Lane: 0, FirstSeq: "102", LastSeq: "102"})
	v.gaveUp.note(esm.Event{Type: esm.EventRecordsExpired, ShardID: shard, Lane: 1, FirstSeq: "101", LastSeq: "104"})
	v.gaveUp.note(esm.Event{Type: esm.EventPartialFailure, ShardID: shard, Lane: 1, FirstSeq: "100", LastSeq: "200"})

	ks := v.killers(parallelization)
	if ks.Produced() != 6 || ks.Crash+ks.Hang != 6 {
		t.Fatalf("produced %d (%d crash, %d hang), want 6", ks.Produced(), ks.Crash, ks.Hang)
	}
	want := map[string]string{ids[0]: fateDelivered, ids[1]: fateParked, ids[2]: fateGivenUpRetry,
		ids[3]: fateGivenUpAge, ids[4]: fateHeld, ids[5]: fateHeld}
	for _, r := range ks.Records {
		if r.Fate != want[r.ID] {
			t.Errorf("killer %s (lane %d, seq %s): fate %q, want %q", r.ID, laneOf(v.writes.byID[r.ID].key, parallelization), r.Seq, r.Fate, want[r.ID])
		}
		if r.Kind != cfg.Killer(r.ID).String() {
			t.Errorf("killer %s: kind %s, want %s", r.ID, r.Kind, cfg.Killer(r.ID))
		}
	}
	if ks.Delivered != 1 || ks.Parked != 1 || ks.GivenUpRetry != 1 || ks.GivenUpAge != 1 || ks.Held != 2 {
		t.Fatalf("counts %+v", ks)
	}
}

// TestKillerSection: the report names what the mapping alone did with the killers.
func TestKillerSection(t *testing.T) {
	t.Parallel()
	res := sampleResult()
	if strings.Contains(Markdown(res), "## Killer records") {
		t.Fatal("a run without killers has a killer section")
	}
	res.Settings.RetryAttempts = 10
	res.Baseline.Killers = KillerStats{Crash: 4, Hang: 8, GivenUpRetry: 9, GivenUpAge: 1, Held: 2}
	res.Gapless.Killers = KillerStats{Crash: 4, Hang: 8, Parked: 12}
	if res.CheckpointDecides != nil { // every variant meets the same killers
		res.CheckpointDecides.Killers = KillerStats{Crash: 4, Hang: 8}
	}
	md := Markdown(res)
	for _, s := range []string{
		"## Killer records",
		"| produced | 12 | 12 |",
		"| parked with their payload | 0 | 12 |",
		"| given up by the mapping: retries exhausted | 9 | 0 |",
		"| held: still retried, lane blocked, when the run ended | 2 | 0 |",
		"of 12 killers it gave up on 9 after MaximumRetryAttempts (10) and discarded 1 for their age",
		"2 were still being retried",
		"| killer records produced (crash / hang) | 4 / 8 | 4 / 8 | 4 / 8 |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
	if tab := Table(res); !strings.Contains(tab, "of which killers (crash / hang)") {
		t.Errorf("table lacks the killers row:\n%s", tab)
	}
}
