package doctor

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/metrics"
)

// The reconciler's fan-out (VERIFY_QUEUE_URL): a scheduled pass sends one message per shard to
// a FIFO queue (message group = shard id, so SQS lets one message of a shard be in flight: one
// walker per shard) and the reconciler, as that queue's SQS event source, walks the shard each
// message names. These checks hold a deployment with the fan-out on to what it needs, as
// mapping.on-failure-not-consumed does for the failure queue.

// FanOutAlarms are the metrics a deployment whose reconciler fans out (VERIFY_QUEUE_URL set)
// must alarm on besides RequiredAlarms: a refused work message walks nothing, so only its
// alarm tells anyone it arrived.
var FanOutAlarms = []string{
	metrics.Namespace + "/VerifyMessageRefused",
}

// Kinesis read throughput of one shard without enhanced fan-out: "up to 2 MB/sec or 2,000
// records/sec read throughput", shared by every consumer reading it with GetRecords (Kinesis
// Data Streams developer guide, "Quotas and limits":
// https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html). The mapping
// reads a shard at its ingest rate; the reconciler's walker reads it at up to WalkerReadRate
// (GetRecords batches of up to 1 MiB, one per second).
const (
	ShardReadRate  = 2 << 20 // bytes/s
	WalkerReadRate = 1 << 20 // bytes/s
)

// HeadroomIngestRate is the busiest shard's ingest above which stream.read-headroom warns,
// about 1 MB/s (953,250 bytes/s). Past it, what the reconciler's walker can read of the shard,
// min(WalkerReadRate, ShardReadRate - ingest), exceeds the ingest by less than a tenth: a
// walker that fell behind (a failed pass, a deploy, a burst) catches up at under a tenth of
// the ingest rate, and not at all once another reader takes a share.
const HeadroomIngestRate = WalkerReadRate * 10 / 11 // bytes/s

// Ingest is the write rate of a stream's busiest shard as CloudWatch saw it (AWS/Kinesis
// IncomingBytes: Kinesis Data Streams developer guide, "Monitor the Amazon Kinesis Data
// Streams service with Amazon CloudWatch":
// https://docs.aws.amazon.com/streams/latest/dev/monitoring-with-cloudwatch.html).
type Ingest struct {
	Stream    string
	PerSecond float64 // bytes/s: the largest 1-minute sum of the window, / 60
	// Shard is the busiest shard's id from the shard-level metric (enhanced monitoring); ""
	// when only the stream-level metric was there, PerSecond then being its average over
	// Shards open shards (a hot shard writes more).
	Shard  string
	Shards int
	Window time.Duration // how far back it looked
}

// IngestMeter is a ControlPlane that can also measure a stream's shard ingest (in AWS,
// AWSControlPlane through CloudWatch). Collect asks it when it has it; a nil Ingest means no
// datapoints.
type IngestMeter interface {
	ShardIngest(ctx context.Context, stream string, openShards int, now time.Time) (*Ingest, error)
}

// IngestWindow is how far back ShardIngest looks.
const IngestWindow = time.Hour

// MetricDataAPI is the CloudWatch call ShardIngest makes (cloudwatch:GetMetricData).
type MetricDataAPI interface {
	GetMetricData(context.Context, *cloudwatch.GetMetricDataInput, ...func(*cloudwatch.Options)) (*cloudwatch.GetMetricDataOutput, error)
}

var (
	_ MetricDataAPI = (*cloudwatch.Client)(nil)
	_ IngestMeter   = (*AWSControlPlane)(nil)
)

// ShardIngest implements IngestMeter: the Maximum over the last IngestWindow of 1-minute sums
// of IncomingBytes, per shard (dimensions StreamName and ShardId: only with enhanced shard-level
// monitoring) or, without those, for the stream divided by its open shards. CloudWatch has no
// datapoints for a stream of another account: nil, nil.
func (a *AWSControlPlane) ShardIngest(ctx context.Context, stream string, openShards int, now time.Time) (*Ingest, error) {
	api, ok := a.CloudWatch.(MetricDataAPI)
	if !ok {
		return nil, fmt.Errorf("the CloudWatch client cannot GetMetricData")
	}
	const period = 60
	in := &cloudwatch.GetMetricDataInput{
		StartTime: aws.Time(now.Add(-IngestWindow)), EndTime: aws.Time(now),
		MetricDataQueries: []cwtypes.MetricDataQuery{
			{Id: aws.String("shards"), Expression: aws.String(fmt.Sprintf(
				`SEARCH('{AWS/Kinesis,ShardId,StreamName} MetricName="IncomingBytes" StreamName="%s"', 'Sum', %d)`, stream, period))},
			{Id: aws.String("stream"), MetricStat: &cwtypes.MetricStat{
				Metric: &cwtypes.Metric{Namespace: aws.String("AWS/Kinesis"), MetricName: aws.String("IncomingBytes"),
					Dimensions: []cwtypes.Dimension{{Name: aws.String("StreamName"), Value: aws.String(stream)}}},
				Period: aws.Int32(period), Stat: aws.String("Sum"),
			}},
		},
	}
	var shardMax, streamMax float64
	var busiest string
	var haveShard, haveStream bool
	pages := cloudwatch.NewGetMetricDataPaginator(api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("IncomingBytes of stream %s: %w", stream, err)
		}
		for _, r := range page.MetricDataResults {
			for _, v := range r.Values {
				switch aws.ToString(r.Id) {
				case "shards":
					if !haveShard || v > shardMax {
						shardMax, busiest, haveShard = v, aws.ToString(r.Label), true
					}
				case "stream":
					if !haveStream || v > streamMax {
						streamMax, haveStream = v, true
					}
				}
			}
		}
	}
	switch {
	case haveShard:
		return &Ingest{Stream: stream, PerSecond: shardMax / period, Shard: busiest, Shards: openShards, Window: IngestWindow}, nil
	case haveStream && openShards > 0:
		return &Ingest{Stream: stream, PerSecond: streamMax / period / float64(openShards), Shards: openShards, Window: IngestWindow}, nil
	}
	return nil, nil
}

// ReadHeadroom is stream.read-headroom's rule: what is wrong when the busiest shard's ingest
// leaves the reconciler too little of the shard's read throughput, "" when it does not (or the
// mapping reads through an enhanced fan-out consumer, with 2 MB/s per shard of its own).
func ReadHeadroom(in *Ingest, enhancedFanOut bool) string {
	if in == nil || enhancedFanOut || in.PerSecond <= HeadroomIngestRate {
		return ""
	}
	which := "its busiest shard " + in.Shard
	if in.Shard == "" {
		which = fmt.Sprintf("its %d open shards on average (the stream's IncomingBytes; a hot shard writes more)", in.Shards)
	}
	left := max(ShardReadRate-in.PerSecond, 0)
	return fmt.Sprintf("stream %s took %s/s on %s (the largest minute of the last %s): the mapping reads it at that rate out of the shard's 2 MB/s of read throughput shared by every reader without enhanced fan-out, which leaves the reconciler's walker %s/s, less than 10%% over the ingest, so a walker that fell behind hardly catches up and records get closer to expiring unverified",
		in.Stream, mb(in.PerSecond), which, short(in.Window), mb(min(left, WalkerReadRate)))
}

// mb formats bytes as MB with two decimals.
func mb(b float64) string { return fmt.Sprintf("%.2f MB", b/1e6) }

// fanOut is the reconciler's VERIFY_QUEUE_URL ("" = no fan-out or unknown).
func fanOut(d *Deployment) string {
	if d.ReconcilerEnv == nil {
		return ""
	}
	return strings.TrimSpace(d.ReconcilerEnv[config.EnvVerifyQueueURL])
}

// queueKey names a queue alike in its three spellings: an ARN (arn:…:sqs:<region>:<account>:
// <name>) and a URL (…/<account>/<name>) become "<account>/<name>"; a template's resource id,
// as FromTemplate resolves !Ref Q and !GetAtt Q.Arn, becomes "Q".
func queueKey(s string) string {
	if parts := strings.SplitN(s, ":", 6); len(parts) == 6 && parts[0] == "arn" && parts[2] == "sqs" {
		return parts[4] + "/" + parts[5]
	}
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return strings.Trim(u.Path, "/")
	}
	return strings.TrimSuffix(s, ".Arn")
}

var verifyChecks = []Check{
	{
		ID: "verify.queue-not-consumed", Level: Error,
		Fix: "give the reconciler function an event of Type: SQS on the queue its VERIFY_QUEUE_URL names (gapless's template.yaml: ReconcilerFunction Events.Verify on VerifyQueue), or unset VERIFY_QUEUE_URL so a scheduled pass walks every shard itself",
		Eval: func(d *Deployment) string {
			q := fanOut(d)
			if q == "" {
				return ""
			}
			if slices.ContainsFunc(d.ReconcilerQueues, func(r string) bool { return queueKey(r) == queueKey(q) }) {
				return ""
			}
			return fmt.Sprintf("the reconciler's %s is %s, a queue it does not consume (it reads %v): every scheduled pass hands its shards to that queue and nothing walks them, so no shard is verified and records expire unverified",
				config.EnvVerifyQueueURL, q, d.ReconcilerQueues)
		},
	},
	{
		ID: "verify.queue-not-fifo", Level: Error,
		Fix: "make the verify queue FIFO (FifoQueue: true, and its dead-letter queue too), or unset VERIFY_QUEUE_URL",
		Eval: func(d *Deployment) string {
			q := fanOut(d)
			if q == "" {
				return ""
			}
			fifo := strings.HasSuffix(q, ".fifo")
			if !strings.Contains(q, "://") { // offline: a resource of the template
				if d.VerifyQueueFIFO == nil {
					return ""
				}
				fifo = *d.VerifyQueueFIFO
			}
			if fifo {
				return ""
			}
			return fmt.Sprintf("the reconciler's %s %s is not a FIFO queue: the reconciler refuses it at cold start (config validation), and a standard queue has no message groups to keep two walkers off one shard",
				config.EnvVerifyQueueURL, q)
		},
	},
	{
		ID: "stream.read-headroom", Level: Warning,
		Fix: "read the stream through an enhanced fan-out consumer (template parameter EnhancedFanOut true: the mapping gets 2 MB/s per shard of its own), or add shards so each takes less (the reconciler then needs a walker per shard: VerifyConcurrency)",
		Eval: func(d *Deployment) string {
			return ReadHeadroom(d.Ingest, d.Mapping != nil && d.Mapping.EnhancedFanOut)
		},
	},
}

func init() { Checks = append(Checks, verifyChecks...) }
