package wire

import (
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

func common() config.Common {
	return config.Common{
		Group: "g", CheckpointTable: "cp", DedupeTable: "ledger", ParkedQueueURL: "http://127.0.0.1:1/q/parked",
		TargetQueueURL: "http://127.0.0.1:1/q/target", PayloadBucket: "payloads", MaxRecordAttempts: 5, MaxConcurrency: 4, LedgerTTL: config.DefaultLedgerTTL,
	}
}

func TestBuild(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	wrapped := false
	wrap := WithProcessWrapper(func(p pipeline.ProcessFunc) pipeline.ProcessFunc { wrapped = true; return p })
	for name, tc := range map[string]struct {
		opts    []Option
		wrapped bool
		batched bool
	}{
		"default: batched bridge": {batched: true},
		"process wrapper":         {opts: []Option{wrap}, wrapped: true},
		"per-record bridge":       {opts: []Option{WithPerRecordBridge()}},
	} {
		t.Run(name, func(t *testing.T) {
			wrapped = false
			parts, err := Build(context.Background(), common(), config.DefaultDeadlineMargin, func(string) string { return "" }, io.Discard, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if parts.Pipeline == nil || parts.Checkpoints == nil || parts.Logger == nil || parts.Metrics == nil {
				t.Fatalf("incomplete parts: %+v", parts)
			}
			if wrapped != tc.wrapped {
				t.Errorf("the Process wrapper ran: %v, want %v", wrapped, tc.wrapped)
			}
			if got := parts.Pipeline.Batched(); got != tc.batched {
				t.Errorf("Batched() = %v, want %v", got, tc.batched)
			}
		})
	}
}

func TestNewS3PathStyleOnlyForALocalEndpoint(t *testing.T) {
	for _, endpoint := range []string{"", "http://127.0.0.1:4566"} {
		c := NewS3(aws.Config{Region: "us-east-1"}, func(k string) string {
			if k == "AWS_ENDPOINT_URL_S3" {
				return endpoint
			}
			return ""
		})
		if got := c.Options().UsePathStyle; got != (endpoint != "") {
			t.Errorf("AWS_ENDPOINT_URL_S3=%q: UsePathStyle %v", endpoint, got)
		}
	}
}
