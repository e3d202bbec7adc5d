package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func base() map[string]string {
	return map[string]string{
		EnvGroup: "orders", EnvCheckpointTable: "cp", EnvDedupeTable: "ledger",
		EnvParkedQueueURL: "http://q/parked", EnvTargetQueueURL: "http://q/target", EnvStreamName: "orders-stream",
		EnvPayloadBucket: "orders-payloads",
	}
}

func TestLoadConsumerDefaults(t *testing.T) {
	c, err := LoadConsumer(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxRecordAttempts != 5 || c.MaxConcurrency != 16 || c.LedgerTTL != 192*time.Hour || c.LogPayloads || c.DeadlineMargin != 3*time.Second {
		t.Fatalf("defaults = %+v", c)
	}
}

// TestOnPark: ON_PARK is continue by default and hold-key when asked, for both functions.
func TestOnPark(t *testing.T) {
	for _, tt := range []struct{ set, want string }{{"", OnParkContinue}, {"continue", OnParkContinue}, {" hold-key ", OnParkHoldKey}} {
		m := base()
		m[EnvOnPark] = tt.set
		c, err := LoadConsumer(env(m))
		r, rerr := LoadReconciler(env(m))
		if err != nil || rerr != nil || c.OnPark != tt.want || r.OnPark != tt.want {
			t.Errorf("ON_PARK=%q: consumer %q %v, reconciler %q %v; want %q", tt.set, c.OnPark, err, r.OnPark, rerr, tt.want)
		}
	}
}

// TestConsumerStreamIsOptional: STREAM_NAME is read when set (the consumer then checks the
// events' stream against it) and not required.
func TestConsumerStreamIsOptional(t *testing.T) {
	c, err := LoadConsumer(env(base()))
	if err != nil || c.StreamName != "orders-stream" {
		t.Fatalf("StreamName = %q, %v; want orders-stream", c.StreamName, err)
	}
	m := base()
	delete(m, EnvStreamName)
	if c, err := LoadConsumer(env(m)); err != nil || c.StreamName != "" {
		t.Fatalf("without STREAM_NAME: %q, %v", c.StreamName, err)
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		name  string
		set   map[string]string
		unset string
		want  string
	}{
		{"missing group", nil, EnvGroup, EnvGroup + " is required"},
		{"missing table", nil, EnvDedupeTable, EnvDedupeTable + " is required"},
		{"bad attempts", map[string]string{EnvMaxRecordAttempts: "zero"}, "", EnvMaxRecordAttempts},
		{"attempts out of range", map[string]string{EnvMaxRecordAttempts: "0"}, "", EnvMaxRecordAttempts},
		{"bad concurrency", map[string]string{EnvMaxConcurrency: "-3"}, "", EnvMaxConcurrency},
		{"bad ttl", map[string]string{EnvLedgerTTL: "1h"}, "", EnvLedgerTTL},
		{"bad bool", map[string]string{EnvLogPayloads: "yes please"}, "", EnvLogPayloads},
		{"bad group", map[string]string{EnvGroup: "a|b"}, "", EnvGroup},
		{"bad dedupe key", map[string]string{EnvDedupeKey: "order..id"}, "", EnvDedupeKey},
		{"bad margin", map[string]string{EnvDeadlineMargin: "soon"}, "", EnvDeadlineMargin},
		{"bad stream", map[string]string{EnvStreamName: "orders/stream"}, "", EnvStreamName},
		{"missing payload bucket", nil, EnvPayloadBucket, EnvPayloadBucket + " is required"},
		{"bucket with capitals", map[string]string{EnvPayloadBucket: "Orders"}, "", EnvPayloadBucket},
		{"bucket too short", map[string]string{EnvPayloadBucket: "ab"}, "", EnvPayloadBucket},
		{"bucket ends with a dash", map[string]string{EnvPayloadBucket: "orders-"}, "", EnvPayloadBucket},
		{"bucket with two periods", map[string]string{EnvPayloadBucket: "a..b"}, "", EnvPayloadBucket},
		{"bucket as an IP address", map[string]string{EnvPayloadBucket: "192.168.5.4"}, "", EnvPayloadBucket},
		{"bucket as a URL", map[string]string{EnvPayloadBucket: "s3://orders"}, "", EnvPayloadBucket},
		{"unknown on-park mode", map[string]string{EnvOnPark: "hold"}, "", `ON_PARK="hold" must be one of continue, hold-key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			for k, v := range tt.set {
				m[k] = v
			}
			delete(m, tt.unset)
			_, err := LoadConsumer(env(m))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %s", err, tt.want)
			}
		})
	}
}

func TestLoadReconciler(t *testing.T) {
	r, err := LoadReconciler(env(base()))
	if err != nil || r.StreamName != "orders-stream" || r.SettleAfter != DefaultSettleAfter {
		t.Fatalf("got %+v, %v", r, err)
	}
	m := base()
	delete(m, EnvStreamName)
	m[EnvSettleAfter] = "-5m"
	_, err = LoadReconciler(env(m))
	if err == nil || !strings.Contains(err.Error(), EnvStreamName) || !strings.Contains(err.Error(), EnvSettleAfter) {
		t.Fatalf("want both variables named, got %v", err)
	}
}

func TestMinSettle(t *testing.T) {
	tests := []struct {
		name           string
		timeout, win   time.Duration
		attempts, retr int
		want           time.Duration
	}{
		{"infinite retries: parking bounds it", 60 * time.Second, 0, 5, -1, 6*time.Minute + time.Minute},
		{"few retries: the mapping gives up first", 60 * time.Second, 0, 5, 1, 3*time.Minute + time.Minute},
		{"batching window counts", 30 * time.Second, 30 * time.Second, 5, -1, 6*time.Minute + time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MinSettle(tt.timeout, tt.win, tt.attempts, tt.retr); got != tt.want {
				t.Fatalf("MinSettle = %v, want %v", got, tt.want)
			}
		})
	}
	if DefaultSettleAfter < MinSettle(60*time.Second, 0, DefaultMaxRecordAttempts, -1) {
		t.Fatal("the default settle window is shorter than the minimum for a 60s function")
	}
}

// TestLoadReconcilerStreamARN: STREAM_ARN (a stream in any account) replaces or accompanies
// STREAM_NAME; errors name the variable at fault.
func TestLoadReconcilerStreamARN(t *testing.T) {
	const arn = "arn:aws:kinesis:eu-west-1:111122223333:stream/orders-stream"
	tests := []struct {
		name          string
		streamName    string
		streamARN     string
		wantName      string
		wantErrNaming string
	}{
		{"name only", "orders-stream", "", "orders-stream", ""},
		{"arn only: name from the arn", "", arn, "orders-stream", ""},
		{"both agree", "orders-stream", arn, "orders-stream", ""},
		{"other partition", "", "arn:aws-cn:kinesis:cn-north-1:111122223333:stream/s.1_x-y", "s.1_x-y", ""},
		{"both disagree", "other", arn, "", EnvStreamName},
		{"not an arn", "", "orders-stream", "", EnvStreamARN},
		{"a consumer arn", "", arn + "/consumer/c:1", "", EnvStreamARN},
		{"an sqs arn", "", "arn:aws:sqs:eu-west-1:111122223333:orders", "", EnvStreamARN},
		{"neither", "", "", "", EnvStreamARN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			m[EnvStreamName], m[EnvStreamARN] = tt.streamName, tt.streamARN
			r, err := LoadReconciler(env(m))
			if tt.wantErrNaming != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErrNaming) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrNaming)
				}
				return
			}
			if err != nil || r.StreamName != tt.wantName || r.StreamARN != tt.streamARN {
				t.Fatalf("got name %q arn %q, %v; want name %q arn %q", r.StreamName, r.StreamARN, err, tt.wantName, tt.streamARN)
			}
		})
	}
}

// TestLoadReconcilerMaxRecordAge: MAXIMUM_RECORD_AGE_SECONDS takes what the mapping's
// MaximumRecordAgeInSeconds takes (-1, or 60-604800); anything else fails naming it.
func TestLoadReconcilerMaxRecordAge(t *testing.T) {
	tests := []struct {
		value   string
		want    time.Duration
		wantErr bool
	}{
		{"", -1, false},
		{"-1", -1, false},
		{"60", time.Minute, false},
		{"3600", time.Hour, false},
		{"604800", 7 * 24 * time.Hour, false},
		{"0", 0, true},
		{"59", 0, true},
		{"-2", 0, true},
		{"604801", 0, true},
		{"1h", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			m := base()
			m[EnvMaxRecordAge] = tt.value
			r, err := LoadReconciler(env(m))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvMaxRecordAge) {
					t.Fatalf("err %v, want one naming %s", err, EnvMaxRecordAge)
				}
				return
			}
			if err != nil || r.MaxRecordAge != tt.want {
				t.Fatalf("MaxRecordAge %v, %v; want %v", r.MaxRecordAge, err, tt.want)
			}
		})
	}
}

func TestLoadReconcilerFailureBucket(t *testing.T) {
	m := base()
	m[EnvFailureBucket] = "orders-failures"
	r, err := LoadReconciler(env(m))
	if err != nil || r.FailureBucket != "orders-failures" {
		t.Fatalf("got %+v, %v", r.FailureBucket, err)
	}
	m[EnvFailureBucket] = "Orders_Failures"
	if _, err := LoadReconciler(env(m)); err == nil || !strings.Contains(err.Error(), EnvFailureBucket) {
		t.Fatalf("want %s named, got %v", EnvFailureBucket, err)
	}
}

func TestLoadReconcilerVerifyQueue(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"", true},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/orders-verify.fifo", true},
		{"http://127.0.0.1:4566/000000000000/orders-verify.fifo", true},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/orders-verify", false}, // standard queue: no message groups
		{"orders-verify.fifo", false},
		{"https://sqs.eu-west-1.amazonaws.com/orders-verify.fifo", false},
	} {
		m := base()
		m[EnvVerifyQueueURL] = tc.url
		r, err := LoadReconciler(env(m))
		switch {
		case tc.ok && (err != nil || r.VerifyQueueURL != tc.url):
			t.Errorf("%q: got %q, %v", tc.url, r.VerifyQueueURL, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), EnvVerifyQueueURL)):
			t.Errorf("%q: want %s named, got %v", tc.url, EnvVerifyQueueURL, err)
		}
	}
}
