package wire

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/gapless-dev/gapless/internal/chaos"
	"github.com/gapless-dev/gapless/internal/config"
)

func common() config.Common {
	return config.Common{
		Group: "g", CheckpointTable: "cp", DedupeTable: "ledger", ParkedQueueURL: "http://127.0.0.1:1/q/parked",
		TargetQueueURL: "http://127.0.0.1:1/q/target", PayloadBucket: "payloads", MaxRecordAttempts: 5, MaxConcurrency: 4, LedgerTTL: config.DefaultLedgerTTL,
	}
}

func TestBuild(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	tests := []struct {
		name    string
		chaos   string
		wantErr error
	}{
		{"no fault injection", "", nil},
		{"fault injection on", "seed=3,transient=0.1", nil},
		{"bad fault injection names the variable", "transient=lots", chaos.ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == chaos.EnvVar {
					return tt.chaos
				}
				return ""
			}
			parts, err := Build(context.Background(), common(), config.DefaultDeadlineMargin, getenv, io.Discard)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), chaos.EnvVar) {
					t.Fatalf("err = %v, want %v naming %s", err, tt.wantErr, chaos.EnvVar)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if parts.Pipeline == nil || parts.Checkpoints == nil || parts.Logger == nil || parts.Metrics == nil {
				t.Fatalf("incomplete parts: %+v", parts)
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
