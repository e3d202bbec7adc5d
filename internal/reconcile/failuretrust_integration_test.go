package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/lanes"
	"github.com/gapless-dev/gapless/internal/onfailure"
)

// streamARN is the local stream's ARN, as the mapping writes it in its messages.
func (s *stack) streamARN() string {
	s.t.Helper()
	out, err := s.kin.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(s.stream)})
	if err != nil {
		s.t.Fatal(err)
	}
	return aws.ToString(out.StreamDescriptionSummary.StreamARN)
}

// ownFunction is the consumer function the trust tests' messages name.
const ownFunction = "arn:aws:lambda:us-east-1:000000000000:function:consumer"

// message is failureMessage with the stream ARN and the function ARN given.
func message(t *testing.T, streamARN, functionARN string, from, to put, n int) string {
	t.Helper()
	var m onfailure.Message
	if err := json.Unmarshal([]byte(failureMessage(t, "x", from.shard, from.seq, to.seq, n)), &m); err != nil {
		t.Fatal(err)
	}
	m.KinesisBatchInfo.StreamARN, m.RequestContext.FunctionARN = streamARN, functionARN
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFailureMessageOfAnotherMapping: the failure queue is trusted only for its own mapping. A
// message naming a same-named stream of another account or region, or another function, is
// refused (a batch item failure: it stays in the queue and reaches the dead-letter queue),
// counted (FailureMessageRefused) and replays nothing; the mapping's own message of the same
// range replays its 10 records.
func TestFailureMessageOfAnotherMapping(t *testing.T) {
	t.Parallel()
	for _, byARN := range []bool{true, false} {
		name := "STREAM_ARN"
		if !byARN {
			name = "ARN from Kinesis"
		}
		t.Run(name, func(t *testing.T) {
			s := newStack(t, 1)
			all, _ := gapped(t, s, 30, func(i int) bool { return i < 5 || i >= 25 })
			arn := s.streamARN()
			rec := newRecorder()
			var logs logBuffer
			var m emf
			cfg := Config{PageLimit: 4}
			if byARN {
				cfg.StreamARN = arn
			}
			h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), cfg), m.emitter(), logs.logger(), WithConsumerFunction(ownFunction))
			ctx := context.Background()
			otherAccount := strings.Replace(arn, ":000000000000:", ":999999999999:", 1)
			otherRegion := strings.Replace(arn, ":us-east-1:", ":eu-west-1:", 1)
			if otherAccount == arn || otherRegion == arn {
				t.Fatalf("local stream ARN %s: cannot derive another account's or region's", arn)
			}
			for _, tc := range []struct{ name, body string }{
				{"another account's stream", message(t, otherAccount, ownFunction, all[10], all[19], 10)},
				{"another region's stream", message(t, otherRegion, ownFunction, all[10], all[19], 10)},
				{"another function", message(t, arn, strings.Replace(ownFunction, ":consumer", ":someone-else", 1), all[10], all[19], 10)},
				{"another account's function", message(t, arn, strings.Replace(ownFunction, ":000000000000:", ":999999999999:", 1), all[10], all[19], 10)},
			} {
				t.Run(tc.name, func(t *testing.T) {
					resp := h.HandleSQS(ctx, sqsEvent(tc.body))
					if len(resp.BatchItemFailures) != 1 {
						t.Errorf("batch item failures %v, want the message refused", resp.BatchItemFailures)
					}
					if n := len(rec.delivered()); n != 0 {
						t.Errorf("%d records replayed from a message of another mapping, want 0", n)
					}
					if l := m.last(t); l.Values["FailureMessageRefused"] != 1 {
						t.Errorf("metrics %v, want FailureMessageRefused 1", l.Values)
					}
				})
			}
			if !containsLine(logs.lines("ERROR"), "refused") {
				t.Errorf("no ERROR line says the message was refused")
			}
			resp := h.HandleSQS(ctx, sqsEvent(message(t, arn, ownFunction+":$LATEST", all[10], all[19], 10)))
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("own message failed: %v", resp.BatchItemFailures)
			}
			checkOnce(t, "own message", rec.counts(), idsOf(all[10:20]))
			if l := m.last(t); l.Values["FailureMessageRefused"] != 0 {
				t.Errorf("metrics %v, want FailureMessageRefused 0", l.Values)
			}
		})
	}
}

// TestFailureRangeBounds: a failure-queue range is replayed only where the mapping can have
// given it up: after the verified watermark (records at or below it are accounted for), and not
// past the checkpoint mirror unless it continues it (a range that starts beyond records of its
// lane the mapping still holds is not one it gave up: refused, counted, nothing replayed).
func TestFailureRangeBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("starts after the verified watermark", func(t *testing.T) {
		s := newStack(t, 1)
		all, _ := gapped(t, s, 30, func(i int) bool { return i < 10 || i >= 20 })
		if _, err := s.cps.AdvanceWatermark(ctx, s.shard(all[0].shard), all[14].seq); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4}), nil, discard())
		resp := h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, all[10], all[19], 10)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v", resp.BatchItemFailures)
		}
		checkOnce(t, "after the watermark", rec.counts(), idsOf(all[15:20]))
	})
	t.Run("far past the checkpoint", func(t *testing.T) {
		s := newStack(t, 1)
		all, _ := gapped(t, s, 10, func(int) bool { return true }) // the checkpoint at record 9
		more := s.putN(40, "young", keyMod(1), nil)                // one key: one lane; the mapping still holds them
		rec := newRecorder()
		var m emf
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 8}), m.emitter(), discard())
		resp := h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, more[30], more[39], 10)))
		if len(resp.BatchItemFailures) != 1 {
			t.Errorf("failures %v, want the message refused", resp.BatchItemFailures)
		}
		if n := len(rec.delivered()); n != 0 {
			t.Errorf("%d records replayed from a range far past the checkpoint, want 0", n)
		}
		if l := m.last(t); l.Values["FailureMessageRefused"] != 1 {
			t.Errorf("metrics %v, want FailureMessageRefused 1", l.Values)
		}
		// The range right after the checkpoint is one the mapping can have given up (its first
		// batch past the checkpoint, before any later batch moved the checkpoint).
		resp = h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, more[0], more[9], 10)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("range after the checkpoint failed: %v", resp.BatchItemFailures)
		}
		checkOnce(t, "range after the checkpoint", rec.counts(), idsOf(more[:10]))
		_ = all
	})
	t.Run("past the checkpoint after records the filter drops", func(t *testing.T) {
		// The mapping never sends records its FilterCriteria drops, so no consumer batch moves the
		// checkpoint mirror past them: they do not make the range after them a discontinuity.
		s := newStack(t, 1)
		gapped(t, s, 10, func(int) bool { return true })
		s.putN(6, "dropped", keyMod(1), func(i int) []byte { return []byte(fmt.Sprintf(`{"n":%d}`, 100+i)) })
		kept := s.putN(4, "kept", keyMod(1), nil) // n 0..3: the filter keeps them
		rec := newRecorder()
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 8, Filter: keepBelow4}), nil, discard())
		resp := h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, kept[0], kept[3], 4)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("failures %v, want the range replayed", resp.BatchItemFailures)
		}
		checkOnce(t, "range after filtered records", rec.counts(), idsOf(kept))
	})
	t.Run("before the LATEST scope start", func(t *testing.T) {
		s := newStack(t, 1)
		before := s.putN(10, "before", keyMod(3), nil)
		time.Sleep(20 * time.Millisecond)
		if err := s.cps.SetScopeFrom(ctx, s.shard(before[0].shard), time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		after := s.putN(10, "after", keyMod(3), nil)
		rec := newRecorder()
		var m emf
		h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 8, StartingPosition: StartLatest}), m.emitter(), discard())
		resp := h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, before[0], before[9], 10)))
		if len(resp.BatchItemFailures) != 1 {
			t.Errorf("failures %v, want the message refused", resp.BatchItemFailures)
		}
		if n := len(rec.delivered()); n != 0 {
			t.Errorf("%d records replayed from before the group's scope start, want 0", n)
		}
		if l := m.last(t); l.Values["FailureMessageRefused"] != 1 {
			t.Errorf("metrics %v, want FailureMessageRefused 1", l.Values)
		}
		resp = h.HandleSQS(ctx, sqsEvent(message(t, s.streamARN(), ownFunction, after[0], after[9], 10)))
		if len(resp.BatchItemFailures) != 0 {
			t.Fatalf("range in scope failed: %v", resp.BatchItemFailures)
		}
		checkOnce(t, "range in scope", rec.counts(), idsOf(after))
	})
}

// TestFailureRangeLane: with ParallelizationFactor 3 a range replays only the records of its
// batch's lane (the lane of its first record's partition key, lanes.Of); the other lanes'
// records in it are left to their lanes.
func TestFailureRangeLane(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	all, _ := gapped(t, s, 30, func(i int) bool { return i < 10 || i >= 20 })
	rec := newRecorder()
	h := NewHandler(s.reconciler(s.pipeline(rec.process, 3), Config{PageLimit: 4}), nil, discard(), WithLanes(3))
	resp := h.HandleSQS(context.Background(), sqsEvent(message(t, s.streamARN(), ownFunction, all[10], all[19], 10)))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v", resp.BatchItemFailures)
	}
	var lane []put
	for _, p := range all[10:20] {
		if lanes.Of(p.key, 3) == lanes.Of(all[10].key, 3) {
			lane = append(lane, p)
		}
	}
	if len(lane) == 10 || len(lane) == 0 {
		t.Fatalf("%d of 10 records in the first record's lane: the test proves nothing", len(lane))
	}
	checkOnce(t, "the batch's lane", rec.counts(), idsOf(lane))
}
