package doctor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/gapless-dev/gapless/internal/config"
)

// TestReadHeadroom: stream.read-headroom warns when the busiest shard's ingest leaves the
// reconciler's walker less than a tenth over it, naming the stream, the rate and the fix; not
// when the mapping reads through an enhanced fan-out consumer, nor without a measurement.
func TestReadHeadroom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		in      *Ingest
		efo     bool
		warn    bool
		mention []string
	}{
		{name: "unknown"},
		{name: "idle", in: &Ingest{Stream: "orders", Shard: "shardId-000000000000", Window: time.Hour}},
		{name: "half a MB/s", in: &Ingest{Stream: "orders", PerSecond: 500_000, Shard: "shardId-000000000000", Window: time.Hour}},
		{name: "at the threshold", in: &Ingest{Stream: "orders", PerSecond: HeadroomIngestRate, Shard: "shardId-000000000000", Window: time.Hour}},
		{name: "busiest shard near 1 MB/s", in: &Ingest{Stream: "orders", PerSecond: 1_000_000, Shard: "shardId-000000000003", Window: time.Hour},
			warn: true, mention: []string{"stream orders", "1.00 MB/s", "shardId-000000000003", "1h"}},
		{name: "stream average near 1 MB/s", in: &Ingest{Stream: "orders", PerSecond: 990_000, Shards: 4, Window: time.Hour},
			warn: true, mention: []string{"stream orders", "0.99 MB/s", "4 open shards on average"}},
		{name: "enhanced fan-out", in: &Ingest{Stream: "orders", PerSecond: 1_040_000, Shard: "shardId-000000000000", Window: time.Hour}, efo: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Deployment{Ingest: c.in, Mapping: &Mapping{EnhancedFanOut: c.efo, MaximumRetryAttempts: 10, MaximumRecordAge: time.Hour, ReportBatchItemFailures: true}}
			rep := Run(d)
			if got := rep.Has("stream.read-headroom"); got != c.warn {
				t.Fatalf("stream.read-headroom %v, want %v (%v)", got, c.warn, rep.IDs())
			}
			msg := ReadHeadroom(c.in, c.efo)
			for _, m := range c.mention {
				if !strings.Contains(msg, m) {
					t.Errorf("message lacks %q: %s", m, msg)
				}
			}
		})
	}
	// The fix names both remedies.
	for _, c := range Checks {
		if c.ID == "stream.read-headroom" && (c.Level != Warning || !strings.Contains(c.Fix, "EnhancedFanOut") || !strings.Contains(c.Fix, "shards")) {
			t.Errorf("stream.read-headroom: level %s, fix %q", c.Level, c.Fix)
		}
	}
}

// TestVerifyQueueLive: live, VERIFY_QUEUE_URL is a URL and the reconciler's queues are ARNs;
// they are the same queue when account and name agree. The alarm on refused work messages is
// required only with the fan-out on.
func TestVerifyQueueLive(t *testing.T) {
	t.Parallel()
	const fifoURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/orders-VerifyQueue-abc.fifo"
	const fifoARN = "arn:aws:sqs:eu-west-1:111122223333:orders-VerifyQueue-abc.fifo"
	for _, c := range []struct {
		name   string
		url    string
		queues []string
		want   []string
	}{
		{name: "no fan-out", queues: []string{"arn:aws:sqs:eu-west-1:111122223333:fail"}},
		{name: "consumed", url: fifoURL, queues: []string{"arn:aws:sqs:eu-west-1:111122223333:fail", fifoARN}, want: []string{"alarms.missing"}},
		{name: "not consumed", url: fifoURL, queues: []string{"arn:aws:sqs:eu-west-1:111122223333:fail"}, want: []string{"alarms.missing", "verify.queue-not-consumed"}},
		{name: "same name, another account", url: fifoURL, queues: []string{"arn:aws:sqs:eu-west-1:444455556666:orders-VerifyQueue-abc.fifo"}, want: []string{"alarms.missing", "verify.queue-not-consumed"}},
		{name: "standard queue", url: "https://sqs.eu-west-1.amazonaws.com/111122223333/verify", queues: []string{"arn:aws:sqs:eu-west-1:111122223333:verify"}, want: []string{"alarms.missing", "verify.queue-not-fifo"}},
		// The local stack names queues by URL on both sides.
		{name: "local URLs", url: "http://127.0.0.1:4566/000000000000/VerifyQueue.fifo", queues: []string{"http://127.0.0.1:4566/000000000000/VerifyQueue.fifo"}, want: []string{"alarms.missing"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Deployment{ReconcilerEnv: map[string]string{config.EnvVerifyQueueURL: c.url}, ReconcilerQueues: c.queues, AlarmsKnown: true}
			for _, a := range RequiredAlarms { // namespace/metric; AWS namespaces hold a slash
				i := strings.LastIndex(a, "/")
				d.Alarms = append(d.Alarms, Alarm{Name: a, Namespace: a[:i], Metric: a[i+1:], Actions: 1})
			}
			var got []string
			for _, id := range Run(d).IDs() {
				if strings.HasPrefix(id, "verify.") || id == "alarms.missing" {
					got = append(got, id)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v", got, c.want)
			}
		})
	}
}

// fakeMetrics is fakeCloudWatch answering GetMetricData too, in two pages.
type fakeMetrics struct {
	fakeCloudWatch
	results []cwtypes.MetricDataResult
	asked   *cloudwatch.GetMetricDataInput
}

func (f *fakeMetrics) GetMetricData(_ context.Context, in *cloudwatch.GetMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error) {
	f.asked = in
	if in.NextToken == nil && len(f.results) > 1 {
		return &cloudwatch.GetMetricDataOutput{MetricDataResults: f.results[:1], NextToken: aws.String("2")}, nil
	}
	if in.NextToken != nil {
		return &cloudwatch.GetMetricDataOutput{MetricDataResults: f.results[1:]}, nil
	}
	return &cloudwatch.GetMetricDataOutput{MetricDataResults: f.results}, nil
}

// TestShardIngest: the busiest minute of the busiest shard (shard-level IncomingBytes), else the
// stream's divided by its open shards, else nothing; per second.
func TestShardIngest(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	res := func(id, label string, v ...float64) cwtypes.MetricDataResult {
		return cwtypes.MetricDataResult{Id: aws.String(id), Label: aws.String(label), Values: v}
	}
	for _, c := range []struct {
		name    string
		results []cwtypes.MetricDataResult
		want    *Ingest
	}{
		{name: "shard-level", results: []cwtypes.MetricDataResult{
			res("shards", "shardId-000000000000", 6e6, 12e6), res("shards", "shardId-000000000001", 60e6, 3e6), res("stream", "IncomingBytes", 72e6)},
			want: &Ingest{Stream: "orders", PerSecond: 1e6, Shard: "shardId-000000000001", Shards: 2, Window: IngestWindow}},
		{name: "stream-level only", results: []cwtypes.MetricDataResult{res("shards", ""), res("stream", "IncomingBytes", 30e6, 96e6)},
			want: &Ingest{Stream: "orders", PerSecond: 0.8e6, Shards: 2, Window: IngestWindow}},
		{name: "no datapoints", results: []cwtypes.MetricDataResult{res("shards", ""), res("stream", "IncomingBytes")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cw := &fakeMetrics{results: c.results}
			got, err := (&AWSControlPlane{CloudWatch: cw}).ShardIngest(context.Background(), "orders", 2, now)
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
				t.Errorf("ingest %+v, want %+v", got, c.want)
			}
			if q := cw.asked.MetricDataQueries; len(q) != 2 || !strings.Contains(aws.ToString(q[0].Expression), `StreamName="orders"`) ||
				!cw.asked.StartTime.Equal(now.Add(-IngestWindow)) || !cw.asked.EndTime.Equal(now) {
				t.Errorf("asked %+v", cw.asked)
			}
		})
	}
	if _, err := (&AWSControlPlane{CloudWatch: fakeCloudWatch{}}).ShardIngest(context.Background(), "orders", 2, now); err == nil {
		t.Errorf("a client without GetMetricData: no error")
	}
}

// TestEnhancedFanOutMapping: a mapping whose event source is a registered consumer reads with
// throughput of its own.
func TestEnhancedFanOutMapping(t *testing.T) {
	t.Parallel()
	for arn, want := range map[string]bool{
		"arn:aws:kinesis:eu-west-1:111122223333:stream/orders":                               false,
		"arn:aws:kinesis:eu-west-1:111122223333:stream/orders/consumer/gapless-s:1700000000": true,
	} {
		if got := mappingOf(lambdatypes.EventSourceMappingConfiguration{EventSourceArn: aws.String(arn)}).EnhancedFanOut; got != want {
			t.Errorf("%s: EnhancedFanOut %v, want %v", arn, got, want)
		}
	}
	tp, err := ParseTemplate(readRepoFile(t, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]bool{"false": false, "true": true} {
		if err := tp.Override(map[string]string{"EnhancedFanOut": v}); err != nil {
			t.Fatal(err)
		}
		if got := FromTemplate(tp, "test", 0).Mapping.EnhancedFanOut; got != want {
			t.Errorf("EnhancedFanOut=%s: mapping EnhancedFanOut %v", v, got)
		}
	}
}
