package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/gapless-dev/gapless/internal/metrics"
)

// LambdaAPI is the Lambda calls of the live mode (lambda:ListEventSourceMappings,
// lambda:GetFunctionConfiguration).
type LambdaAPI interface {
	ListEventSourceMappings(context.Context, *lambda.ListEventSourceMappingsInput, ...func(*lambda.Options)) (*lambda.ListEventSourceMappingsOutput, error)
	GetFunctionConfiguration(context.Context, *lambda.GetFunctionConfigurationInput, ...func(*lambda.Options)) (*lambda.GetFunctionConfigurationOutput, error)
}

// EventBridgeAPI is the EventBridge calls of the live mode (events:ListRuleNamesByTarget,
// events:DescribeRule).
type EventBridgeAPI interface {
	ListRuleNamesByTarget(context.Context, *eventbridge.ListRuleNamesByTargetInput, ...func(*eventbridge.Options)) (*eventbridge.ListRuleNamesByTargetOutput, error)
	DescribeRule(context.Context, *eventbridge.DescribeRuleInput, ...func(*eventbridge.Options)) (*eventbridge.DescribeRuleOutput, error)
}

// CloudWatchAPI is the CloudWatch call of the live mode (cloudwatch:DescribeAlarms). A client
// that is also a MetricDataAPI (cloudwatch:GetMetricData) lets doctor measure the stream's
// shard ingest (AWSControlPlane.ShardIngest).
type CloudWatchAPI interface {
	DescribeAlarms(context.Context, *cloudwatch.DescribeAlarmsInput, ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error)
}

var (
	_ LambdaAPI      = (*lambda.Client)(nil)
	_ EventBridgeAPI = (*eventbridge.Client)(nil)
	_ CloudWatchAPI  = (*cloudwatch.Client)(nil)
)

// AWSControlPlane reads the control plane from Lambda, EventBridge and CloudWatch. Every call
// is a read (docs/deploy.md lists the IAM actions).
type AWSControlPlane struct {
	Lambda      LambdaAPI
	EventBridge EventBridgeAPI
	CloudWatch  CloudWatchAPI
	// ConsumerFunction and ReconcilerFunction are the functions' names or ARNs (stack outputs
	// ConsumerFunctionName, ReconcilerFunctionName).
	ConsumerFunction, ReconcilerFunction string
	// Group is the consumer group: the Group dimension of the stack's gapless alarms.
	Group string
	// AlarmPrefix, when set, narrows the listing to alarms named with it (CloudFormation names
	// them "<stack>-<LogicalId>-<suffix>"). The stack's alarms are then those that watch its
	// functions (dimension FunctionName) or its group (namespace Gapless, dimension Group), so
	// the alarms of another stack whose name shares the prefix do not count.
	AlarmPrefix string
}

var _ ControlPlane = (*AWSControlPlane)(nil)

// Describe implements ControlPlane.
func (a *AWSControlPlane) Describe(ctx context.Context) (ControlPlaneView, error) {
	var v ControlPlaneView
	mappingUUID := "" // the consumer's Kinesis mapping: dimension EventSourceMappingUUID of its own metrics
	cons, err := a.Lambda.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(a.ConsumerFunction)})
	if err != nil {
		return v, fmt.Errorf("consumer function %s: %w", a.ConsumerFunction, err)
	}
	v.ConsumerTimeout = time.Duration(aws.ToInt32(cons.Timeout)) * time.Second
	v.ConsumerEnv = envOf(cons.Environment)
	rec, err := a.Lambda.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(a.ReconcilerFunction)})
	if err != nil {
		return v, fmt.Errorf("reconciler function %s: %w", a.ReconcilerFunction, err)
	}
	v.ReconcilerEnv = envOf(rec.Environment)

	consMappings, err := a.mappings(ctx, a.ConsumerFunction)
	if err != nil {
		return v, err
	}
	for _, m := range consMappings {
		if !strings.Contains(aws.ToString(m.EventSourceArn), ":kinesis:") {
			continue
		}
		v.Mapping = mappingOf(m)
		mappingUUID = aws.ToString(m.UUID)
		break
	}
	recMappings, err := a.mappings(ctx, a.ReconcilerFunction)
	if err != nil {
		return v, err
	}
	for _, m := range recMappings {
		if arn := aws.ToString(m.EventSourceArn); strings.Contains(arn, ":sqs:") {
			v.ReconcilerQueues = append(v.ReconcilerQueues, arn)
		}
	}

	rules, err := a.EventBridge.ListRuleNamesByTarget(ctx, &eventbridge.ListRuleNamesByTargetInput{TargetArn: rec.FunctionArn})
	if err != nil {
		return v, fmt.Errorf("rules targeting %s: %w", a.ReconcilerFunction, err)
	}
	for _, name := range rules.RuleNames {
		r, err := a.EventBridge.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(name)})
		if err != nil {
			return v, fmt.Errorf("rule %s: %w", name, err)
		}
		if aws.ToString(r.ScheduleExpression) == "" {
			continue
		}
		s := &Schedule{Expression: aws.ToString(r.ScheduleExpression), Enabled: r.State == ebtypes.RuleStateEnabled}
		if v.Schedule == nil || (s.Enabled && !v.Schedule.Enabled) {
			v.Schedule = s
		}
	}

	in := &cloudwatch.DescribeAlarmsInput{}
	if a.AlarmPrefix != "" {
		in.AlarmNamePrefix = aws.String(a.AlarmPrefix)
	}
	pages := cloudwatch.NewDescribeAlarmsPaginator(a.CloudWatch, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return v, fmt.Errorf("alarms %s*: %w", a.AlarmPrefix, err)
		}
		for _, al := range page.MetricAlarms {
			if !a.ours(al.Namespace, al.Dimensions, mappingUUID) {
				continue
			}
			actions := len(al.AlarmActions)
			if al.ActionsEnabled != nil && !*al.ActionsEnabled {
				actions = 0
			}
			v.Alarms = append(v.Alarms, Alarm{Name: aws.ToString(al.AlarmName), Namespace: aws.ToString(al.Namespace),
				Metric: aws.ToString(al.MetricName), Actions: actions})
		}
	}
	v.AlarmsKnown = true
	return v, nil
}

// ours reports whether an alarm watches this deployment: one of its functions, its consumer's
// mapping (Lambda's event source mapping metrics carry the mapping's UUID as dimension
// EventSourceMappingUUID), or its group's gapless metrics.
func (a *AWSControlPlane) ours(namespace *string, dims []cwtypes.Dimension, mappingUUID string) bool {
	for _, d := range dims {
		v := aws.ToString(d.Value)
		switch aws.ToString(d.Name) {
		case "FunctionName":
			if v == a.ConsumerFunction || v == a.ReconcilerFunction {
				return true
			}
		case "EventSourceMappingUUID":
			if v != "" && v == mappingUUID {
				return true
			}
		case metrics.DimensionGroup:
			if aws.ToString(namespace) == metrics.Namespace && v == a.Group {
				return true
			}
		}
	}
	return false
}

func (a *AWSControlPlane) mappings(ctx context.Context, fn string) ([]lambdatypes.EventSourceMappingConfiguration, error) {
	var out []lambdatypes.EventSourceMappingConfiguration
	pages := lambda.NewListEventSourceMappingsPaginator(a.Lambda, &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fn)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("event-source mappings of %s: %w", fn, err)
		}
		out = append(out, page.EventSourceMappings...)
	}
	return out, nil
}

func mappingOf(m lambdatypes.EventSourceMappingConfiguration) *Mapping {
	out := &Mapping{
		StartingPosition:      string(m.StartingPosition),
		MaximumRetryAttempts:  -1,
		MaximumRecordAge:      -1,
		ParallelizationFactor: 1,
		State:                 aws.ToString(m.State),
	}
	for _, t := range m.FunctionResponseTypes {
		out.ReportBatchItemFailures = out.ReportBatchItemFailures || t == lambdatypes.FunctionResponseTypeReportBatchItemFailures
	}
	if m.MaximumRetryAttempts != nil {
		out.MaximumRetryAttempts = int(*m.MaximumRetryAttempts)
	}
	if m.MaximumRecordAgeInSeconds != nil && *m.MaximumRecordAgeInSeconds >= 0 {
		out.MaximumRecordAge = time.Duration(*m.MaximumRecordAgeInSeconds) * time.Second
	}
	if m.ParallelizationFactor != nil {
		out.ParallelizationFactor = int(*m.ParallelizationFactor)
	}
	if m.MaximumBatchingWindowInSeconds != nil {
		out.BatchingWindow = time.Duration(*m.MaximumBatchingWindowInSeconds) * time.Second
	}
	// With FilterCriteria encrypted by a customer managed key that the caller may not use,
	// Lambda returns FilterCriteriaError instead of the patterns (Lambda API reference,
	// EventSourceMappingConfiguration): they are unknown, not absent.
	out.FiltersUnknown = m.FilterCriteriaError != nil
	if m.FilterCriteria != nil {
		for _, f := range m.FilterCriteria.Filters {
			out.Filters = append(out.Filters, aws.ToString(f.Pattern))
		}
	}
	// A registered consumer's ARN: arn:…:kinesis:<region>:<account>:stream/<name>/consumer/<consumer>:<ts>.
	out.EnhancedFanOut = strings.Contains(aws.ToString(m.EventSourceArn), "/consumer/")
	if m.MetricsConfig != nil {
		for _, g := range m.MetricsConfig.Metrics {
			out.Metrics = append(out.Metrics, string(g))
		}
	}
	if m.DestinationConfig != nil && m.DestinationConfig.OnFailure != nil {
		out.OnFailure = aws.ToString(m.DestinationConfig.OnFailure.Destination)
		// An S3 bucket destination: arn:<partition>:s3:::<name>.
		if parts := strings.SplitN(out.OnFailure, ":", 6); len(parts) == 6 && parts[2] == "s3" {
			out.OnFailureBucket = parts[5]
		}
	}
	return out
}

func envOf(e *lambdatypes.EnvironmentResponse) map[string]string {
	if e == nil {
		return map[string]string{}
	}
	return e.Variables
}
