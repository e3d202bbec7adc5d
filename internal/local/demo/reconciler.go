package demo

import (
	"context"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/ctxtime"
)

// scheduleLoop invokes the scheduled reconciler pass every ReconcileEvery, one at a time (none
// while --expire keeps the reconciler down).
func (v *variant) scheduleLoop(ctx context.Context) {
	t := time.NewTicker(v.e.cfg.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if v.trimming() {
			continue // --expire: the schedule's invocations fail while the reconciler is down
		}
		ictx, cancel := context.WithTimeout(ctx, reconcilerTimeout)
		kill := v.e.cfg.Faults.KillReconciler && v.killsSoFar() == 0
		sum, crashed, err := v.fn.schedule(ictx, kill)
		cancel()
		v.rec.scheduled.Add(1)
		v.rec.tailReplayed.Add(int64(sum.TailReplayed))
		if crashed {
			v.rec.crashes.Add(1)
		}
		if err != nil && ctx.Err() == nil {
			v.rec.scheduledErrors.Add(1)
			v.log.Warn("scheduled reconciler pass failed", "error", err.Error())
		}
	}
}

// reconcilerTimeout is the reconciler function's timeout in the demo.
const reconcilerTimeout = 60 * time.Second

func (v *variant) killsSoFar() int {
	n, _ := v.fn.killed()
	return n
}

// failureLoop is the SQS event source of the reconciler: it receives the mapping's on-failure
// messages, invokes the reconciler with them and deletes the messages the invocation did not
// report as failed (ReportBatchItemFailures); the others become visible again two seconds
// later. A killed invocation deletes nothing. The records carry the queue's real ARN as
// eventSourceARN, as Lambda's do: the reconciler sends the messages it had no time to try back
// to the queue it names (reconcile.WithRelease) and reports them done, so they are deleted here.
func (v *variant) failureLoop(ctx context.Context) {
	c := v.e.direct.sqs
	arn := "arn:aws:sqs:us-east-1:000000000000:" + v.stream + "-failure"
	if out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(v.failureURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}}); err == nil {
		if a := out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]; a != "" {
			arn = a
		}
	}
	for ctx.Err() == nil {
		if v.trimming() {
			// --expire: the function cannot be invoked; its event source leaves the messages
			// in the queue.
			if ctxtime.Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(v.failureURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 90,
		})
		if err != nil || len(out.Messages) == 0 {
			continue
		}
		ev := events.SQSEvent{}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: "us-east-1",
			})
		}
		v.rec.messages.Add(int64(len(out.Messages)))
		ictx, cancel := context.WithTimeout(ctx, reconcilerTimeout)
		kill := v.e.cfg.Faults.KillReconciler && v.killsSoFar() == 0
		resp, crashed, err := v.fn.failures(ictx, ev, kill)
		cancel()
		v.rec.sqsInvocations.Add(1)
		failed := map[string]bool{}
		switch {
		case crashed:
			v.rec.crashes.Add(1)
			for _, m := range out.Messages {
				failed[aws.ToString(m.MessageId)] = true
			}
		case err != nil:
			v.log.Warn("reconciler failure-queue invocation failed", "error", err.Error())
			for _, m := range out.Messages {
				failed[aws.ToString(m.MessageId)] = true
			}
		default:
			for _, f := range resp.BatchItemFailures {
				failed[f.ItemIdentifier] = true
			}
		}
		dctx := context.WithoutCancel(ctx)
		for _, m := range out.Messages {
			if failed[aws.ToString(m.MessageId)] {
				v.rec.retried.Add(1)
				_, _ = c.ChangeMessageVisibility(dctx, &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(v.failureURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 2,
				})
				continue
			}
			if _, err := c.DeleteMessage(dctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(v.failureURL), ReceiptHandle: m.ReceiptHandle}); err == nil {
				v.rec.deleted.Add(1)
			}
		}
	}
}
