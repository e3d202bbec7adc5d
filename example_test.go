package gapless_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/gapless-dev/gapless"
)

// A service's consumer function is one call around its Process; its reconciler function is the
// same call to StartReconciler with the same Process. The environment (GAPLESS_GROUP,
// CHECKPOINT_TABLE, ...) comes from the template; a bad variable fails the cold start naming it.
func ExampleStartConsumer() {
	process := func(ctx context.Context, r gapless.Record) error {
		// Write r.Data somewhere, idempotently by r.ID(): a record may arrive twice, never zero times.
		return nil
	}
	gapless.StartConsumer(process) // calls lambda.Start; does not return
}

// The default Process (nil) forwards every record to TARGET_QUEUE_URL: this repository's own
// functions are exactly this.
func ExampleStartReconciler() {
	gapless.StartReconciler(nil)
}

// NewConsumer returns the handler StartConsumer registers, to drive it without Lambda. A record
// whose Process fails is reported to the event-source mapping, which delivers the batch again
// from it; after MAX_RECORD_ATTEMPTS failures it is parked with its payload.
func ExampleNewConsumer() {
	st := newStack() // a stream, the two tables, the parked queue and the payload bucket on the local stack
	process := func(ctx context.Context, r gapless.Record) error {
		if string(r.Data) == "order-2" {
			return errors.New("the order service is down")
		}
		fmt.Printf("processed %s (partition key %s)\n", r.Data, r.PartitionKey)
		return nil
	}
	c, err := gapless.NewConsumer(context.Background(), process, gapless.WithGetenv(st.getenv), gapless.WithOutput(io.Discard))
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := st.put("order-1", "order-2", "order-3")
	resp, err := c.HandleJSON(context.Background(), raw(ev))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range resp.BatchItemFailures {
		fmt.Println("redeliver from order-2:", f.ItemIdentifier == ev.Records[1].Kinesis.SequenceNumber)
	}
	// Output:
	// processed order-1 (partition key k)
	// redeliver from order-2: true
}

// The reconciler finds records behind the checkpoint that no invocation processed (here the
// consumer never saw order-2, as when a batch is skipped) and replays them through the same
// Process; its scheduled pass answers with a summary.
func ExampleNewReconciler() {
	st := newStack() // as above, with SETTLE_AFTER=1ms (30m by default): records this old may be judged gaps
	process := func(ctx context.Context, r gapless.Record) error {
		fmt.Printf("processed %s\n", r.Data)
		return nil
	}
	opts := []gapless.Option{gapless.WithGetenv(st.getenv), gapless.WithOutput(io.Discard)}
	c, err := gapless.NewConsumer(context.Background(), process, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := st.put("order-1", "order-2", "order-3")
	ev.Records = append(ev.Records[:1], ev.Records[2]) // order-2 never reaches the consumer
	if _, err := c.Handle(context.Background(), ev); err != nil {
		fmt.Println(err)
		return
	}
	r, err := gapless.NewReconciler(context.Background(), process, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	summary, err := r.Handle(context.Background(), json.RawMessage(`{}`)) // what the EventBridge schedule sends, near enough
	if err != nil {
		fmt.Println(err)
		return
	}
	var s struct{ GapsReplayed int }
	b, _ := json.Marshal(summary)
	_ = json.Unmarshal(b, &s)
	fmt.Println("gaps replayed:", s.GapsReplayed)
	// Output:
	// processed order-1
	// processed order-3
	// processed order-2
	// gaps replayed: 1
}

// Middleware around the Process, yours or the default one: here a log line per failed record.
func ExampleWithProcessWrapper() {
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	logFailures := func(next gapless.ProcessFunc) gapless.ProcessFunc {
		return func(ctx context.Context, r gapless.Record) error {
			err := next(ctx, r)
			if err != nil {
				logger.WarnContext(ctx, "record failed", "record_id", r.ID(), "error", err)
			}
			return err
		}
	}
	gapless.StartConsumer(nil, gapless.WithLogger(logger), gapless.WithProcessWrapper(logFailures))
}

// A record's id is the same on every attempt, replay and redrive: the idempotency key.
func ExampleRecord_ID() {
	r := gapless.Record{ShardID: "shardId-000000000003", SequenceNumber: "49590338271490256608559692538361571095921575989136588818"}
	fmt.Println(r.ID())
	// Output: shardId-000000000003:49590338271490256608559692538361571095921575989136588818:0
}

// A batch Process gets waves of records, at most one per partition key, and answers one outcome
// per record: here one request writes the whole wave, and a record the sink refuses is
// redelivered (and parked after MAX_RECORD_ATTEMPTS) like a failing ProcessFunc's.
func ExampleWithBatchProcess() {
	st := newStack()
	write := func(ctx context.Context, recs []gapless.Record) []error {
		errs := make([]error, len(recs))
		for i, r := range recs {
			if string(r.Data) == "order-2" {
				errs[i] = errors.New("refused by the warehouse")
				continue
			}
			fmt.Printf("wave of %d: wrote %s\n", len(recs), r.Data)
		}
		return errs
	}
	c, err := gapless.NewConsumer(context.Background(), nil, gapless.WithBatchProcess(write, 25),
		gapless.WithGetenv(st.getenv), gapless.WithOutput(io.Discard))
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := st.put("order-1", "order-2", "order-3") // one partition key: one record per wave
	resp, err := c.HandleJSON(context.Background(), raw(ev))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range resp.BatchItemFailures {
		fmt.Println("redeliver from order-2:", f.ItemIdentifier == ev.Records[1].Kinesis.SequenceNumber)
	}
	// Output:
	// wave of 1: wrote order-1
	// redeliver from order-2: true
}
