package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
)

// ErrLive is wrapped by errors reading a deployed stack.
var ErrLive = errors.New("doctor: live")

// StreamAPI is the Kinesis call the live mode makes (kinesis:DescribeStreamSummary).
type StreamAPI interface {
	DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error)
}

// TTLAPI is the DynamoDB call the live mode makes on the ledger table
// (dynamodb:DescribeTimeToLive).
type TTLAPI interface {
	DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

// CheckpointLister lists the group's shard states (*checkpoint.Store; dynamodb:Query on the
// checkpoint table).
type CheckpointLister interface {
	List(ctx context.Context, group, stream string) ([]checkpoint.State, error)
}

// ControlPlane is what Lambda, EventBridge and CloudWatch know about the deployment: the
// functions' configuration, their event-source mappings, the reconciler's schedule and the
// alarms. In AWS it is AWSControlPlane; locally, where none of those services exists, the
// harness answers from the emulated mapping's configuration.
type ControlPlane interface {
	Describe(ctx context.Context) (ControlPlaneView, error)
}

// ControlPlaneView is the control plane's answer.
type ControlPlaneView struct {
	// Mapping is the consumer's Kinesis event-source mapping; nil when it has none.
	Mapping *Mapping
	// ConsumerTimeout is the consumer function's timeout.
	ConsumerTimeout time.Duration
	// ConsumerEnv and ReconcilerEnv are the functions' environment variables.
	ConsumerEnv, ReconcilerEnv map[string]string
	// ReconcilerQueues are the ARNs of the SQS queues the reconciler has a mapping on.
	ReconcilerQueues []string
	// Schedule is the reconciler's schedule rule; nil when none targets it.
	Schedule *Schedule
	// Alarms are the stack's alarms; AlarmsKnown is false when they could not be listed.
	Alarms      []Alarm
	AlarmsKnown bool
	// Notes say what the view could not see, or where its answers came from.
	Notes []string
}

// Live names what Collect reads.
type Live struct {
	Source      string // printed as the report's source, e.g. "stack gapless"
	Group       string
	Stream      string // stream name (state keys)
	StreamARN   string // optional: names the stream in Kinesis calls (another account)
	LedgerTable string
	Streams     StreamAPI
	TTL         TTLAPI
	Checkpoints CheckpointLister
	Control     ControlPlane
	// KPLAggregation: "yes", "no" or "" (unknown), as the operator says.
	KPLAggregation string
	Now            func() time.Time
}

// Collect reads a deployed stack into a Deployment. A control-plane or stream failure is an
// error (the checks would be guesses); a ledger TTL or checkpoint read that fails becomes a note
// and skips its checks.
func Collect(ctx context.Context, l Live) (Deployment, error) {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	d := Deployment{Source: l.Source, Now: now(), KPLAggregation: l.KPLAggregation}
	view, err := l.Control.Describe(ctx)
	if err != nil {
		return d, fmt.Errorf("%w: control plane: %w", ErrLive, err)
	}
	d.Mapping = view.Mapping
	d.ConsumerTimeout = view.ConsumerTimeout
	d.ReconcilerQueues = view.ReconcilerQueues
	d.Schedule = view.Schedule
	d.Alarms, d.AlarmsKnown = view.Alarms, view.AlarmsKnown
	d.Notes = append(d.Notes, view.Notes...)
	d.ConsumerEnv, d.ReconcilerEnv = view.ConsumerEnv, view.ReconcilerEnv
	d.MaxRecordAttempts = intOr(view.ConsumerEnv[config.EnvMaxRecordAttempts], config.DefaultMaxRecordAttempts)
	d.LedgerTTL = durationOr(view.ConsumerEnv[config.EnvLedgerTTL], config.DefaultLedgerTTL)
	d.SettleAfter = durationOr(view.ReconcilerEnv[config.EnvSettleAfter], config.DefaultSettleAfter)

	in := &kinesis.DescribeStreamSummaryInput{}
	if l.StreamARN != "" {
		in.StreamARN = aws.String(l.StreamARN)
	} else {
		in.StreamName = aws.String(l.Stream)
	}
	sum, err := l.Streams.DescribeStreamSummary(ctx, in)
	if err != nil {
		return d, fmt.Errorf("%w: describe stream %s: %w", ErrLive, l.Stream, err)
	}
	if s := sum.StreamDescriptionSummary; s != nil && s.RetentionPeriodHours != nil {
		d.Retention = time.Duration(*s.RetentionPeriodHours) * time.Hour
	}
	if s := sum.StreamDescriptionSummary; s != nil && s.MaxRecordSizeInKiB != nil {
		d.MaxRecordSize = int(*s.MaxRecordSizeInKiB) * 1024
	}
	// The busiest shard's ingest, where the control plane can measure it (CloudWatch).
	if meter, ok := l.Control.(IngestMeter); ok {
		name, shards := l.Stream, 0
		if s := sum.StreamDescriptionSummary; s != nil {
			if s.StreamName != nil {
				name = *s.StreamName
			}
			shards = int(aws.ToInt32(s.OpenShardCount))
		}
		in, err := meter.ShardIngest(ctx, name, shards, d.Now)
		switch {
		case err != nil:
			d.Notes = append(d.Notes, fmt.Sprintf("read headroom not checked: %v", err))
		case in == nil:
			d.Notes = append(d.Notes, "read headroom not checked: no IncomingBytes datapoints for stream "+name+" in the last "+short(IngestWindow)+" (idle, or a stream of another account)")
		default:
			d.Ingest = in
		}
	}

	ttl, err := l.TTL.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(l.LedgerTable)})
	switch {
	case err != nil:
		d.Notes = append(d.Notes, fmt.Sprintf("ledger TTL not checked: DescribeTimeToLive %s: %v", l.LedgerTable, err))
	case ttl.TimeToLiveDescription == nil:
		d.LedgerTTLKnown = true
	default:
		d.LedgerTTLKnown = true
		switch ttl.TimeToLiveDescription.TimeToLiveStatus {
		case ddbtypes.TimeToLiveStatusEnabled, ddbtypes.TimeToLiveStatusEnabling:
			d.LedgerTTLAttribute = aws.ToString(ttl.TimeToLiveDescription.AttributeName)
		}
	}

	states, err := l.Checkpoints.List(ctx, l.Group, l.Stream)
	if err != nil {
		d.Notes = append(d.Notes, fmt.Sprintf("reconciler's last pass not checked: %v", err))
		return d, nil
	}
	for _, s := range states {
		if s.WatermarkAt.After(d.LastPass) {
			d.LastPass = s.WatermarkAt
		}
		if s.CheckpointAt.After(d.LastCheckpoint) {
			d.LastCheckpoint = s.CheckpointAt
		}
	}
	switch {
	case len(states) == 0:
		d.Notes = append(d.Notes, "no shard state for group "+l.Group+" and stream "+l.Stream+": nothing consumed yet (or another group or stream)")
	case d.LastPass.IsZero():
		d.Notes = append(d.Notes, fmt.Sprintf("%d shards, no verified watermark yet", len(states)))
	default:
		d.Notes = append(d.Notes, fmt.Sprintf("%d shards; newest checkpoint %s, newest verified watermark %s", len(states),
			d.LastCheckpoint.UTC().Format(time.RFC3339), d.LastPass.UTC().Format(time.RFC3339)))
	}
	return d, nil
}
