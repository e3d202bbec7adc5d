package pipelinetest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/pipeline/pipelinetest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.DynamoDB)) }

func shards(prefix string) func(string) recordid.Shard {
	n := 0
	return func(string) recordid.Shard {
		n++
		return recordid.Shard{Group: "contract", Stream: fmt.Sprintf("%s-%d", prefix, n), ShardID: fmt.Sprintf("shardId-%012d", n)}
	}
}

// TestDynamoDBStoresKeepTheContract: the ledger and checkpoint mirror on DynamoDB (the stack's
// emulator) behave as the contract says.
func TestDynamoDBStoresKeepTheContract(t *testing.T) {
	ddb := stacktest.DynamoDB(t)
	cps := checkpoint.New(ddb, stacktest.CheckpointTable(t))
	s := pipelinetest.Stores{
		Ledger:     pipeline.DedupeLedger{L: dedupe.New(ddb, stacktest.LedgerTable(t))},
		Checkpoint: pipeline.CheckpointStore{S: cps},
		Mirror:     cps,
		NewShard:   shards(stacktest.Name(t, "stream")),
	}
	if err := pipelinetest.TestStores(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestFakesKeepTheContract: the in-memory stores unit tests use behave as the DynamoDB stores.
func TestFakesKeepTheContract(t *testing.T) {
	cp := &pipelinetest.Checkpoint{}
	s := pipelinetest.Stores{Ledger: &pipelinetest.Ledger{}, Checkpoint: cp, Mirror: cp, NewShard: shards("stream")}
	if err := pipelinetest.TestStores(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// alwaysAdvances is a checkpoint whose conditional write always succeeds.
type alwaysAdvances struct{}

func (alwaysAdvances) Advance(context.Context, recordid.Shard, string) (pipeline.Advance, error) {
	return pipeline.Advance{Advanced: true}, nil
}

// neverDuplicate claims every business key for whoever asks.
type neverDuplicate struct{ *pipelinetest.Ledger }

func (neverDuplicate) Claim(context.Context, string, string, recordid.ID) (bool, error) {
	return false, nil
}

// swallowsRefusals reports an entry it refused as stored.
type swallowsRefusals struct{ *pipelinetest.Ledger }

func (l swallowsRefusals) Record(ctx context.Context, shard recordid.Shard, e pipeline.Entry) error {
	_ = l.Ledger.Record(ctx, shard, e)
	return nil
}

// acknowledgesUnwritten answers every write with success and stores nothing.
type acknowledgesUnwritten struct{ *pipelinetest.Ledger }

func (acknowledgesUnwritten) Record(context.Context, recordid.Shard, pipeline.Entry) error {
	return nil
}

// lostFailures records entries without their failed attempts.
type lostFailures struct{ *pipelinetest.Ledger }

func (l lostFailures) Record(ctx context.Context, shard recordid.Shard, e pipeline.Entry) error {
	e.Failed = nil
	return l.Ledger.Record(ctx, shard, e)
}

// countsEverySpan counts a lost span whenever asked: no once-only identity, no condition on
// the watermark.
type countsEverySpan struct{ *pipelinetest.Checkpoint }

func (c countsEverySpan) CountLoss(ctx context.Context, shard recordid.Shard, l checkpoint.Loss) (checkpoint.Result, error) {
	c.Edit(shard, func(st *checkpoint.State) {
		st.LostToRetention++
		if l.To != "" {
			st.Watermark = l.To
		}
	})
	return checkpoint.Result{Advanced: true}, nil
}

// TestContractCatchesABrokenFake: a fake whose semantics differ from the stores' fails the
// contract, and the failure names the broken case.
func TestContractCatchesABrokenFake(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    pipelinetest.Stores
		want string // a case the error must name
	}{
		{"a conditional write that always succeeds", pipelinetest.Stores{Ledger: &pipelinetest.Ledger{}, Checkpoint: alwaysAdvances{}}, "the checkpoint only moves forward"},
		{"a claim that never finds an owner", pipelinetest.Stores{Ledger: neverDuplicate{&pipelinetest.Ledger{}}, Checkpoint: &pipelinetest.Checkpoint{}}, "a business key is claimed once"},
		{"a refused write reported as stored", pipelinetest.Stores{Ledger: swallowsRefusals{&pipelinetest.Ledger{}}, Checkpoint: &pipelinetest.Checkpoint{}}, "an entry is refused"},
		{"a write acknowledged and not made", pipelinetest.Stores{Ledger: acknowledgesUnwritten{&pipelinetest.Ledger{}}, Checkpoint: &pipelinetest.Checkpoint{}}, "an entry makes its records done"},
		{"failed attempts not counted", pipelinetest.Stores{Ledger: lostFailures{&pipelinetest.Ledger{}}, Checkpoint: &pipelinetest.Checkpoint{}}, "counts one attempt per listing"},
		{"a lost span counted every time it is found", pipelinetest.Stores{Ledger: &pipelinetest.Ledger{}, Checkpoint: &pipelinetest.Checkpoint{}, Mirror: countsEverySpan{&pipelinetest.Checkpoint{}}}, "a lost span is counted once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.NewShard = shards("stream")
			if tc.s.Mirror == nil {
				tc.s.Mirror = &pipelinetest.Checkpoint{}
			}
			err := pipelinetest.TestStores(context.Background(), tc.s)
			if err == nil {
				t.Fatal("the contract passed a broken fake")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error does not name the case %q:\n%v", tc.want, err)
			}
		})
	}
}
