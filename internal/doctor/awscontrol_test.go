package doctor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// fakeLambda, fakeEvents and fakeCloudWatch answer as the AWS APIs do (unit-test fakes: AWS's
// control plane has no local emulator here).
type fakeLambda struct {
	mappings map[string][]lambdatypes.EventSourceMappingConfiguration
	configs  map[string]*lambda.GetFunctionConfigurationOutput
}

func (f fakeLambda) ListEventSourceMappings(_ context.Context, in *lambda.ListEventSourceMappingsInput, _ ...func(*lambda.Options)) (*lambda.ListEventSourceMappingsOutput, error) {
	return &lambda.ListEventSourceMappingsOutput{EventSourceMappings: f.mappings[aws.ToString(in.FunctionName)]}, nil
}

func (f fakeLambda) GetFunctionConfiguration(_ context.Context, in *lambda.GetFunctionConfigurationInput, _ ...func(*lambda.Options)) (*lambda.GetFunctionConfigurationOutput, error) {
	return f.configs[aws.ToString(in.FunctionName)], nil
}

type fakeEvents struct {
	rules map[string]*eventbridge.DescribeRuleOutput
}

func (f fakeEvents) ListRuleNamesByTarget(_ context.Context, in *eventbridge.ListRuleNamesByTargetInput, _ ...func(*eventbridge.Options)) (*eventbridge.ListRuleNamesByTargetOutput, error) {
	var names []string
	for n := range f.rules {
		names = append(names, n)
	}
	slices.Sort(names)
	return &eventbridge.ListRuleNamesByTargetOutput{RuleNames: names}, nil
}

func (f fakeEvents) DescribeRule(_ context.Context, in *eventbridge.DescribeRuleInput, _ ...func(*eventbridge.Options)) (*eventbridge.DescribeRuleOutput, error) {
	return f.rules[aws.ToString(in.Name)], nil
}

type fakeCloudWatch struct{ alarms []cwtypes.MetricAlarm }

func (f fakeCloudWatch) DescribeAlarms(_ context.Context, in *cloudwatch.DescribeAlarmsInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error) {
	return &cloudwatch.DescribeAlarmsOutput{MetricAlarms: f.alarms}, nil
}

func dim(name, value string) cwtypes.Dimension {
	return cwtypes.Dimension{Name: aws.String(name), Value: aws.String(value)}
}

// TestAWSControlPlane: the API answers become the Mapping, schedule and alarms the checks read;
// alarms of another stack are not counted.
func TestAWSControlPlane(t *testing.T) {
	t.Parallel()
	cp := &AWSControlPlane{
		ConsumerFunction: "cons", ReconcilerFunction: "rec", Group: "orders",
		Lambda: fakeLambda{
			configs: map[string]*lambda.GetFunctionConfigurationOutput{
				"cons": {Timeout: aws.Int32(60), Environment: &lambdatypes.EnvironmentResponse{Variables: map[string]string{"LEDGER_TTL": "192h"}}},
				"rec":  {FunctionArn: aws.String("arn:aws:lambda:eu-west-1:111122223333:function:rec"), Environment: &lambdatypes.EnvironmentResponse{Variables: map[string]string{"SETTLE_AFTER": "30m"}}},
			},
			mappings: map[string][]lambdatypes.EventSourceMappingConfiguration{
				"cons": {{
					EventSourceArn: aws.String("arn:aws:kinesis:eu-west-1:111122223333:stream/s"), StartingPosition: lambdatypes.EventSourcePositionTrimHorizon,
					FunctionResponseTypes: []lambdatypes.FunctionResponseType{lambdatypes.FunctionResponseTypeReportBatchItemFailures},
					MaximumRetryAttempts:  aws.Int32(10), MaximumRecordAgeInSeconds: aws.Int32(-1), ParallelizationFactor: aws.Int32(4),
					DestinationConfig: &lambdatypes.DestinationConfig{OnFailure: &lambdatypes.OnFailure{Destination: aws.String("arn:aws:sqs:eu-west-1:111122223333:fail")}},
					State:             aws.String("Disabled"),
				}},
				"rec": {{EventSourceArn: aws.String("arn:aws:sqs:eu-west-1:111122223333:fail")}},
			},
		},
		EventBridge: fakeEvents{rules: map[string]*eventbridge.DescribeRuleOutput{
			"a": {ScheduleExpression: aws.String("rate(5 minutes)"), State: ebtypes.RuleStateDisabled},
		}},
		CloudWatch: fakeCloudWatch{alarms: []cwtypes.MetricAlarm{
			{AlarmName: aws.String("lost"), Namespace: aws.String("Gapless"), MetricName: aws.String("LostToRetention"), Dimensions: []cwtypes.Dimension{dim("Group", "orders")}, AlarmActions: []string{"arn:topic"}},
			{AlarmName: aws.String("age"), Namespace: aws.String("AWS/Lambda"), MetricName: aws.String("IteratorAge"), Dimensions: []cwtypes.Dimension{dim("FunctionName", "cons")}, AlarmActions: []string{"arn:topic"}, ActionsEnabled: aws.Bool(false)},
			{AlarmName: aws.String("other"), Namespace: aws.String("Gapless"), MetricName: aws.String("VerifiedLagSeconds"), Dimensions: []cwtypes.Dimension{dim("Group", "other-group")}},
		}},
	}
	v, err := cp.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := v.Mapping
	if m == nil || !m.ReportBatchItemFailures || m.MaximumRetryAttempts != 10 || m.MaximumRecordAge != -1 || m.ParallelizationFactor != 4 ||
		m.OnFailure != "arn:aws:sqs:eu-west-1:111122223333:fail" || m.State != "Disabled" || m.StartingPosition != TrimHorizon {
		t.Errorf("mapping %+v", m)
	}
	if v.ConsumerTimeout != time.Minute || v.ReconcilerEnv["SETTLE_AFTER"] != "30m" || !slices.Equal(v.ReconcilerQueues, []string{"arn:aws:sqs:eu-west-1:111122223333:fail"}) {
		t.Errorf("view %+v", v)
	}
	if v.Schedule == nil || v.Schedule.Enabled || v.Schedule.Expression != "rate(5 minutes)" {
		t.Errorf("schedule %+v", v.Schedule)
	}
	if !v.AlarmsKnown || len(v.Alarms) != 2 || v.Alarms[0].Actions != 1 || v.Alarms[1].Actions != 0 {
		t.Errorf("alarms %+v", v.Alarms)
	}
	// Through the checks: the disabled mapping and rule, the infinite age, the missing alarms.
	d := Deployment{Mapping: v.Mapping, Schedule: v.Schedule, Alarms: v.Alarms, AlarmsKnown: true, ReconcilerQueues: v.ReconcilerQueues, KPLAggregation: "no"}
	got := Run(d).IDs()
	for _, want := range []string{"mapping.disabled", "mapping.record-age-infinite", "reconciler.schedule-disabled", "alarms.missing", "alarms.no-actions"} {
		if !slices.Contains(got, want) {
			t.Errorf("findings %v lack %s", got, want)
		}
	}
}

// TestAWSMappingFilters: the mapping's FilterCriteria patterns reach the filter check; patterns
// Lambda could not decrypt (FilterCriteriaError) are unknown and not compared.
func TestAWSMappingFilters(t *testing.T) {
	t.Parallel()
	const p = `{"data": {"kind": ["order"]}}`
	env := map[string]string{"RECORD_FILTER": p}
	for _, c := range []struct {
		name string
		m    lambdatypes.EventSourceMappingConfiguration
		want bool // filter.mismatch
	}{
		{"same pattern", lambdatypes.EventSourceMappingConfiguration{FilterCriteria: &lambdatypes.FilterCriteria{Filters: []lambdatypes.Filter{{Pattern: aws.String(p)}}}}, false},
		{"no FilterCriteria", lambdatypes.EventSourceMappingConfiguration{}, true},
		{"another pattern", lambdatypes.EventSourceMappingConfiguration{FilterCriteria: &lambdatypes.FilterCriteria{Filters: []lambdatypes.Filter{{Pattern: aws.String(`{"data": {"kind": ["refund"]}}`)}}}}, true},
		{"not decrypted", lambdatypes.EventSourceMappingConfiguration{FilterCriteriaError: &lambdatypes.FilterCriteriaError{ErrorCode: aws.String("KMSAccessDeniedException")}}, false},
	} {
		m := mappingOf(c.m)
		got := Run(Deployment{Mapping: m, ConsumerEnv: env, ReconcilerEnv: env}).Has("filter.mismatch")
		if got != c.want {
			t.Errorf("%s: filter.mismatch %v, want %v (mapping filters %q unknown %v)", c.name, got, c.want, m.Filters, m.FiltersUnknown)
		}
	}
}

// TestAWSMappingMetrics: the deployed mapping's MetricsConfig (GetEventSourceMapping,
// ListEventSourceMappings) reaches the check; an alarm on DroppedEventCount by the consumer
// mapping's UUID is the stack's, one by another mapping's is not.
func TestAWSMappingMetrics(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  *lambdatypes.EventSourceMappingMetricsConfig
		want bool // mapping.metrics-off
	}{
		{"EventCount on", &lambdatypes.EventSourceMappingMetricsConfig{Metrics: []lambdatypes.EventSourceMappingMetric{lambdatypes.EventSourceMappingMetricEventCount}}, false},
		{"no MetricsConfig", nil, true},
		{"empty Metrics", &lambdatypes.EventSourceMappingMetricsConfig{}, true},
	} {
		m := mappingOf(lambdatypes.EventSourceMappingConfiguration{MetricsConfig: c.cfg})
		if got := Run(Deployment{Mapping: m}).Has("mapping.metrics-off"); got != c.want {
			t.Errorf("%s: mapping.metrics-off %v, want %v (metrics %v)", c.name, got, c.want, m.Metrics)
		}
	}
	cp := &AWSControlPlane{
		ConsumerFunction: "cons", ReconcilerFunction: "rec", Group: "orders",
		Lambda: fakeLambda{
			configs: map[string]*lambda.GetFunctionConfigurationOutput{"cons": {}, "rec": {FunctionArn: aws.String("arn:aws:lambda:eu-west-1:111122223333:function:rec")}},
			mappings: map[string][]lambdatypes.EventSourceMappingConfiguration{
				"cons": {{UUID: aws.String("uuid-cons"), EventSourceArn: aws.String("arn:aws:kinesis:eu-west-1:111122223333:stream/s")}},
			},
		},
		EventBridge: fakeEvents{},
		CloudWatch: fakeCloudWatch{alarms: []cwtypes.MetricAlarm{
			{AlarmName: aws.String("dropped"), Namespace: aws.String("AWS/Lambda"), MetricName: aws.String("DroppedEventCount"), Dimensions: []cwtypes.Dimension{dim("EventSourceMappingUUID", "uuid-cons")}},
			{AlarmName: aws.String("dropped-other"), Namespace: aws.String("AWS/Lambda"), MetricName: aws.String("DroppedEventCount"), Dimensions: []cwtypes.Dimension{dim("EventSourceMappingUUID", "uuid-other")}},
		}},
	}
	v, err := cp.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Alarms) != 1 || v.Alarms[0].Name != "dropped" {
		t.Errorf("alarms %+v, want only the one on the consumer mapping's UUID", v.Alarms)
	}
}
