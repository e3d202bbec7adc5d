package process

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
)

// SendMessageBatch limits (SQS API reference, SendMessageBatch,
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html:
// "send up to 10 messages"; "The maximum allowed individual message size and the maximum total
// payload size (the sum of the individual lengths of all of the batched messages) are both
// 1 MiB 1,048,576 bytes").
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = 1024 * 1024
)

// BillingChunk is the payload size SQS bills as one request: "Each 64 KB chunk of a payload is
// billed as 1 request (for example, an API action with a 256 KB payload is billed as 4
// requests)" (Amazon SQS pricing, https://aws.amazon.com/sqs/pricing/).
const BillingChunk = 64 * 1024

// SendMessageBatchAPI is the SQS call NewBatch needs; *sqs.Client satisfies it.
type SendMessageBatchAPI interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ SendMessageBatchAPI = (*sqs.Client)(nil)

// ErrEntryFailed wraps the failure SQS reported for one entry of a SendMessageBatch (its Failed
// list), or an entry SQS answered neither way.
var ErrEntryFailed = errors.New("process: SQS did not accept the message")

// ErrGroupStopped is the failure of a record not sent because an earlier record of its message
// group failed in the same call (only when a call holds two records of one group, which the
// pipeline never does).
var ErrGroupStopped = errors.New("process: not sent, an earlier record of its message group failed")

// WithBatchConcurrency sets how many SendMessageBatch requests of one call run at once (default 16).
func WithBatchConcurrency(n int) Option { return func(f *forwarder) { f.conc = max(n, 1) } }

// NewBatch returns the default Process in batch form (pipeline.BatchFunc; pipeline.WithBatchSink
// with chunk MaxBatchEntries): the records of a call are the same messages New sends (same body,
// attributes, FIFO MessageGroupId and MessageDeduplicationId, the payload bucket for a message
// over the limit), packed into SendMessageBatch requests of at most MaxBatchEntries entries and
// MaxBatchBytes, sent concurrently. Each record's outcome is its own entry's: an entry in the
// response's Failed list (after EntryAttempts sends when SQS says it was not the sender's fault),
// an entry missing from the response, or a request that failed as a whole (after the SDK's
// retries) fails exactly the records it carried.
//
// Order. A request never holds two records of one partition key (= FIFO message group). SQS
// enqueues "multiple messages within a single batch ... in the order they are sent" on a FIFO
// queue (API reference above) but says nothing of what a failed entry does to later entries of
// its group in the same batch; so two records of one key in one call (never the case under the
// pipeline, whose waves hold one record per key) are sent in successive requests, and a failure
// stops the key (ErrGroupStopped) for the rest of the call.
func NewBatch(client SendMessageBatchAPI, targetQueueURL string, opts ...Option) pipeline.BatchFunc {
	f := &forwarder{batch: client, url: targetQueueURL, fifo: strings.HasSuffix(targetQueueURL, ".fifo"), maxBytes: DefaultMaxMessageBytes, conc: 16}
	for _, o := range opts {
		o(f)
	}
	return f.forwardBatch
}

func (f *forwarder) forwardBatch(ctx context.Context, recs []pipeline.Record) []error {
	errs := make([]error, len(recs))
	// Rounds: the n-th record of each partition key goes in round n.
	seen := map[string]int{}
	var rounds [][]int
	for j := range recs {
		n := seen[recs[j].PartitionKey]
		seen[recs[j].PartitionKey] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], j)
	}
	stopped := map[string]bool{}
	for _, round := range rounds {
		var send []int
		for _, j := range round {
			if stopped[recs[j].PartitionKey] {
				errs[j] = fmt.Errorf("process: record %s: %w", recs[j].ID, ErrGroupStopped)
				continue
			}
			send = append(send, j)
		}
		f.sendRound(ctx, recs, send, errs)
		for _, j := range round {
			if errs[j] != nil {
				stopped[recs[j].PartitionKey] = true
			}
		}
	}
	return errs
}

// sendRound sends recs[js] (distinct keys), writing each failure into errs.
func (f *forwarder) sendRound(ctx context.Context, recs []pipeline.Record, js []int, errs []error) {
	entries := make([]sqstypes.SendMessageBatchRequestEntry, len(js))
	sizes := make([]int, len(js))
	ok := make([]bool, len(js))
	for n, j := range js {
		in, err := f.message(ctx, recs[j]) // (S3 only for a message over the limit: rare)
		if err != nil {
			errs[j] = err
			continue
		}
		entries[n] = sqstypes.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(n)), MessageBody: in.MessageBody, MessageAttributes: in.MessageAttributes,
			MessageGroupId: in.MessageGroupId, MessageDeduplicationId: in.MessageDeduplicationId,
		}
		sizes[n], ok[n] = Size(in), true
	}
	// Pack in order: at most MaxBatchEntries entries and MaxBatchBytes per request.
	var reqs [][]int // indexes into js
	var cur []int
	bytes := 0
	for n := range js {
		if !ok[n] {
			continue
		}
		if len(cur) == MaxBatchEntries || (len(cur) > 0 && bytes+sizes[n] > MaxBatchBytes) {
			reqs, cur, bytes = append(reqs, cur), nil, 0
		}
		cur, bytes = append(cur, n), bytes+sizes[n]
	}
	if len(cur) > 0 {
		reqs = append(reqs, cur)
	}
	f.each(len(reqs), func(q int) {
		req := reqs[q]
		// Entries SQS reports failed without the sender's fault (an internal error) were not
		// enqueued: they are sent again, alone, like the SDK retries a failed request.
		for attempt := 1; len(req) > 0; attempt++ {
			req = f.sendRequest(ctx, recs, js, entries, req, errs, attempt < EntryAttempts)
		}
	})
}

// EntryAttempts is how often NewBatch sends an entry that SQS answers with a failure that is not
// the sender's fault (SenderFault false), before the failure is the record's.
const EntryAttempts = 3

// sendRequest sends entries[req] in one SendMessageBatch and writes each entry's failure into
// errs. With retry, the entries whose failure is not the sender's fault are returned instead, to
// be sent again.
func (f *forwarder) sendRequest(ctx context.Context, recs []pipeline.Record, js []int, entries []sqstypes.SendMessageBatchRequestEntry, req []int, errs []error, retry bool) (again []int) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: make([]sqstypes.SendMessageBatchRequestEntry, len(req))}
	for e, n := range req {
		in.Entries[e] = entries[n]
	}
	out, err := f.batch.SendMessageBatch(ctx, in)
	if err != nil { // the SDK has retried the request already
		for _, n := range req {
			errs[js[n]] = fmt.Errorf("process: forward record %s to %s (SendMessageBatch of %d): %w", recs[js[n]].ID, f.url, len(req), err)
		}
		return nil
	}
	mine := make(map[string]int, len(req))
	for _, n := range req {
		mine[strconv.Itoa(n)] = n
	}
	answered := map[string]bool{}
	for _, s := range out.Successful {
		if _, ok := mine[aws.ToString(s.Id)]; ok {
			answered[aws.ToString(s.Id)] = true
		}
	}
	failed := map[string]bool{}
	for _, fe := range out.Failed {
		id := aws.ToString(fe.Id)
		n, ok := mine[id]
		if !ok || failed[id] {
			continue // not an entry of this request, or listed twice
		}
		failed[id], answered[id] = true, true // a failure wins over a success listed for the same id
		if retry && !fe.SenderFault {
			again = append(again, n)
			continue
		}
		errs[js[n]] = fmt.Errorf("process: forward record %s to %s: %w: %s (sender fault %v): %s", recs[js[n]].ID, f.url,
			ErrEntryFailed, aws.ToString(fe.Code), fe.SenderFault, aws.ToString(fe.Message))
	}
	for _, n := range req {
		if !answered[strconv.Itoa(n)] { // unknown outcome: not resent here (a duplicate on a standard queue)
			errs[js[n]] = fmt.Errorf("process: forward record %s to %s: %w: no result for the entry", recs[js[n]].ID, f.url, ErrEntryFailed)
		}
	}
	return again
}

// message builds r's message as New sends it, storing the body in the payload bucket when the
// message is over the limit.
func (f *forwarder) message(ctx context.Context, r pipeline.Record) (*sqs.SendMessageInput, error) {
	in := Message(f.url, f.fifo, r)
	if size := Size(in); size > f.maxBytes {
		if err := f.offload(ctx, r, in, size); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// each runs fn(0..n-1), at most f.conc at once.
func (f *forwarder) each(n int, fn func(int)) {
	if n <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	sem := make(chan struct{}, f.conc)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}
