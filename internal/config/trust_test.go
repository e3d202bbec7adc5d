package config

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadConsumerStreamARN: the consumer takes STREAM_ARN (the stream by full ARN); its name
// part must agree with STREAM_NAME, and errors name the variable at fault.
func TestLoadConsumerStreamARN(t *testing.T) {
	const arn = "arn:aws:kinesis:eu-west-1:111122223333:stream/orders-stream"
	for _, tt := range []struct {
		name, streamName, streamARN, wantName, wantErrNaming string
	}{
		{"none", "", "", "", ""},
		{"both agree", "orders-stream", arn, "orders-stream", ""},
		{"arn only: name from the arn", "", arn, "orders-stream", ""},
		{"both disagree", "other", arn, "", EnvStreamName},
		{"not an arn", "", "orders-stream", "", EnvStreamARN},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			m[EnvStreamName], m[EnvStreamARN] = tt.streamName, tt.streamARN
			c, err := LoadConsumer(env(m))
			if tt.wantErrNaming != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErrNaming) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrNaming)
				}
				return
			}
			if err != nil || c.StreamName != tt.wantName || c.StreamARN != tt.streamARN {
				t.Fatalf("got name %q arn %q, %v", c.StreamName, c.StreamARN, err)
			}
		})
	}
}

// TestLoadReconcilerFailureTrust: CONSUMER_FUNCTION_ARN takes a function name or ARN and
// PARALLELIZATION_FACTOR the mapping's 1-10; anything else fails naming the variable.
func TestLoadReconcilerFailureTrust(t *testing.T) {
	for _, tt := range []struct {
		name, function, factor string
		wantFactor             int
		wantErrNaming          string
	}{
		{"defaults", "", "", 1, ""},
		{"arn", "arn:aws:lambda:eu-west-1:111122223333:function:gapless-consumer", "3", 3, ""},
		{"qualified arn", "arn:aws:lambda:eu-west-1:111122223333:function:gapless-consumer:live", "10", 10, ""},
		{"name", "gapless-consumer", "1", 1, ""},
		{"another service's arn", "arn:aws:sqs:eu-west-1:111122223333:q", "", 0, EnvConsumerFunction},
		{"factor 0", "", "0", 0, EnvParallelizationFactor},
		{"factor 11", "", "11", 0, EnvParallelizationFactor},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			m[EnvConsumerFunction], m[EnvParallelizationFactor] = tt.function, tt.factor
			r, err := LoadReconciler(env(m))
			if tt.wantErrNaming != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErrNaming) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrNaming)
				}
				return
			}
			if err != nil || r.ConsumerFunction != tt.function || r.ParallelizationFactor != tt.wantFactor {
				t.Fatalf("got %q %d, %v", r.ConsumerFunction, r.ParallelizationFactor, err)
			}
		})
	}
}
