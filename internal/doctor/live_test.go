package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/doctor"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/localdoctor"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/recordid"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.Kinesis, localstack.DynamoDB, localstack.SQS))
}

// localRun is a local deployment: a stream, the two tables and the failure queue on the local
// stack, the emulated mapping configured from template.yaml, and the functions' variables of
// events/env.json.
type localRun struct {
	stream, ledger, checkpoints, failureQueue string
	control                                   localdoctor.ControlPlane
	store                                     *checkpoint.Store
	maxRecordKiB                              int32 // > 0: DescribeStreamSummary answers it
}

// largeRecords is the local stack's Kinesis with MaxRecordSizeInKiB set on its stream summary.
type largeRecords struct {
	doctor.StreamAPI
	kib int32
}

func (l largeRecords) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	out, err := l.StreamAPI.DescribeStreamSummary(ctx, in, opts...)
	if err == nil && out.StreamDescriptionSummary != nil {
		out.StreamDescriptionSummary.MaxRecordSizeInKiB = aws.Int32(l.kib)
	}
	return out, err
}

func newLocalRun(t *testing.T) *localRun {
	t.Helper()
	cfg, err := esm.ConfigFromTemplate(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]map[string]string
	b, err := os.ReadFile(filepath.Join("..", "..", "events", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	r := &localRun{ledger: stacktest.LedgerTable(t), checkpoints: stacktest.CheckpointTable(t), failureQueue: stacktest.Queue(t, "failure", false)}
	r.stream, _ = stacktest.Stream(t, 1)
	cfg.StreamName = r.stream
	cfg.FunctionName = "ConsumerFunction"
	cfg.OnFailureQueueURL = r.failureQueue
	tp, err := doctor.LoadTemplate(filepath.Join("..", "..", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r.control = localdoctor.ControlPlane{
		Mapping: cfg, State: "Enabled", Metrics: doctor.FromTemplate(tp, "template.yaml", 0).Mapping.Metrics,
		ConsumerEnv: env["ConsumerFunction"], ReconcilerEnv: env["ReconcilerFunction"],
		ReconcilerQueues: []string{r.failureQueue},
		Schedule:         &doctor.Schedule{Expression: "rate(5 minutes)", Enabled: true},
	}
	r.store = checkpoint.New(stacktest.DynamoDB(t), r.checkpoints)
	return r
}

func (r *localRun) doctor(t *testing.T, now time.Time) doctor.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var streams doctor.StreamAPI = stacktest.Kinesis(t)
	if r.maxRecordKiB > 0 {
		streams = largeRecords{streams, r.maxRecordKiB}
	}
	d, err := doctor.Collect(ctx, doctor.Live{
		Source: "local", Group: "local", Stream: r.stream, LedgerTable: r.ledger,
		Streams: streams, TTL: stacktest.DynamoDB(t), Checkpoints: r.store, Control: r.control,
		KPLAggregation: "no", Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return doctor.Run(d)
}

// TestLocalStackPasses: the local stack with the emulated mapping as template.yaml configures
// it has no error-level finding, and the retention comes from the stream.
func TestLocalStackPasses(t *testing.T) {
	t.Parallel()
	r := newLocalRun(t)
	rep := r.doctor(t, time.Now())
	var b bytes.Buffer
	if err := doctor.Write(&b, rep); err != nil {
		t.Fatal(err)
	}
	if rep.Errors() > 0 {
		t.Fatalf("local stack:\n%s", b.String())
	}
	t.Logf("local stack:\n%s", b.String())
}

// TestEachFindingLive breaks one thing per case, in the emulated mapping's configuration, in
// what the harness says for the control plane, or in the local stack's data, and asserts that
// exactly that finding appears.
func TestEachFindingLive(t *testing.T) {
	t.Parallel()
	now := time.Now()
	shard := func(r *localRun) recordid.Shard {
		return recordid.Shard{Group: "local", Stream: r.stream, ShardID: "shardId-000000000000"}
	}
	cases := []struct {
		name   string
		break_ func(t *testing.T, r *localRun)
		want   []string
	}{
		{"no ReportBatchItemFailures", func(t *testing.T, r *localRun) { r.control.Mapping.ReportBatchItemFailures = false },
			[]string{"mapping.report-batch-item-failures"}},
		{"infinite retries", func(t *testing.T, r *localRun) { r.control.Mapping.MaximumRetryAttempts = -1 },
			[]string{"mapping.retries-infinite"}},
		{"infinite record age", func(t *testing.T, r *localRun) { r.control.Mapping.MaximumRecordAge = 0 },
			[]string{"mapping.record-age-infinite"}},
		{"no on-failure queue", func(t *testing.T, r *localRun) { r.control.Mapping.OnFailureQueueURL = "" },
			[]string{"mapping.on-failure-missing"}},
		{"failure queue not fed to the reconciler", func(t *testing.T, r *localRun) { r.control.ReconcilerQueues = nil },
			[]string{"mapping.on-failure-not-consumed"}},
		{"mapping stopped", func(t *testing.T, r *localRun) { r.control.State = "Disabled" },
			[]string{"mapping.disabled"}},
		// template.yaml gives the reconciler the mapping's StartingPosition (STARTING_POSITION).
		{"LATEST", func(t *testing.T, r *localRun) {
			r.control.Mapping.StartingPosition = esm.Latest
			r.control.ReconcilerEnv = maps.Clone(r.control.ReconcilerEnv)
			r.control.ReconcilerEnv["STARTING_POSITION"] = "LATEST"
		}, []string{"mapping.latest"}},
		{"LATEST on the reconciler only", func(t *testing.T, r *localRun) {
			r.control.ReconcilerEnv = maps.Clone(r.control.ReconcilerEnv)
			r.control.ReconcilerEnv["STARTING_POSITION"] = "LATEST"
		}, []string{"mapping.starting-position-mismatch"}},
		{"no schedule", func(t *testing.T, r *localRun) { r.control.Schedule = nil },
			[]string{"reconciler.schedule-missing"}},
		{"schedule disabled", func(t *testing.T, r *localRun) { r.control.Schedule.Enabled = false },
			[]string{"reconciler.schedule-disabled"}},
		{"settle below the minimum", func(t *testing.T, r *localRun) {
			r.control.ReconcilerEnv = maps.Clone(r.control.ReconcilerEnv)
			r.control.ReconcilerEnv["SETTLE_AFTER"] = "1m"
		}, []string{"settle.below-minimum"}},
		// The stream's retention, read from the local stack: 8 days outlives LEDGER_TTL 192h.
		{"stream retention raised past the ledger TTL", func(t *testing.T, r *localRun) {
			_, err := stacktest.Kinesis(t).IncreaseStreamRetentionPeriod(context.Background(), &kinesis.IncreaseStreamRetentionPeriodInput{
				StreamName: aws.String(r.stream), RetentionPeriodHours: aws.Int32(192),
			})
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"ledger.ttl-short"}},
		// The checkpoint table on the local stack: the consumer moved a checkpoint now, the
		// reconciler last moved a watermark two hours ago.
		{"reconciler not running", func(t *testing.T, r *localRun) {
			ctx := context.Background()
			old := checkpoint.New(stacktest.DynamoDB(t), r.checkpoints, checkpoint.WithClock(func() time.Time { return now.Add(-2 * time.Hour) }))
			if _, err := old.AdvanceWatermark(ctx, shard(r), "100"); err != nil {
				t.Fatal(err)
			}
			cur := checkpoint.New(stacktest.DynamoDB(t), r.checkpoints, checkpoint.WithClock(func() time.Time { return now }))
			if _, err := cur.Advance(ctx, shard(r), "500"); err != nil {
				t.Fatal(err)
			}
		}, []string{"reconciler.not-running"}},
		// The same table with a recent pass: no finding.
		{"reconciler running", func(t *testing.T, r *localRun) {
			ctx := context.Background()
			cur := checkpoint.New(stacktest.DynamoDB(t), r.checkpoints, checkpoint.WithClock(func() time.Time { return now }))
			if _, err := cur.AdvanceWatermark(ctx, shard(r), "100"); err != nil {
				t.Fatal(err)
			}
			if _, err := cur.Advance(ctx, shard(r), "500"); err != nil {
				t.Fatal(err)
			}
		}, nil},
		// The functions' variables against the emulated mapping's FilterCriteria.
		{"record filter on the mapping only", func(t *testing.T, r *localRun) {
			r.control.Mapping.FilterCriteria = []string{`{"data": {"kind": ["order"]}}`}
		}, []string{"filter.mismatch"}},
		{"ON_PARK hold-key on the consumer only", func(t *testing.T, r *localRun) {
			r.control.ConsumerEnv = maps.Clone(r.control.ConsumerEnv)
			r.control.ConsumerEnv["ON_PARK"] = "hold-key"
		}, []string{"onpark.mismatch"}},
		// DescribeStreamSummary's MaxRecordSizeInKiB: kinesis-local has no large records
		// (UpdateMaxRecordSize), so the field is set on its real answer.
		{"stream maximum record size 8 MiB", func(t *testing.T, r *localRun) { r.maxRecordKiB = 8192 },
			[]string{"stream.records-undeliverable"}},
		// The emulated mapping answers MetricsConfig as template.yaml sets it.
		{"mapping without MetricsConfig", func(t *testing.T, r *localRun) { r.control.Metrics = nil },
			[]string{"mapping.metrics-off"}},
		{"alarms without the loss alarm and without actions", func(t *testing.T, r *localRun) {
			r.control.AlarmsKnown = true
			r.control.Alarms = []doctor.Alarm{{Name: "a", Namespace: "Gapless", Metric: "VerifiedLagSeconds"}}
		}, []string{"alarms.missing", "alarms.no-actions"}},
	}
	base := newLocalRun(t).doctor(t, now).IDs()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newLocalRun(t)
			c.break_(t, r)
			got := r.doctor(t, now).IDs()
			want := append(slices.Clone(base), c.want...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("findings %v, want %v (base %v)", got, want, base)
			}
		})
	}
}
