// Package loadgen produces a seeded workload of uniquely identified records into a Kinesis
// stream and counts what arrived downstream: the demo's and the benchmarks' ground truth.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Payload is the JSON body of every produced record.
type Payload struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	N      int    `json:"n"`
	Poison bool   `json:"poison,omitempty"`
	Pad    string `json:"pad,omitempty"`
}

// Spec describes a workload.
type Spec struct {
	Records    int
	Keys       int     // distinct partition keys
	PoisonRate float64 // fraction of records marked poison (never succeed)
	PadBytes   int     // payload padding
	Seed       uint64
	// RatePerSecond caps production (0 = as fast as PutRecords allows).
	RatePerSecond int
}

// Records builds the workload deterministically from the spec.
func Records(s Spec) []Payload {
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x9E3779B97F4A7C15))
	keys := s.Keys
	if keys <= 0 {
		keys = 64
	}
	out := make([]Payload, s.Records)
	pad := strings.Repeat("x", s.PadBytes)
	for i := range out {
		out[i] = Payload{
			ID:     fmt.Sprintf("r-%07d", i+1),
			Key:    fmt.Sprintf("pk-%04d", rng.IntN(keys)),
			N:      i + 1,
			Poison: s.PoisonRate > 0 && rng.Float64() < s.PoisonRate,
			Pad:    pad,
		}
	}
	return out
}

type kinesisAPI interface {
	PutRecords(context.Context, *kinesis.PutRecordsInput, ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

// Progress is called after every PutRecords round with the number written so far.
type Progress func(written int)

// Produce writes the payloads to the stream with PutRecords (500 a call), re-sending only the
// entries Kinesis reports as failed, until all are written or ctx ends.
func Produce(ctx context.Context, kin kinesisAPI, stream string, recs []Payload, rate int, progress Progress) error {
	const perCall = 500
	written := 0
	start := time.Now()
	for i := 0; i < len(recs); i += perCall {
		chunk := recs[i:min(i+perCall, len(recs))]
		entries := make([]kintypes.PutRecordsRequestEntry, len(chunk))
		for j, p := range chunk {
			b, err := json.Marshal(p)
			if err != nil {
				return err
			}
			entries[j] = kintypes.PutRecordsRequestEntry{Data: b, PartitionKey: aws.String(p.Key)}
		}
		for attempt := 0; len(entries) > 0; attempt++ {
			if attempt > 50 {
				return fmt.Errorf("loadgen: %d records still rejected after 50 rounds", len(entries))
			}
			out, err := kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			var retry []kintypes.PutRecordsRequestEntry
			for k, r := range out.Records {
				if r.ErrorCode != nil {
					retry = append(retry, entries[k])
				}
			}
			written += len(entries) - len(retry)
			entries = retry
			if len(retry) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if progress != nil {
			progress(written)
		}
		if rate > 0 {
			if ahead := time.Duration(float64(written)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(ahead):
				}
			}
		}
	}
	return nil
}

type sqsAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// Tally counts ids seen downstream.
type Tally struct {
	mu     sync.Mutex
	seen   map[string]int
	bodies map[string][]byte // first body per id (for parked-payload checks)
	total  int
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{seen: map[string]int{}, bodies: map[string][]byte{}} }

// Add counts one delivery of id.
func (t *Tally) Add(id string, body []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[id]++
	t.total++
	if _, ok := t.bodies[id]; !ok && body != nil {
		t.bodies[id] = body
	}
}

// Unique is the number of distinct ids; Duplicates the deliveries beyond the first.
func (t *Tally) Unique() int { t.mu.Lock(); defer t.mu.Unlock(); return len(t.seen) }

// Duplicates counts deliveries beyond the first of each id.
func (t *Tally) Duplicates() int { t.mu.Lock(); defer t.mu.Unlock(); return t.total - len(t.seen) }

// Has reports whether id was seen.
func (t *Tally) Has(id string) bool { t.mu.Lock(); defer t.mu.Unlock(); return t.seen[id] > 0 }

// Body returns the first body seen for id.
func (t *Tally) Body(id string) []byte { t.mu.Lock(); defer t.mu.Unlock(); return t.bodies[id] }

// ErrUndecodable marks a message whose body names no record id.
var ErrUndecodable = errors.New("loadgen: message names no record id")

// Drain receives and deletes messages from a queue, handing each body to decode (which returns
// the record id and the bytes to keep), until the queue stays empty for `quiet` or ctx ends.
func Drain(ctx context.Context, client sqsAPI, queueURL string, quiet time.Duration, t *Tally, decode func(body string) (string, []byte, error)) (undecodable int, err error) {
	lastSeen := time.Now()
	for time.Since(lastSeen) < quiet {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			if ctx.Err() != nil {
				return undecodable, ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if len(out.Messages) == 0 {
			continue
		}
		lastSeen = time.Now()
		var del []sqstypesEntry
		for _, m := range out.Messages {
			id, keep, err := decode(aws.ToString(m.Body))
			if err != nil {
				undecodable++
			} else {
				t.Add(id, keep)
			}
			del = append(del, sqstypesEntry{id: aws.ToString(m.MessageId), handle: aws.ToString(m.ReceiptHandle)})
		}
		if err := deleteAll(ctx, client, queueURL, del); err != nil {
			return undecodable, err
		}
	}
	return undecodable, nil
}

// PayloadID decodes a produced payload and returns its id.
func PayloadID(body string) (string, []byte, error) {
	var p Payload
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.ID == "" {
		return "", nil, ErrUndecodable
	}
	return p.ID, []byte(body), nil
}
