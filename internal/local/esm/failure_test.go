package esm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/onfailure"
)

// invokedSeqs lists each invocation's sequence numbers.
func invokedSeqs(r *recorder) [][]string {
	var out [][]string
	for _, c := range r.invocations() {
		out = append(out, c.seqs())
	}
	return out
}

func equalBatches(a, b [][]string) bool {
	return slices.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func TestReportBatchItemFailures(t *testing.T) {
	t.Parallel()
	// The first invocation answers with resp(seqs); later ones succeed.
	tests := []struct {
		name   string
		report bool
		resp   func(seqs []string) string
		// retried is the index of the first record of the second invocation; -1: no retry.
		retried int
	}{
		{"lowest of several failures: retry from it, successes after it included", true,
			func(s []string) string {
				return fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q},{"itemIdentifier":%q}]}`, s[3], s[1])
			}, 1},
		{"first record failed", true,
			func(s []string) string { return fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q}]}`, s[0]) }, 0},
		{"empty list is success", true, func([]string) string { return `{"batchItemFailures":[]}` }, -1},
		{"null list is success", true, func([]string) string { return `{"batchItemFailures":null}` }, -1},
		{"null response is success", true, func([]string) string { return `null` }, -1},
		// Recorded on AWS: test_kinesis_report_batch_item_success_scenarios[empty_list_success]
		// in LocalStack's test_lambda_integration_kinesis.snapshot.json (2025-11-25).
		{"empty JSON array response is success", true, func([]string) string { return `[]` }, -1},
		{"non-empty JSON array response is total failure", true, func(s []string) string { return fmt.Sprintf(`[%q]`, s[0]) }, 0},
		{"empty response is success", true, func([]string) string { return `` }, -1},
		{"object without the list is success", true, func([]string) string { return `{"status":"ok"}` }, -1},
		{"empty itemIdentifier is total failure", true,
			func([]string) string { return `{"batchItemFailures":[{"itemIdentifier":""}]}` }, 0},
		{"null itemIdentifier is total failure", true,
			func([]string) string { return `{"batchItemFailures":[{"itemIdentifier":null}]}` }, 0},
		{"wrong key name is total failure", true,
			func(s []string) string { return fmt.Sprintf(`{"batchItemFailures":[{"itemId":%q}]}`, s[2]) }, 0},
		{"identifier not in the batch is total failure", true,
			func([]string) string { return `{"batchItemFailures":[{"itemIdentifier":"12345"}]}` }, 0},
		{"unparseable response is total failure", true, func([]string) string { return `not json` }, 0},
		{"a JSON string is total failure", true, func([]string) string { return `"failed"` }, 0},
		{"without ReportBatchItemFailures the response is ignored", false,
			func(s []string) string { return fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q}]}`, s[0]) }, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream(t, 1)
			puts := s.putN(t, 5)
			seqs := seqsOf(puts)
			cfg := baseConfig(s)
			cfg.ReportBatchItemFailures = tc.report
			r := newRecorder(t, func(_ context.Context, _ invocation, n int) ([]byte, error) {
				if n == 0 {
					return []byte(tc.resp(seqs)), nil
				}
				return nil, nil
			})
			m, log := drain(t, s, nil, r, cfg)
			want := [][]string{seqs}
			if tc.retried >= 0 {
				want = append(want, seqs[tc.retried:])
			}
			if got := invokedSeqs(r); !equalBatches(got, want) {
				t.Fatalf("invocations %v, want %v", got, want)
			}
			if cp := m.Checkpoints()[puts[0].shard][0]; cp != seqs[4] {
				t.Fatalf("final checkpoint %s, want %s", cp, seqs[4])
			}
			partial := log.all(EventPartialFailure)
			total := log.all(EventFunctionError)
			switch {
			case tc.retried > 0:
				if len(partial) != 1 || partial[0].FailedSeq != seqs[tc.retried] {
					t.Fatalf("partial failure events %v, want one at %s", partial, seqs[tc.retried])
				}
				// The records before the lowest failure were checkpointed before the retry.
				if cps := log.all(EventCheckpoint); len(cps) < 1 || cps[0].Checkpoint != seqs[tc.retried-1] {
					t.Fatalf("first checkpoint %v, want %s", cps, seqs[tc.retried-1])
				}
			case tc.retried == 0 && len(partial) == 0:
				if len(total) != 1 || !errors.Is(total[0].Err, ErrBadResponse) {
					t.Fatalf("function error events %v, want one ErrBadResponse", total)
				}
			}
		})
	}
}

// poisonHandler fails every invocation whose batch contains the poison sequence number.
func poisonHandler(poison string) handler {
	return func(_ context.Context, inv invocation, _ int) ([]byte, error) {
		if slices.Contains(inv.seqs(), poison) {
			return nil, errors.New("poison")
		}
		return nil, nil
	}
}

func TestBisectBatchOnFunctionError(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	puts := s.putN(t, 8)
	q := seqsOf(puts)
	q5 := q[5]
	fq := newFailureQueue(t)
	cfg := baseConfig(s)
	cfg.BatchSize = 8
	cfg.BisectBatchOnFunctionError = true
	cfg.MaximumRetryAttempts = 1
	cfg.OnFailureQueueURL = fq.url
	r := newRecorder(t, poisonHandler(q5))
	_, log := drain(t, s, fq.sqs, r, cfg)

	// Halving isolates the poison record; only then is the retry quota spent.
	want := [][]string{
		q,      // fails: bisect
		q[:4],  // ok
		q[4:],  // fails: bisect
		q[4:6], // fails: bisect
		q[4:5], // ok
		q[5:6], // fails, cannot split: retry 1
		q[5:6], // fails: retries exhausted -> OnFailure
		q[6:],  // ok
	}
	if got := invokedSeqs(r); !equalBatches(got, want) {
		t.Fatalf("invocations\n got %v\nwant %v", got, want)
	}
	if n := len(log.all(EventBisected)); n != 3 {
		t.Fatalf("%d bisections, want 3", n)
	}
	var attempts []int
	for _, e := range log.all(EventBatchInvoked) {
		attempts = append(attempts, e.Attempt)
	}
	if !slices.Equal(attempts, []int{0, 0, 0, 0, 0, 0, 1, 0}) {
		t.Fatalf("attempts %v: bisection must not consume retries", attempts)
	}
	msgs := fq.receive(t, 1)
	msg := msgs[0]
	bi := msg.KinesisBatchInfo
	if bi.StartSequenceNumber != q5 || bi.EndSequenceNumber != q5 || bi.BatchSize != 1 {
		t.Fatalf("OnFailure batch %+v, want only the poison record %s", bi, q5)
	}
	if msg.RequestContext.Condition != onfailure.ConditionRetryAttemptsExhausted {
		t.Fatalf("condition %s", msg.RequestContext.Condition)
	}
	// 1 (whole) + 1 (second half) + 1 (quarter) + 2 (the record itself) invocations.
	if msg.RequestContext.ApproximateInvokeCount != 5 {
		t.Fatalf("approximateInvokeCount %d, want 5", msg.RequestContext.ApproximateInvokeCount)
	}
	exhausted := log.all(EventRetriesExhausted)
	if len(exhausted) != 1 || exhausted[0].Failure == nil || exhausted[0].Failure.KinesisBatchInfo != bi {
		t.Fatalf("retries-exhausted events %v do not carry the message sent", exhausted)
	}
}

// With ReportBatchItemFailures as well, a partial response splits the batch at the reported
// record rather than in halves.
func TestBisectWithPartialResponse(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	q := seqsOf(s.putN(t, 6))
	cfg := baseConfig(s)
	cfg.BisectBatchOnFunctionError = true
	cfg.ReportBatchItemFailures = true
	r := newRecorder(t, func(_ context.Context, _ invocation, n int) ([]byte, error) {
		if n == 0 {
			return []byte(fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q}]}`, q[4])), nil
		}
		return nil, nil
	})
	_, log := drain(t, s, nil, r, cfg)
	if got, want := invokedSeqs(r), [][]string{q, q[4:]}; !equalBatches(got, want) {
		t.Fatalf("invocations %v, want %v", got, want)
	}
	if n := len(log.all(EventBisected)); n != 0 {
		t.Fatalf("%d halvings after a partial response, want 0", n)
	}
}

func TestMaximumRetryAttempts(t *testing.T) {
	t.Parallel()
	t.Run("exhausted: whole batch to OnFailure in AWS's format, then move on", func(t *testing.T) {
		s := newStream(t, 1)
		puts := s.putN(t, 5)
		q := seqsOf(puts)
		fq := newFailureQueue(t)
		cfg := baseConfig(s)
		cfg.BatchSize = 4
		cfg.MaximumRetryAttempts = 2
		cfg.OnFailureQueueURL = fq.url
		r := newRecorder(t, poisonHandler(q[1]))
		m, log := drain(t, s, fq.sqs, r, cfg)
		want := [][]string{q[:4], q[:4], q[:4], q[4:]}
		if got := invokedSeqs(r); !equalBatches(got, want) {
			t.Fatalf("invocations %v, want %v", got, want)
		}
		msgs := fq.receive(t, 1)
		msg := msgs[0]
		rc := msg.RequestContext
		if rc.Condition != onfailure.ConditionRetryAttemptsExhausted || rc.ApproximateInvokeCount != 3 ||
			rc.FunctionARN != "arn:aws:lambda:us-east-1:"+accountOf(s.arn)+":function:consumer" {
			t.Fatalf("requestContext %+v", rc)
		}
		invoked := log.all(EventBatchInvoked)
		if rc.RequestID != invoked[2].RequestID {
			t.Fatalf("requestId %s, want the last invocation's %s", rc.RequestID, invoked[2].RequestID)
		}
		if msg.ResponseContext == nil || msg.ResponseContext.StatusCode != 200 ||
			msg.ResponseContext.ExecutedVersion != "$LATEST" || msg.ResponseContext.FunctionError != onfailure.FunctionErrorUnhandled {
			t.Fatalf("responseContext %+v", msg.ResponseContext)
		}
		if msg.Version != "1.0" {
			t.Fatalf("version %q", msg.Version)
		}
		if _, err := time.Parse(timestampLayout, msg.Timestamp); err != nil {
			t.Fatalf("timestamp %q: %v", msg.Timestamp, err)
		}
		bi := msg.KinesisBatchInfo
		if bi.ShardID != puts[0].shard || bi.StartSequenceNumber != q[0] || bi.EndSequenceNumber != q[3] ||
			bi.BatchSize != 4 || bi.StreamARN != s.arn {
			t.Fatalf("KinesisBatchInfo %+v", bi)
		}
		for _, ts := range []string{bi.ApproximateArrivalOfFirstRecord, bi.ApproximateArrivalOfLastRecord} {
			if _, err := time.Parse(timestampLayout, ts); err != nil {
				t.Fatalf("arrival %q: %v", ts, err)
			}
		}
		if cp := m.Checkpoints()[puts[0].shard][0]; cp != q[4] {
			t.Fatalf("checkpoint %s, want %s: the mapping must move on", cp, q[4])
		}
	})

	t.Run("zero: no retry", func(t *testing.T) {
		s := newStream(t, 1)
		q := seqsOf(s.putN(t, 2))
		cfg := baseConfig(s)
		cfg.BatchSize = 1
		cfg.MaximumRetryAttempts = 0
		r := newRecorder(t, poisonHandler(q[0]))
		drain(t, s, nil, r, cfg)
		if got, want := invokedSeqs(r), [][]string{q[:1], q[1:]}; !equalBatches(got, want) {
			t.Fatalf("invocations %v, want %v", got, want)
		}
	})

	t.Run("infinite: retried until it succeeds", func(t *testing.T) {
		s := newStream(t, 1)
		q := seqsOf(s.putN(t, 3))
		cfg := baseConfig(s)
		cfg.MaximumRetryAttempts = -1
		r := newRecorder(t, func(_ context.Context, _ invocation, n int) ([]byte, error) {
			if n < 6 {
				return nil, errors.New("transient")
			}
			return nil, nil
		})
		_, log := drain(t, s, nil, r, cfg)
		if got := invokedSeqs(r); len(got) != 7 || !slices.Equal(got[6], q) {
			t.Fatalf("invocations %v, want the batch 7 times", got)
		}
		if n := len(log.all(EventRetriesExhausted)); n != 0 {
			t.Fatalf("%d give-ups with infinite retries", n)
		}
	})

	t.Run("partial failures consume retries too", func(t *testing.T) {
		s := newStream(t, 1)
		q := seqsOf(s.putN(t, 4))
		fq := newFailureQueue(t)
		cfg := baseConfig(s)
		cfg.ReportBatchItemFailures = true
		cfg.MaximumRetryAttempts = 1
		cfg.OnFailureQueueURL = fq.url
		r := newRecorder(t, func(_ context.Context, _ invocation, _ int) ([]byte, error) {
			return []byte(fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q}]}`, q[2])), nil
		})
		drain(t, s, fq.sqs, r, cfg)
		if got, want := invokedSeqs(r), [][]string{q, q[2:]}; !equalBatches(got, want) {
			t.Fatalf("invocations %v, want %v", got, want)
		}
		msg := fq.receive(t, 1)[0]
		if bi := msg.KinesisBatchInfo; bi.StartSequenceNumber != q[2] || bi.EndSequenceNumber != q[3] || bi.BatchSize != 2 {
			t.Fatalf("OnFailure batch %+v, want %s..%s", bi, q[2], q[3])
		}
		// The function answered: no function error in the response context.
		if msg.ResponseContext == nil || msg.ResponseContext.FunctionError != "" {
			t.Fatalf("responseContext %+v, want functionError null", msg.ResponseContext)
		}
	})
}

func accountOf(arn string) string {
	// arn:aws:kinesis:<region>:<account>:stream/<name>
	if parts := strings.Split(arn, ":"); len(parts) > 4 {
		return parts[4]
	}
	return ""
}

func TestMaximumRecordAge(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64 // the mapping's clock runs this far ahead
	clock := WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })

	t.Run("records already too old are not sent", func(t *testing.T) {
		offset.Store(int64(2 * time.Hour))
		defer offset.Store(0)
		s := newStream(t, 1)
		puts := s.putN(t, 3)
		fq := newFailureQueue(t)
		cfg := baseConfig(s)
		cfg.MaximumRecordAge = time.Hour
		cfg.OnFailureQueueURL = fq.url
		r := newRecorder(t, nil)
		m, log := drain(t, s, fq.sqs, r, cfg, clock)
		if n := len(r.invocations()); n != 0 {
			t.Fatalf("%d invocations with expired records", n)
		}
		msg := fq.receive(t, 1)[0]
		// Recorded on AWS (LocalStack's test_kinesis_maximum_record_age_exceeded[expire-before-ingestion]
		// and ..._discard_records, 2025-11-25): approximateInvokeCount 1 for records never invoked.
		if msg.RequestContext.Condition != onfailure.ConditionRecordAgeExceeded || msg.RequestContext.ApproximateInvokeCount != 1 {
			t.Fatalf("requestContext %+v, want RecordAgeExceeded with approximateInvokeCount 1", msg.RequestContext)
		}
		if msg.ResponseContext != nil {
			t.Fatalf("responseContext %+v for records never invoked", msg.ResponseContext)
		}
		if bi := msg.KinesisBatchInfo; bi.StartSequenceNumber != puts[0].seq || bi.EndSequenceNumber != puts[2].seq || bi.BatchSize != 3 {
			t.Fatalf("KinesisBatchInfo %+v", bi)
		}
		if len(log.all(EventRecordsExpired)) != 1 {
			t.Fatal("no records-expired event")
		}
		if cp := m.Checkpoints()[puts[0].shard][0]; cp != puts[2].seq {
			t.Fatalf("checkpoint %s, want past the expired records", cp)
		}
	})

	t.Run("a failing batch is retried until its records are too old", func(t *testing.T) {
		s := newStream(t, 1)
		puts := s.putN(t, 2)
		fq := newFailureQueue(t)
		cfg := baseConfig(s)
		cfg.MaximumRecordAge = time.Hour
		cfg.MaximumRetryAttempts = -1
		cfg.OnFailureQueueURL = fq.url
		r := newRecorder(t, func(_ context.Context, _ invocation, n int) ([]byte, error) {
			if n == 2 {
				offset.Store(int64(2 * time.Hour)) // time passes during the third attempt
			}
			return nil, errors.New("always fails")
		})
		defer offset.Store(0)
		drain(t, s, fq.sqs, r, cfg, clock)
		if n := len(r.invocations()); n != 3 {
			t.Fatalf("%d invocations, want 3", n)
		}
		msg := fq.receive(t, 1)[0]
		if msg.RequestContext.Condition != onfailure.ConditionRecordAgeExceeded || msg.RequestContext.ApproximateInvokeCount != 3 {
			t.Fatalf("requestContext %+v", msg.RequestContext)
		}
		// Recorded on AWS (LocalStack's test_kinesis_maximum_record_age_exceeded[expire-while-retrying],
		// 2025-11-25): no responseContext on a RecordAgeExceeded message, even after 8 invocations.
		if msg.ResponseContext != nil {
			t.Fatalf("responseContext %+v on a RecordAgeExceeded message, want none", msg.ResponseContext)
		}
		if bi := msg.KinesisBatchInfo; bi.StartSequenceNumber != puts[0].seq || bi.EndSequenceNumber != puts[1].seq {
			t.Fatalf("KinesisBatchInfo %+v", bi)
		}
	})
}

func TestFunctionTimeout(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	q := seqsOf(s.putN(t, 2))
	cfg := baseConfig(s)
	cfg.FunctionTimeout = time.Second
	var deadlines []time.Duration
	r := newRecorder(t, func(ctx context.Context, _ invocation, n int) ([]byte, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, errors.New("invoker got no deadline")
		}
		deadlines = append(deadlines, time.Until(dl))
		switch n {
		case 0: // honours the deadline
			<-ctx.Done()
			return nil, ctx.Err()
		case 1: // ignores it and answers late: still a timeout
			time.Sleep(1500 * time.Millisecond)
			return nil, nil
		}
		return nil, nil
	})
	_, log := drain(t, s, nil, r, cfg)
	if got := invokedSeqs(r); len(got) != 3 || !slices.Equal(got[2], q) {
		t.Fatalf("invocations %v, want the batch 3 times", got)
	}
	errs := log.all(EventFunctionError)
	if len(errs) != 2 {
		t.Fatalf("%d function errors, want 2", len(errs))
	}
	for _, e := range errs {
		if !errors.Is(e.Err, ErrFunctionTimeout) || !errors.Is(e.Err, ErrFunction) {
			t.Fatalf("error %v, want a function timeout", e.Err)
		}
	}
	for _, d := range deadlines {
		if d > cfg.FunctionTimeout {
			t.Fatalf("deadline %s away, more than the function timeout", d)
		}
	}
}
