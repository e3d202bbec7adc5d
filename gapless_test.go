package gapless_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

func TestConfigurationErrorsNameTheVariable(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	own := func(context.Context, gapless.Record) error { return nil }
	full := map[string]string{
		"GAPLESS_GROUP": "g", "CHECKPOINT_TABLE": "cp", "DEDUPE_TABLE": "ledger", "PARKED_QUEUE_URL": "http://127.0.0.1:1/q/parked",
		"TARGET_QUEUE_URL": "http://127.0.0.1:1/q/target", "PAYLOAD_BUCKET": "payloads", "STREAM_NAME": "orders",
	}
	for _, tc := range []struct {
		name    string
		process gapless.ProcessFunc
		unset   string
		bad     map[string]string
		want    string // the variable the error names; empty: no error
	}{
		{name: "default Process, complete"},
		{name: "default Process needs the target queue", unset: "TARGET_QUEUE_URL", want: "TARGET_QUEUE_URL"},
		{name: "own Process, no target queue", process: own, unset: "TARGET_QUEUE_URL"},
		{name: "own Process, no ledger", process: own, unset: "DEDUPE_TABLE", want: "DEDUPE_TABLE"},
		{name: "bad attempts", process: own, bad: map[string]string{"MAX_RECORD_ATTEMPTS": "zero"}, want: "MAX_RECORD_ATTEMPTS"},
		{name: "bad bucket", bad: map[string]string{"PAYLOAD_BUCKET": "Not_A_Bucket"}, want: "PAYLOAD_BUCKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range full {
				env[k] = v
			}
			delete(env, tc.unset)
			for k, v := range tc.bad {
				env[k] = v
			}
			opts := []gapless.Option{gapless.WithGetenv(func(k string) string { return env[k] }), gapless.WithOutput(&bytes.Buffer{})}
			_, errC := gapless.NewConsumer(context.Background(), tc.process, opts...)
			_, errR := gapless.NewReconciler(context.Background(), tc.process, opts...)
			for fn, err := range map[string]error{"consumer": errC, "reconciler": errR} {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: %v", fn, err)
				case tc.want != "" && (!errors.Is(err, gapless.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: err = %v, want an ErrInvalidConfig naming %s", fn, err, tc.want)
				}
			}
		})
	}
}

// countingTransport counts the HTTP requests of the clients built from WithAWSConfig's config.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

type syncBuffer = syncbuf.Buffer

// TestConsumerOptions runs a consumer against the local stack with every option: the Process
// receives the records as Kinesis delivered them, the wrappers run in order (the last given
// outermost), every AWS call goes through the given SDK configuration, log lines go to the given
// logger and metric lines to the metrics writer.
func TestConsumerOptions(t *testing.T) {
	t.Parallel()
	st := newStack()
	transport := &countingTransport{}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = &http.Client{Transport: transport}
	var logs, metrics, output syncBuffer
	var mu sync.Mutex
	var got []gapless.Record
	var calls []string
	process := func(ctx context.Context, r gapless.Record) error {
		mu.Lock()
		defer mu.Unlock()
		got, calls = append(got, r), append(calls, "process")
		if string(r.Data) == "bad" {
			return errors.New("rejected")
		}
		return nil
	}
	wrapper := func(name string) gapless.Option {
		return gapless.WithProcessWrapper(func(next gapless.ProcessFunc) gapless.ProcessFunc {
			return func(ctx context.Context, r gapless.Record) error {
				mu.Lock()
				calls = append(calls, name)
				mu.Unlock()
				return next(ctx, r)
			}
		})
	}
	c, err := gapless.NewConsumer(context.Background(), process, gapless.WithGetenv(st.getenv), gapless.WithAWSConfig(cfg),
		gapless.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))), gapless.WithMetricsWriter(&metrics), gapless.WithOutput(&output),
		wrapper("inner"), wrapper("outer"))
	if err != nil {
		t.Fatal(err)
	}
	ev := st.put("one", "bad")
	resp, err := c.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[1].Kinesis.SequenceNumber {
		t.Errorf("response %+v, want the failure of record 2 (%s)", resp, ev.Records[1].Kinesis.SequenceNumber)
	}
	if want := "outer inner process outer inner process"; strings.Join(calls, " ") != want {
		t.Errorf("calls %q, want %q", strings.Join(calls, " "), want)
	}
	if len(got) != 2 {
		t.Fatalf("Process saw %d records, want 2", len(got))
	}
	for i, r := range got {
		k := ev.Records[i].Kinesis
		shard, _, _ := strings.Cut(ev.Records[i].EventID, ":")
		if r.ShardID != shard || r.SequenceNumber != k.SequenceNumber || r.SubSequenceNumber != 0 || r.PartitionKey != "k" ||
			string(r.Data) != string(k.Data) || !r.ArrivalTime.Equal(k.ApproximateArrivalTimestamp.Time.Truncate(0)) {
			t.Errorf("record %d: %+v, delivered %+v", i, r, k)
		}
		if r.ID() != shard+":"+k.SequenceNumber+":0" {
			t.Errorf("record %d: ID %q", i, r.ID())
		}
	}
	if transport.n.Load() == 0 {
		t.Error("no request went through WithAWSConfig's HTTP client")
	}
	if !strings.Contains(logs.String(), "rejected") {
		t.Errorf("the logger did not get the failure:\n%s", logs.String())
	}
	if !strings.Contains(metrics.String(), `"_aws"`) {
		t.Errorf("no EMF line on the metrics writer:\n%s", metrics.String())
	}
	if output.String() != "" {
		t.Errorf("output got %q with both a logger and a metrics writer given", output.String())
	}
}

// TestDefaultProcessWrapped: WithProcessWrapper wraps the default Process too (the function
// mains' fault injection depends on it): a wrapper that fails every record leaves nothing
// forwarded and the batch reported.
func TestDefaultProcessWrapped(t *testing.T) {
	t.Parallel()
	st := newStack()
	st.env["TARGET_QUEUE_URL"] = st.env["PARKED_QUEUE_URL"]
	var seen atomic.Int64
	fail := gapless.WithProcessWrapper(func(next gapless.ProcessFunc) gapless.ProcessFunc {
		return func(ctx context.Context, r gapless.Record) error { seen.Add(1); return errors.New("not today") }
	})
	c, err := gapless.NewConsumer(context.Background(), nil, gapless.WithGetenv(st.getenv), gapless.WithOutput(&bytes.Buffer{}), fail)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Handle(context.Background(), st.put("x"))
	if err != nil || len(resp.BatchItemFailures) != 1 || seen.Load() != 1 {
		t.Fatalf("response %+v, err %v, wrapper saw %d records", resp, err, seen.Load())
	}
}

// TestBatchWrapperKeepsTheDefaultBatched: with a batch wrapper beside the Process wrapper (as the
// demo's fault injection gives both), the default bridge still runs in batch form and the
// batch wrapper sees its waves; with a Process wrapper alone it runs record by record.
func TestBatchWrapperKeepsTheDefaultBatched(t *testing.T) {
	t.Parallel()
	st := newStack()
	st.env["TARGET_QUEUE_URL"] = st.env["PARKED_QUEUE_URL"]
	var perRecord, waves atomic.Int64
	rec := gapless.WithProcessWrapper(func(next gapless.ProcessFunc) gapless.ProcessFunc {
		return func(ctx context.Context, r gapless.Record) error { perRecord.Add(1); return next(ctx, r) }
	})
	batch := gapless.WithBatchWrapper(func(next gapless.BatchProcessFunc) gapless.BatchProcessFunc {
		return func(ctx context.Context, recs []gapless.Record) []error { waves.Add(1); return next(ctx, recs) }
	})
	for _, tt := range []struct {
		name                string
		opts                []gapless.Option
		wantRecord, wantWav int64
	}{
		{"process wrapper alone: per record", []gapless.Option{rec}, 1, 0},
		{"both wrappers: batched", []gapless.Option{rec, batch}, 0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			perRecord.Store(0)
			waves.Store(0)
			opts := append([]gapless.Option{gapless.WithGetenv(st.getenv), gapless.WithOutput(&bytes.Buffer{})}, tt.opts...)
			c, err := gapless.NewConsumer(context.Background(), nil, opts...)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Handle(context.Background(), st.put("x-"+tt.name))
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("response %+v, err %v", resp, err)
			}
			if perRecord.Load() != tt.wantRecord || waves.Load() != tt.wantWav {
				t.Fatalf("process wrapper saw %d records, batch wrapper %d waves; want %d and %d",
					perRecord.Load(), waves.Load(), tt.wantRecord, tt.wantWav)
			}
		})
	}
}
