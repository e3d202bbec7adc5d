package process_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/process"
)

// batchFake is a SendMessageBatchAPI: answer decides each request's response.
type batchFake struct {
	mu     sync.Mutex
	reqs   []*sqs.SendMessageBatchInput
	answer func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error)
}

func (f *batchFake) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, in)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(in)
	}
	return allOK(in), nil
}

func allOK(in *sqs.SendMessageBatchInput) *sqs.SendMessageBatchOutput {
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("m")})
	}
	return out
}

// recordIDs returns the gapless.recordId attribute of each entry.
func recordIDs(in *sqs.SendMessageBatchInput) []string {
	var ids []string
	for _, e := range in.Entries {
		ids = append(ids, aws.ToString(e.MessageAttributes[process.AttrRecordID].StringValue))
	}
	return ids
}

func batchRecs(n int, key func(i int) string, size int) []pipeline.Record {
	var out []pipeline.Record
	for i := range n {
		out = append(out, pipeline.Record{
			ID:           recordid.ID{ShardID: "shardId-000000000003", Seq: fmt.Sprintf("%056d", i+1)},
			PartitionKey: key(i), Data: []byte(strings.Repeat("x", size)),
		})
	}
	return out
}

func TestNewBatch(t *testing.T) {
	distinct := func(i int) string { return fmt.Sprint("k", i) }
	failID := func(match func(rid string) bool) func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		return func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
			out := &sqs.SendMessageBatchOutput{}
			for _, e := range in.Entries {
				if match(aws.ToString(e.MessageAttributes[process.AttrRecordID].StringValue)) {
					out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), SenderFault: false})
				} else {
					out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id})
				}
			}
			return out, nil
		}
	}
	seqOf := func(i int) string { return fmt.Sprintf("%056d", i) }
	tests := map[string]struct {
		recs     []pipeline.Record
		fifo     bool
		answer   func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error)
		requests []int         // entries per request, in any order
		failed   map[int]error // record index -> wrapped error
		check    func(t *testing.T, reqs []*sqs.SendMessageBatchInput)
	}{
		"25 records, 3 requests": {recs: batchRecs(25, distinct, 10), requests: []int{10, 10, 5}},
		"size limit splits": { // 300 KB each: 3 fit in 1 MiB
			recs: batchRecs(7, distinct, 300*1024), requests: []int{3, 3, 1},
		},
		"failed entries map to their records (after EntryAttempts)": {
			recs:     batchRecs(12, distinct, 10),
			answer:   failID(func(rid string) bool { return strings.Contains(rid, seqOf(3)) || strings.Contains(rid, seqOf(12)) }),
			requests: []int{10, 2, 1, 1, 1, 1}, // each failed entry sent twice more, alone
			failed:   map[int]error{2: process.ErrEntryFailed, 11: process.ErrEntryFailed},
		},
		"a transient entry failure is sent again": {
			recs: batchRecs(12, distinct, 10),
			answer: func() func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				var mu sync.Mutex
				tries := 0
				return failID(func(rid string) bool {
					mu.Lock()
					defer mu.Unlock()
					if strings.Contains(rid, seqOf(5)) {
						tries++
						return tries == 1
					}
					return false
				})
			}(),
			requests: []int{10, 2, 1},
		},
		"a sender fault is not sent again": {
			recs: batchRecs(3, distinct, 10),
			answer: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				out := allOK(in)
				out.Failed = []sqstypes.BatchResultErrorEntry{{Id: in.Entries[1].Id, Code: aws.String("InvalidMessageContents"), SenderFault: true}}
				out.Successful = slices.Delete(out.Successful, 1, 2)
				return out, nil
			},
			requests: []int{3},
			failed:   map[int]error{1: process.ErrEntryFailed},
		},
		"a whole request fails": {
			recs: batchRecs(12, distinct, 10),
			answer: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				if len(in.Entries) == 2 {
					return nil, errors.New("connection reset")
				}
				return allOK(in), nil
			},
			requests: []int{10, 2},
			failed:   map[int]error{10: nil, 11: nil},
		},
		"an entry missing from the response fails": {
			recs: batchRecs(3, distinct, 10),
			answer: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				out := allOK(in)
				out.Successful = out.Successful[1:]
				return out, nil
			},
			requests: []int{3},
			failed:   map[int]error{0: process.ErrEntryFailed},
		},
		"one key twice: successive requests, stopped at a failure": {
			recs:     batchRecs(4, func(i int) string { return []string{"a", "b", "a", "a"}[i] }, 10),
			answer:   failID(func(rid string) bool { return strings.Contains(rid, seqOf(1)) }),
			requests: []int{2, 1, 1}, // round 1: a1, b; a1 failed (three times), so a3 and a4 are not sent
			failed:   map[int]error{0: process.ErrEntryFailed, 2: process.ErrGroupStopped, 3: process.ErrGroupStopped},
		},
		"fifo ids as SendMessage sets them": {
			recs: batchRecs(3, distinct, 10), fifo: true, requests: []int{3},
			check: func(t *testing.T, reqs []*sqs.SendMessageBatchInput) {
				for _, e := range reqs[0].Entries {
					rid := aws.ToString(e.MessageAttributes[process.AttrRecordID].StringValue)
					if aws.ToString(e.MessageDeduplicationId) != rid || !strings.HasPrefix(aws.ToString(e.MessageGroupId), "k") {
						t.Errorf("entry %s: group %q dedup %q", rid, aws.ToString(e.MessageGroupId), aws.ToString(e.MessageDeduplicationId))
					}
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &batchFake{answer: tc.answer}
			url := "https://q/target"
			if tc.fifo {
				url += ".fifo"
			}
			errs := process.NewBatch(fake, url)(context.Background(), tc.recs)
			if len(errs) != len(tc.recs) {
				t.Fatalf("%d outcomes for %d records", len(errs), len(tc.recs))
			}
			var sizes []int
			for _, r := range fake.reqs {
				sizes = append(sizes, len(r.Entries))
				if n := len(r.Entries); n > process.MaxBatchEntries {
					t.Errorf("request of %d entries", n)
				}
				total := 0
				for _, e := range r.Entries {
					total += len(aws.ToString(e.MessageBody))
				}
				if total > process.MaxBatchBytes {
					t.Errorf("request of %d bytes", total)
				}
				keys := map[string]bool{}
				for _, e := range r.Entries {
					k := aws.ToString(e.MessageAttributes[process.AttrPartitionKey].StringValue)
					if keys[k] {
						t.Errorf("request holds key %s twice", k)
					}
					keys[k] = true
				}
			}
			slices.Sort(sizes)
			want := slices.Clone(tc.requests)
			slices.Sort(want)
			if !slices.Equal(sizes, want) {
				t.Errorf("requests of %v entries, want %v", sizes, want)
			}
			for j, err := range errs {
				wantErr, fails := tc.failed[j]
				switch {
				case fails && err == nil:
					t.Errorf("record %d: no error", j)
				case fails && wantErr != nil && !errors.Is(err, wantErr):
					t.Errorf("record %d: %v, want %v", j, err, wantErr)
				case !fails && err != nil:
					t.Errorf("record %d: %v", j, err)
				}
			}
			if tc.check != nil {
				tc.check(t, fake.reqs)
			}
		})
	}
}
