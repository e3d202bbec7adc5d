package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/ctxtime"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// The forged-parked fault (Faults.ForgeParked): anyone allowed to send to the parked queue can
// write a message that looks parked, with a valid SHA-256 of whatever payload it carries. At the
// end of the gapless run, once the demo's own drain of the parked queue has stopped, the fault
// sends such messages: some name a real record of the run that was parked (other data, its
// correct digest), some made-up records, one points at a payload object in a foreign bucket that
// holds forged data. Then the demo redrives as an operator does, through the reconciler
// function's redrive command (reconcile.Command), and checks that the ledger refused every one:
// no forged payload reached the target queue (compared byte for byte), each was reported
// refused, and each is still in the parked queue.

// ForgedParked is the fault's outcome.
type ForgedParked struct {
	Sent int `json:"sent"`
	// RealIDs: of Sent, messages naming a real parked record of the run.
	RealIDs int `json:"real_ids"`
	// Refused: distinct forged messages the redrive reported refused.
	Refused int `json:"refused"`
	// CountedByFunction: the refusals the function counted (RedriveResult.Refused, the
	// ParkedRefused metric), over every redrive invocation.
	CountedByFunction int `json:"counted_by_function"`
	// Applied: forged payloads found at the target queue, or forged messages the redrive
	// reported processed.
	Applied int `json:"applied"`
	// StillQueued: forged messages found in the parked queue after the redrive.
	StillQueued int    `json:"still_queued"`
	Redrives    int    `json:"redrive_invocations"`
	Skipped     string `json:"skipped,omitempty"` // why the fault did not run
	Error       string `json:"error,omitempty"`
}

// OK: nothing forged was applied, and the run proved it (every forged message refused, counted
// and still queued).
func (f *ForgedParked) OK() bool {
	if f == nil || f.Skipped != "" {
		return true
	}
	return f.Applied == 0 && f.Error == "" && f.Refused == f.Sent && f.StillQueued == f.Sent && f.CountedByFunction >= f.Sent
}

// errNoCommands: the functions cannot run an operator command.
var errNoCommands = errors.New("demo: these functions run no operator command")

// foreignBucket is a bucket outside the payload bucket, holding a forged payload.
const foreignBucket = "someone-elses-bucket"

type forged struct {
	data   []byte
	realID bool
}

// forgeParked runs the fault: sends the forged messages, redrives, checks.
func (v *variant) forgeParked(ctx context.Context) *ForgedParked {
	n := v.e.cfg.Faults.ForgeParked
	if n <= 0 || !v.gapless {
		return nil
	}
	out := &ForgedParked{}
	v.e.progress.phase(v.name, fmt.Sprintf("forging %d parked messages, then redriving", n))
	msgs, err := v.forgedMessages(ctx, n)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	c := v.e.direct.sqs
	sent := map[string]forged{} // SQS message id -> what it carries
	for _, m := range msgs {
		body, err := park.Encode(m.Message)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		r, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(v.parkedURL), MessageBody: aws.String(body)})
		if err != nil {
			out.Error = fmt.Sprintf("send a forged parked message: %v", err)
			return out
		}
		sent[aws.ToString(r.MessageId)] = m.forged
		out.Sent++
		if m.realID {
			out.RealIDs++
		}
	}

	refused, processed := map[string]bool{}, map[string]bool{}
	for out.Redrives < 5 && len(refused) < len(sent) {
		if out.Redrives > 0 {
			// A session that received messages and ran out of time before answering for them
			// left them hidden for its visibility timeout: wait it out, or the next session
			// (and the count of what is still queued) sees nothing.
			sleepCtx(ctx, forgeVisibility+time.Second)
		}
		res, err := v.redriveOnce(ctx)
		out.Redrives++
		if errors.Is(err, errNoCommands) {
			out.Skipped = "the in-process runtime has no operator commands (run with --runtime rie)"
			return out
		}
		if err != nil {
			out.Error = err.Error()
			break
		}
		if res.Redrive != nil {
			out.CountedByFunction += res.Redrive.Refused
			for _, e := range res.Redrive.Events {
				if _, ok := sent[e.MessageID]; !ok {
					continue
				}
				switch reconcile.Outcome(e.Outcome) {
				case reconcile.OutcomeRefused:
					refused[e.MessageID] = true
				case reconcile.OutcomeProcessed, reconcile.OutcomeDuplicate, reconcile.OutcomeParkedAgain:
					processed[e.MessageID] = true
				}
			}
		}
	}
	out.Refused = len(refused)

	// The sink: every message at the target queue, compared with the forged payloads.
	payloads := map[string]bool{}
	for _, f := range sent {
		payloads[string(f.data)] = true
	}
	applied := map[string]bool{}
	v.receiveAll(ctx, v.targetURL, true, func(id, body string) {
		if payloads[body] {
			applied[body] = true
		}
	})
	out.Applied = max(len(applied), len(processed))
	// The parked queue: every forged message must still be there (left for inspection), visible
	// again once the last session's visibility timeout has passed.
	sleepCtx(ctx, forgeVisibility+time.Second)
	still := map[string]bool{}
	v.receiveAll(ctx, v.parkedURL, false, func(id, _ string) {
		if _, ok := sent[id]; ok {
			still[id] = true
		}
	})
	out.StillQueued = len(still)
	return out
}

type forgedMessage struct {
	park.Message
	forged
}

// forgedMessages builds n forged messages: the first points at a foreign object, then they
// alternate between real parked records of the run (other data, correct digest) and made-up ids.
func (v *variant) forgedMessages(ctx context.Context, n int) ([]forgedMessage, error) {
	var parked []written
	for _, w := range v.writes.records() {
		if v.parked.Has(w.id) {
			parked = append(parked, w)
		}
	}
	shard := "shardId-000000000000"
	if len(parked) > 0 {
		shard = parked[0].shard
	}
	now := time.Now().UTC()
	var out []forgedMessage
	for i := range n {
		var rid recordid.ID
		key, realID := fmt.Sprintf("forged-key-%d", i), false
		if i%2 == 1 && len(parked) > 0 {
			w := parked[(i/2)%len(parked)]
			rid, key, realID = recordid.ID{ShardID: w.shard, Seq: w.seq}, w.key, true
		} else {
			// A made-up sequence number on a real shard, far beyond anything produced.
			rid = recordid.ID{ShardID: shard, Seq: fmt.Sprintf("4%055d", 990000+i)}
		}
		data := fmt.Appendf(nil, `{"id":"forged-%d-%s","key":%q,"n":%d,"pad":"FORGED"}`, i, randHex(4), key, 1000000+i)
		if realID {
			if id, _, err := payloadIDOf(v, rid); err == nil {
				data = fmt.Appendf(nil, `{"id":%q,"key":%q,"n":%d,"pad":"FORGED-%s"}`, id, key, 1000000+i, randHex(4))
			}
		}
		sum := sha256.Sum256(data)
		m := park.Message{
			RecordID: rid.String(), Group: group, Stream: v.stream, ShardID: rid.ShardID, Seq: rid.Seq,
			PartitionKey: key, ArrivalTime: now, Attempts: 5, LastError: "forged", Source: "consumer", ParkedAt: now,
			ParkID: randHex(8), Data: data, DataBytes: len(data), DataSHA256: hex.EncodeToString(sum[:]),
		}
		if i == 0 {
			// The payload in a foreign bucket, holding forged data a redrive would apply if it
			// read objects wherever a message points.
			objKey := "forged/" + randHex(8)
			s3c := v.e.direct.s3(v.e.ep.SQS)
			_, _ = s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(foreignBucket)})
			if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(foreignBucket), Key: aws.String(objKey),
				Body: strings.NewReader(string(data))}); err != nil {
				return nil, fmt.Errorf("demo: put the forged payload object: %w", err)
			}
			m.Data, m.PayloadS3 = nil, &park.Pointer{Bucket: foreignBucket, Key: objKey}
		}
		out = append(out, forgedMessage{Message: m, forged: forged{data: data, realID: realID}})
	}
	return out, nil
}

// payloadIDOf is the produced payload id of the record at rid.
func payloadIDOf(v *variant, rid recordid.ID) (string, []byte, error) {
	for _, w := range v.writes.records() {
		if w.shard == rid.ShardID && w.seq == rid.Seq {
			return w.id, v.expected[w.id], nil
		}
	}
	return "", nil, errors.New("demo: no such record")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// forgeVisibility is how long a redrive session hides the messages it receives: short, so a
// session cut short by its time leaves them hidden only briefly.
const forgeVisibility = 5 * time.Second

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// redriveOnce sends the reconciler function one redrive command, as gapless redrive does.
func (v *variant) redriveOnce(ctx context.Context) (reconcile.CommandResult, error) {
	ev, err := json.Marshal(reconcile.CommandEvent{Gapless: &reconcile.Command{
		Version: reconcile.CommandVersion, Command: reconcile.CommandRedrive, Group: group, Stream: v.stream,
		Redrive: &reconcile.RedriveCommand{VisibilityTimeoutSeconds: int(forgeVisibility / time.Second)},
	}})
	if err != nil {
		return reconcile.CommandResult{}, err
	}
	ictx, cancel := context.WithTimeout(ctx, reconcilerTimeout)
	defer cancel()
	raw, err := v.fn.command(ictx, ev)
	if err != nil {
		return reconcile.CommandResult{}, err
	}
	var resp reconcile.CommandResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return reconcile.CommandResult{}, fmt.Errorf("demo: redrive answer %q: %w", clip(raw), err)
	}
	if resp.Gapless.Error != "" {
		v.log.Warn("redrive command reported an error", "error", resp.Gapless.Error)
	}
	return resp.Gapless, nil
}

// receiveAllVisibility hides what receiveAll has counted for the rest of its pass.
const receiveAllVisibility = 15 * time.Second

// receiveAll receives every message of url until it stays empty for 3 seconds (bounded by a
// minute), deleting them when del is set; otherwise they are left (visible again shortly).
func (v *variant) receiveAll(ctx context.Context, url string, del bool, fn func(id, body string)) {
	c := v.e.direct.sqs
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for empty := 0; empty < 3 && ctx.Err() == nil; {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: int32(receiveAllVisibility / time.Second)})
		if err == nil && reconcile.ReceiveMayHaveLost(out) {
			// The messages of the lost answer are hidden until the visibility timeout passes.
			empty = 0
			_ = ctxtime.Sleep(ctx, receiveAllVisibility)
		}
		if err != nil || len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if !seen[id] {
				seen[id] = true
				fn(id, aws.ToString(m.Body))
			}
			if del {
				_, _ = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			}
		}
	}
}

// cell is the fault's table cell.
func (f *ForgedParked) cell() string {
	switch {
	case f == nil:
		return "—"
	case f.Skipped != "":
		return "skipped"
	}
	return fmt.Sprintf("%d / %d / %d", f.Sent, f.Refused, f.Applied)
}

// Line says the fault's outcome in a sentence.
func (f *ForgedParked) Line() string {
	switch {
	case f == nil:
		return "not sent"
	case f.Skipped != "":
		return "not sent: " + f.Skipped
	}
	verdict := "none applied, every one refused by the ledger, counted and left in the parked queue"
	if !f.OK() {
		verdict = "NOT PROVEN SAFE"
		if f.Applied > 0 {
			verdict = fmt.Sprintf("%d APPLIED", f.Applied)
		}
	}
	s := fmt.Sprintf("%d sent (%d naming a real parked record, the others made-up ids, one pointing at a foreign bucket), "+
		"%d refused, %d counted refused by the reconciler, %d applied, %d still in the parked queue after %d redrive invocations: %s",
		f.Sent, f.RealIDs, f.Refused, f.CountedByFunction, f.Applied, f.StillQueued, f.Redrives, verdict)
	if f.Error != "" {
		s += "; error: " + f.Error
	}
	return s
}
