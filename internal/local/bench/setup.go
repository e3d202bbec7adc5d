package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/baseline"
	"github.com/gapless-dev/gapless/internal/schema"
)

// Nonce returns a short random name part, so runs never share state.
func Nonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Setup creates the tables and the parked queue of one run, named with nonce.
func Setup(ctx context.Context, c Clients, nonce string) (Tables, error) {
	t := Tables{
		Idempotency: "bench-idempotency-" + nonce,
		Ledger:      "bench-ledger-" + nonce,
		Checkpoint:  "bench-checkpoint-" + nonce,
		Group:       "bench-" + nonce,
	}
	ddb := dynamodb.NewFromConfig(c.Config)
	if err := baseline.Ensure(ctx, ddb, t.Idempotency); err != nil {
		return t, err
	}
	if err := schema.EnsureTables(ctx, ddb, schema.LedgerTable(t.Ledger), schema.CheckpointTable(t.Checkpoint)); err != nil {
		return t, err
	}
	q := sqs.NewFromConfig(c.Config)
	url, err := schema.EnsureQueue(ctx, q, schema.Queue{Name: "bench-parked-" + nonce})
	if err != nil {
		return t, fmt.Errorf("bench: parked queue: %w", err)
	}
	t.ParkedQueue = url
	if t.TargetQueue, err = schema.EnsureQueue(ctx, q, schema.Queue{Name: "bench-target-" + nonce}); err != nil {
		return t, fmt.Errorf("bench: target queue: %w", err)
	}
	return t, nil
}
