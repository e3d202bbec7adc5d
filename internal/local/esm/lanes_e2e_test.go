package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/lanes"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

// applied records, per partition key, the sequence numbers Process applied, in order.
type applied struct {
	mu    sync.Mutex
	byKey map[string][]string
}

func (a *applied) process(_ context.Context, r pipeline.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byKey[r.PartitionKey] = append(a.byKey[r.PartitionKey], r.ID.Seq)
	return nil
}

func (a *applied) of(key string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.byKey[key])
}

// keysInLanes returns two partition keys in different lanes of n.
func keysInLanes(n int) (a, b string) {
	a = "key-a"
	for i := 0; ; i++ {
		b = fmt.Sprintf("key-b%d", i)
		if lanes.Of(b, n) != lanes.Of(a, n) {
			return a, b
		}
	}
}

// TestFailureRangeReplaysOnlyItsLane: with ParallelizationFactor 3 a failure-queue range of one
// lane spans the other lanes' records (sequence numbers are shard-wide). The local mapping, the
// real consumer and the real failure-queue handler run together: lane A gives up its batch
// A1, A2 while lane B is still working on B1 (its invocation has not started); the range A1..A2
// holds B2. Replaying the range must not apply B2 before lane B applies B1: per-key order holds
// for both keys, in both ON_PARK modes, with an SQS or an S3 on-failure destination. With every lane replayed (the handler without the
// mapping's ParallelizationFactor, which was the only behaviour before) B2 was applied first.
func TestFailureRangeReplaysOnlyItsLane(t *testing.T) {
	t.Parallel()
	const factor = 3
	for _, tc := range []struct{ dest, onPark string }{
		{"sqs", config.OnParkContinue}, {"sqs", config.OnParkHoldKey}, {"s3", config.OnParkContinue}, {"s3", config.OnParkHoldKey},
	} {
		onPark := tc.onPark
		t.Run(tc.dest+"/"+onPark, func(t *testing.T) {
			keyA, keyB := keysInLanes(factor)
			s := newStream(t, 1)
			// B1 < A1 < B2 < A2: lane A's range A1..A2 holds lane B's B2.
			b1 := s.put(t, keyB, []byte(`{"r":"B1"}`))
			a1 := s.put(t, keyA, []byte(`{"r":"A1"}`))
			b2 := s.put(t, keyB, []byte(`{"r":"B2"}`))
			a2 := s.put(t, keyA, []byte(`{"r":"A2"}`))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			ddb, sqsc := stacktest.DynamoDB(t), stacktest.SQS(t)
			cps := checkpoint.New(ddb, stacktest.CheckpointTable(t))
			ledgerTable := stacktest.LedgerTable(t)
			ledger := dedupe.New(ddb, ledgerTable, dedupe.WithLogger(slog.New(slog.DiscardHandler)))
			parker := park.New(sqsc, stacktest.Queue(t, "parked", false))
			order := &applied{byKey: map[string][]string{}}
			newPipeline := func() *pipeline.Pipeline {
				var opts []pipeline.Option
				if onPark == config.OnParkHoldKey {
					opts = append(opts, pipeline.WithHoldKey(pipeline.HoldStore{H: dedupe.NewHolds(ddb, ledgerTable)}))
				}
				p, err := pipeline.New(pipeline.DedupeLedger{L: ledger}, pipeline.CheckpointStore{S: cps}, parker, order.process,
					pipeline.Config{MaxRecordAttempts: 5, MaxConcurrency: 4, DeadlineMargin: 500 * time.Millisecond}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			const group = "g"
			h := consumer.NewHandler(newPipeline(), group, slog.New(slog.DiscardHandler), consumer.WithStream(s.name), consumer.WithStreamARN(s.arn))
			rec, err := reconcile.New(s.kin, cps, newPipeline(), reconcile.Config{Group: group, Stream: s.name, StreamARN: s.arn,
				SettleAfter: time.Minute, ReadInterval: time.Millisecond}, reconcile.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			fq := newFailureQueue(t)
			hopts := []reconcile.HandlerOption{reconcile.WithConsumerFunction("consumer"), reconcile.WithLanes(factor)}
			var mopts []Option
			if tc.dest == "s3" { // the object's notification comes on the failure queue
				objects, bucket := stacktest.S3(t), stacktest.Bucket(t)
				mopts = append(mopts, WithS3Destination(objects, "arn:aws:s3:::"+bucket, fq.url))
				hopts = append(hopts, reconcile.WithFailureBucket(objects, bucket))
			}
			fqh := reconcile.NewHandler(rec, nil, slog.New(slog.DiscardHandler), hopts...)

			// Lane A's invocations crash until the mapping gives its batch up; lane B's first
			// invocation waits until the failure queue's message is handled.
			handled := make(chan struct{})
			r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
				seqs := inv.seqs()
				switch {
				case slices.Contains(seqs, a1.seq) || slices.Contains(seqs, a2.seq):
					return nil, errors.New("Runtime.ExitError")
				case slices.Contains(seqs, b1.seq):
					select {
					case <-handled:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				resp, err := h.HandleJSON(ctx, inv.payload)
				if err != nil {
					return nil, err
				}
				return json.Marshal(resp)
			})
			cfg := baseConfig(s)
			cfg.ParallelizationFactor = factor
			cfg.MaximumRetryAttempts = 1
			cfg.FunctionTimeout = e2eFunctionTimeout
			cfg.ReportBatchItemFailures = true
			if tc.dest == "sqs" {
				cfg.OnFailureQueueURL = fq.url
			}

			// The failure queue's event source: receive, invoke the reconciler, delete what the
			// response does not name.
			go func() {
				defer close(handled)
				for ctx.Err() == nil {
					out, err := fq.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
					if err != nil || len(out.Messages) == 0 {
						continue
					}
					var ev events.SQSEvent
					for _, m := range out.Messages {
						ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
							Body: aws.ToString(m.Body), EventSource: "aws:sqs"})
					}
					resp := fqh.HandleSQS(ctx, ev)
					if len(resp.BatchItemFailures) != 0 {
						t.Errorf("failure-queue message not accounted for: %v", resp.BatchItemFailures)
					}
					for _, m := range out.Messages {
						_, _ = fq.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(fq.url), ReceiptHandle: m.ReceiptHandle})
					}
					return
				}
			}()
			_, log := drain(t, s, fq.sqs, r, cfg, mopts...)

			if ev := log.all(EventRetriesExhausted); len(ev) != 1 || ev[0].FirstSeq != a1.seq || ev[0].LastSeq != a2.seq {
				t.Fatalf("given-up events %+v, want lane A's batch %s..%s", ev, a1.seq, a2.seq)
			}
			if got, want := order.of(keyB), []string{b1.seq, b2.seq}; !slices.Equal(got, want) {
				t.Errorf("key %s (lane %d) applied %v, want %v: a record of another lane of the range ran before its key's earlier record",
					keyB, lanes.Of(keyB, factor), got, want)
			}
			if got, want := order.of(keyA), []string{a1.seq, a2.seq}; !slices.Equal(got, want) {
				t.Errorf("key %s (the given-up lane %d) applied %v, want %v", keyA, lanes.Of(keyA, factor), got, want)
			}
		})
	}
}
