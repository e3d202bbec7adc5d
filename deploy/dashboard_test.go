package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/metrics"
)

// awsDashboardMetrics are the AWS metrics the dashboard may show besides the alarms' ones.
var awsDashboardMetrics = map[string]map[string]string{
	// Amazon DynamoDB developer guide, "DynamoDB Metrics and dimensions" (metrics-dimensions):
	// ReadThrottleEvents, WriteThrottleEvents by TableName (on-demand tables throttle too).
	"AWS/DynamoDB": {"ReadThrottleEvents": "metrics-dimensions", "WriteThrottleEvents": "metrics-dimensions"},
}

var subRef = regexp.MustCompile(`\$\{([^}!]+)\}`)

// dashboardBody returns the Dashboard's DashboardBody as JSON: its !Sub string with every
// ${X} replaced by "X" (the names it substitutes are returned too).
func dashboardBody(t *testing.T, c *cfn) (body map[string]any, subs []string) {
	t.Helper()
	n := c.prop("Dashboard", "DashboardBody")
	fn, arg := intrinsic(n)
	if fn != "Fn::Sub" || arg.Kind != yaml.ScalarNode {
		t.Fatalf("DashboardBody must be a !Sub string")
	}
	text := subRef.ReplaceAllStringFunc(arg.Value, func(m string) string {
		name := subRef.FindStringSubmatch(m)[1]
		subs = append(subs, name)
		return name
	})
	if strings.Contains(text, "${") {
		t.Fatalf("DashboardBody holds a ${ that is not a substitution")
	}
	if err := json.Unmarshal([]byte(text), &body); err != nil {
		t.Fatalf("DashboardBody is not JSON once substituted: %v", err)
	}
	return body, subs
}

var searchMetric = regexp.MustCompile(`^SEARCH\('\{([^}]*)\} MetricName="([^"]+)" ([A-Za-z]+)="([^"]+)"',`)

// TestDashboard: the dashboard exists, is named in the outputs, substitutes only the stack's
// parameters, resources and pseudo parameters, and every widget's metric is one gapless emits
// (namespace Gapless, dimension Group = GroupName, per shard also ShardId) or a documented AWS
// metric; each series the runbook names is on it.
func TestDashboard(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if ids := c.resourcesOfType("AWS::CloudWatch::Dashboard"); !slices.Equal(ids, []string{"Dashboard"}) {
		t.Fatalf("dashboards %v, want Dashboard", ids)
	}
	if ref(get(c.root, "Outputs", "DashboardName", "Value")) != "Dashboard" {
		t.Errorf("Outputs.DashboardName must be !Ref Dashboard")
	}
	body, subs := dashboardBody(t, c)
	// SAM generates a function's event-source mapping as <function><event> (the Kinesis and SQS
	// events): the dashboard may name it.
	generated := map[string]bool{}
	for _, fn := range c.resourcesOfType("AWS::Serverless::Function") {
		for _, ev := range keys(c.prop(fn, "Events")) {
			generated[fn+ev] = true
		}
	}
	for _, s := range subs {
		base, _, _ := strings.Cut(s, ".")
		if !strings.HasPrefix(s, "AWS::") && get(c.root, "Parameters", base) == nil && get(c.root, "Resources", base) == nil && !generated[base] {
			t.Errorf("DashboardBody substitutes ${%s}: no such parameter or resource", s)
		}
	}
	emitted := emittedMetrics(t)
	shown := map[string]bool{}
	widgets, _ := body["widgets"].([]any)
	if len(widgets) == 0 {
		t.Fatal("no widgets")
	}
	for i, w := range widgets {
		props, _ := w.(map[string]any)["properties"].(map[string]any)
		rows, _ := props["metrics"].([]any)
		if len(rows) == 0 {
			t.Errorf("widget %d has no metrics", i)
		}
		var prev []any
		for _, r := range rows {
			row, _ := r.([]any)
			if len(row) == 1 { // [{"expression": ...}]
				expr, _ := row[0].(map[string]any)["expression"].(string)
				m := searchMetric.FindStringSubmatch(expr)
				if m == nil {
					t.Errorf("widget %d: expression %q is not a SEARCH this test reads", i, expr)
					continue
				}
				schema := strings.Split(m[1], ",")
				if schema[0] != metrics.Namespace || !slices.Equal(schema[1:], []string{metrics.DimensionGroup, metrics.DimensionShard}) ||
					!emitted[m[2]] || m[3] != metrics.DimensionGroup || m[4] != "GroupName" {
					t.Errorf("widget %d: SEARCH %q: want {%s,%s,%s} on an emitted metric with %s=${GroupName}", i, expr,
						metrics.Namespace, metrics.DimensionGroup, metrics.DimensionShard, metrics.DimensionGroup)
				}
				shown[m[2]+"/"+metrics.DimensionShard] = true
				continue
			}
			var fields []string
			for j, f := range row {
				s, ok := f.(string)
				if !ok {
					break // the options object
				}
				if s == "." && j < len(prev) { // "." repeats the previous row's field
					s, _ = prev[j].(string)
				}
				fields = append(fields, s)
			}
			prev = row
			if len(fields) < 2 {
				t.Errorf("widget %d: row %v has no namespace and name", i, row)
				continue
			}
			ns, name := fields[0], fields[1]
			shown[name] = true
			switch {
			case ns == metrics.Namespace:
				if !emitted[name] {
					t.Errorf("widget %d shows %s/%s, which no gapless code emits", i, ns, name)
				}
				if len(fields) != 4 || fields[2] != metrics.DimensionGroup || fields[3] != "GroupName" {
					t.Errorf("widget %d: %s must carry exactly %s = ${GroupName}, has %v", i, name, metrics.DimensionGroup, fields[2:])
				}
			case awsMetrics[ns][name] == "" && awsDashboardMetrics[ns][name] == "":
				t.Errorf("widget %d shows %s/%s: not a known AWS metric (add it with its page)", i, ns, name)
			}
		}
	}
	// The queue ages an operator watches besides their alarms: the failure queue (ranges the
	// mapping gave up on) and the verify queue (the fan-out's backlog).
	for _, q := range []string{"FailureQueue.QueueName", "VerifyQueue.QueueName"} {
		if !slices.Contains(subs, q) {
			t.Errorf("the dashboard does not show %s", q)
		}
	}
	for _, want := range []string{"RecordsProcessed", "DuplicatesSkipped", "RecordsFailed", "RecordsParked", "GapsDetected",
		"GapsReplayed", "VerifiedLagSeconds/" + metrics.DimensionShard, "LostToRetention", "IteratorAge", "ReadThrottleEvents", "WriteThrottleEvents",
		"PolledEventCount", "FilteredOutEventCount", "FailedInvokeEventCount", "DroppedEventCount", "OnFailureDestinationDeliveredEventCount"} {
		if !shown[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}
