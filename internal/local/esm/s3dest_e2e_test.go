package esm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/consumer"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/retention"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// A batch the mapping gives up (its invocations crash) on a shard whose records then expire
// (the retention proxy trims the stream) before the reconciler reads the failure queue. With
// the SQS destination the message carries the metadata only: the records are gone and counted
// lost to retention. With the S3 destination the local mapping writes the records in AWS's
// object format and sends the bucket's notification to the failure queue; the real reconciler
// handler replays them from the object: each processed once, none lost.
func TestS3DestinationRecoversATrimmedRange(t *testing.T) {
	t.Parallel()
	for _, dest := range []string{"sqs", "s3"} {
		t.Run(dest, func(t *testing.T) {
			s := newStream(t, 1)
			puts := s.putN(t, 15, "k0", "k1", "k2")
			q, shard := seqsOf(puts), puts[0].shard
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			trim, err := retention.Start(os.Getenv("AWS_ENDPOINT_URL_KINESIS"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = trim.Close() })
			kin := kinesis.NewFromConfig(stacktest.Config(t), func(o *kinesis.Options) { o.BaseEndpoint = aws.String(trim.URL()) })
			viaProxy := &stream{kin: kin, name: s.name, arn: s.arn}

			ddb, sqsc := stacktest.DynamoDB(t), stacktest.SQS(t)
			cps := checkpoint.New(ddb, stacktest.CheckpointTable(t))
			ledger := dedupe.New(ddb, stacktest.LedgerTable(t), dedupe.WithLogger(slog.New(slog.DiscardHandler)))
			parker := park.New(sqsc, stacktest.Queue(t, "parked", false))
			done := &processed{n: map[recordid.ID]int{}}
			newPipeline := func() *pipeline.Pipeline {
				p, err := pipeline.New(pipeline.DedupeLedger{L: ledger}, pipeline.CheckpointStore{S: cps}, parker, done.process,
					pipeline.Config{MaxRecordAttempts: 5, MaxConcurrency: 4, DeadlineMargin: 500 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			const group = "g"
			h := consumer.NewHandler(newPipeline(), group, slog.New(slog.DiscardHandler))
			crashes := q[5:10]
			r := newRecorder(t, func(ctx context.Context, inv invocation, _ int) ([]byte, error) {
				if slices.ContainsFunc(inv.seqs(), func(seq string) bool { return slices.Contains(crashes, seq) }) {
					return nil, errors.New("Runtime.ExitError")
				}
				resp, err := h.HandleJSON(ctx, inv.payload)
				if err != nil {
					return nil, err
				}
				return json.Marshal(resp)
			})
			fq := newFailureQueue(t)
			cfg := baseConfig(s)
			cfg.BatchSize = 5
			cfg.MaximumRetryAttempts = 1
			cfg.FunctionTimeout = e2eFunctionTimeout
			cfg.ReportBatchItemFailures = true
			var opts []Option
			objects, bucket := stacktest.S3(t), ""
			if dest == "s3" {
				bucket = stacktest.Bucket(t)
				opts = append(opts, WithS3Destination(objects, "arn:aws:s3:::"+bucket, fq.url))
			} else {
				cfg.OnFailureQueueURL = fq.url
			}
			opts = append(opts, WithTrimHorizon(trim.Horizon))
			m, _ := drain(t, viaProxy, fq.sqs, r, cfg, opts...)
			if n := m.DestinationDeliveryFailures(); n != 0 {
				t.Fatalf("DestinationDeliveryFailures %d", n)
			}

			// The stream trims every record so far before the reconciler reads the queue; a
			// later record is held.
			time.Sleep(10 * time.Millisecond)
			trim.ExpireBefore(time.Now())
			time.Sleep(10 * time.Millisecond)
			s.putN(t, 2, "k0")

			out, err := fq.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(fq.url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil || len(out.Messages) != 1 {
				t.Fatalf("failure queue: %d messages, %v; want 1", len(out.Messages), err)
			}
			rec, err := reconcile.New(kin, cps, newPipeline(), reconcile.Config{Group: group, Stream: s.name,
				SettleAfter: time.Minute, ReadInterval: time.Millisecond},
				reconcile.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			var hopts []reconcile.HandlerOption
			if bucket != "" {
				hopts = append(hopts, reconcile.WithFailureBucket(objects, bucket))
			}
			rh := reconcile.NewHandler(rec, nil, slog.New(slog.DiscardHandler), hopts...)
			resp := rh.HandleSQS(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: aws.ToString(out.Messages[0].Body), EventSource: "aws:sqs"}}})
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("failures %v", resp.BatchItemFailures)
			}
			lost := 0
			for _, seq := range crashes {
				switch n := done.count(shard, seq); {
				case n == 0:
					lost++
				case n > 1:
					t.Errorf("record %s processed %d times", seq, n)
				}
			}
			st, err := cps.Get(ctx, recordid.Shard{Group: group, Stream: s.name, ShardID: shard})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s destination: %d of %d given-up records lost; LostToRetention spans counted %d", dest, lost, len(crashes), st.LostToRetention)
			switch dest {
			case "sqs":
				if lost != len(crashes) || st.LostToRetention != 1 {
					t.Errorf("SQS destination: %d lost, %d spans counted; want all %d lost and the span counted", lost, st.LostToRetention, len(crashes))
				}
			case "s3":
				if lost != 0 {
					t.Errorf("S3 destination: %d given-up records lost, want 0 (the object holds them)", lost)
				}
			}
		})
	}
}
