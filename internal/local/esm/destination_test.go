package esm

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gapless-dev/gapless/internal/onfailure"
)

// With BisectBatchOnFunctionError two poison records of one batch are isolated and given up
// separately; Lambda "consolidates failed messages metadata when writing to the OnFailure
// destination" (CloudFormation, AWS::Lambda::EventSourceMapping BisectBatchOnFunctionError): one
// message whose range runs from the first to the last record given up, batchSize 2, the
// records that succeeded in between inside the range.
func TestOnFailureMetadataIsConsolidated(t *testing.T) {
	t.Parallel()
	s := newStream(t, 1)
	puts := s.putN(t, 8)
	q := seqsOf(puts)
	fq := newFailureQueue(t)
	cfg := baseConfig(s)
	cfg.BatchSize = 8
	cfg.BisectBatchOnFunctionError = true
	cfg.MaximumRetryAttempts = 0
	cfg.OnFailureQueueURL = fq.url
	poison := []string{q[2], q[5]}
	r := newRecorder(t, func(_ context.Context, inv invocation, _ int) ([]byte, error) {
		for _, p := range poison {
			if slices.Contains(inv.seqs(), p) {
				return nil, errors.New("poison")
			}
		}
		return nil, nil
	})
	m, log := drain(t, s, fq.sqs, r, cfg)
	msg := fq.receive(t, 1)[0]
	bi := msg.KinesisBatchInfo
	if bi.StartSequenceNumber != q[2] || bi.EndSequenceNumber != q[5] || bi.BatchSize != 2 {
		t.Fatalf("KinesisBatchInfo %s..%s batchSize %d, want one message %s..%s batchSize 2",
			bi.StartSequenceNumber, bi.EndSequenceNumber, bi.BatchSize, q[2], q[5])
	}
	if msg.RequestContext.Condition != onfailure.ConditionRetryAttemptsExhausted || msg.ResponseContext == nil {
		t.Fatalf("requestContext %+v responseContext %+v", msg.RequestContext, msg.ResponseContext)
	}
	// Every record other than the poison ones was delivered: the range holds records that succeeded.
	for _, seq := range q {
		if !slices.Contains(poison, seq) && !slices.Contains(r.delivered(), seq) {
			t.Fatalf("record %s never delivered", seq)
		}
	}
	if ev := log.all(EventRetriesExhausted); len(ev) != 1 || ev[0].Size != 2 || ev[0].FirstSeq != q[2] || ev[0].LastSeq != q[5] {
		t.Fatalf("retries-exhausted events %+v, want one for the consolidated message", ev)
	}
	if cp := m.Checkpoints()[puts[0].shard][0]; cp != q[7] {
		t.Fatalf("checkpoint %s, want %s", cp, q[7])
	}
	// The lane's checkpoint does not pass a given-up record before its message is sent.
	for _, e := range log.all(EventCheckpoint, EventRetriesExhausted) {
		if e.Type == EventRetriesExhausted {
			break
		}
		if !slices.Contains(q[:2], e.Checkpoint) {
			t.Fatalf("checkpoint %s before the on-failure message was sent, want at most %s", e.Checkpoint, q[1])
		}
	}
	if _, err := onfailure.Parse(mustJSON(t, msg)); err != nil {
		t.Fatalf("the reconciler's parser rejects a consolidated message: %v", err)
	}
}

// A delivery that fails for good is counted (DestinationDeliveryFailures) and the records are
// discarded all the same: the lane moves on and nothing reaches the queue.
func TestDestinationDeliveryFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup returns the queue URL the mapping sends to and its options.
		setup func(t *testing.T, fq *failureQueue) (string, []Option)
	}{
		{"injected fault (permission denied)", func(_ *testing.T, fq *failureQueue) (string, []Option) {
			return fq.url, []Option{WithDestinationFault(func(onfailure.Message) error { return errors.New("AccessDenied") })}
		}},
		// A real fault on the emulator: the destination queue does not exist ("incorrectly
		// configured resources"). Before, the mapping retried it forever and the lane stalled.
		{"destination queue does not exist", func(_ *testing.T, fq *failureQueue) (string, []Option) {
			return fq.url + "-deleted", nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream(t, 1)
			puts := s.putN(t, 4)
			q := seqsOf(puts)
			fq := newFailureQueue(t)
			cfg := baseConfig(s)
			cfg.BatchSize = 2
			cfg.MaximumRetryAttempts = 1
			url, opts := tc.setup(t, fq)
			cfg.OnFailureQueueURL = url
			r := newRecorder(t, poisonHandler(q[0]))
			m, log := drain(t, s, fq.sqs, r, cfg, opts...)
			if got, want := invokedSeqs(r), [][]string{q[:2], q[:2], q[2:]}; !equalBatches(got, want) {
				t.Fatalf("invocations %v, want %v", got, want)
			}
			if n := m.DestinationDeliveryFailures(); n != 1 {
				t.Fatalf("DestinationDeliveryFailures %d, want 1", n)
			}
			failed := log.all(EventDestinationDeliveryFailed)
			if len(failed) != 1 || !errors.Is(failed[0].Err, ErrDestinationDelivery) || failed[0].Failure == nil ||
				failed[0].Failure.KinesisBatchInfo.StartSequenceNumber != q[0] || failed[0].Size != 2 {
				t.Fatalf("delivery-failed events %+v", failed)
			}
			fq.receive(t, 0)
			if cp := m.Checkpoints()[puts[0].shard][0]; cp != q[3] {
				t.Fatalf("checkpoint %s, want %s: the records are discarded and the lane moves on", cp, q[3])
			}
		})
	}
}
