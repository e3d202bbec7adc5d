package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/schema"
)

// awsMetrics are the AWS-emitted metrics an alarm may watch, by namespace, each with the page
// that defines it. An alarm on a metric nobody emits never fires.
var awsMetrics = map[string]map[string]string{
	// Lambda developer guide, "Types of metrics for Lambda functions" (monitoring-metrics-types):
	// invocation metrics Errors, Throttles, DestinationDeliveryFailures ("For asynchronous
	// invocation and supported event source mappings ..."); performance metric IteratorAge.
	"AWS/Lambda": {
		"Errors":                      "monitoring-metrics-types",
		"Throttles":                   "monitoring-metrics-types",
		"DestinationDeliveryFailures": "monitoring-metrics-types",
		"IteratorAge":                 "monitoring-metrics-types",
		// Event source mapping metrics (same page, with MetricsConfig EventCount on the mapping;
		// dimension EventSourceMappingUUID, "Viewing metrics for Lambda functions").
		"PolledEventCount":                        "monitoring-metrics-types",
		"FilteredOutEventCount":                   "monitoring-metrics-types",
		"FailedInvokeEventCount":                  "monitoring-metrics-types",
		"DroppedEventCount":                       "monitoring-metrics-types",
		"OnFailureDestinationDeliveredEventCount": "monitoring-metrics-types",
	},
	// Amazon SQS developer guide, "Available CloudWatch metrics for Amazon SQS".
	"AWS/SQS": {
		"ApproximateNumberOfMessagesVisible": "sqs-available-cloudwatch-metrics",
		"ApproximateAgeOfOldestMessage":      "sqs-available-cloudwatch-metrics",
	},
}

// emittedMetrics returns the names gapless's code emits: every metrics.Metric composite literal
// in the non-test Go files of the module (internal/, functions/), its Name a string literal or a
// string constant of the same package.
func emittedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	names := map[string]bool{}
	for _, top := range []string{"internal", "functions"} {
		pkgs := map[string][]*ast.File{}
		fset := token.NewFileSet()
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, files := range pkgs {
			consts := map[string]string{}
			for _, f := range files {
				ast.Inspect(f, func(n ast.Node) bool {
					if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == len(vs.Values) {
						for i, v := range vs.Values {
							if s, ok := stringLit(v); ok {
								consts[vs.Names[i].Name] = s
							}
						}
					}
					return true
				})
			}
			nameOf := func(e ast.Expr) {
				if s, ok := stringLit(e); ok {
					names[s] = true
				} else if id, ok := e.(*ast.Ident); ok && consts[id.Name] != "" {
					names[consts[id.Name]] = true
				}
			}
			isMetric := func(e ast.Expr) bool {
				sel, ok := e.(*ast.SelectorExpr)
				if !ok {
					return false
				}
				x, ok := sel.X.(*ast.Ident)
				return ok && x.Name == "metrics" && sel.Sel.Name == "Metric"
			}
			fields := func(cl *ast.CompositeLit) {
				for _, el := range cl.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
							nameOf(kv.Value)
						}
					}
				}
			}
			for _, f := range files {
				ast.Inspect(f, func(n ast.Node) bool {
					cl, ok := n.(*ast.CompositeLit)
					if !ok {
						return true
					}
					if isMetric(cl.Type) {
						fields(cl)
					}
					if at, ok := cl.Type.(*ast.ArrayType); ok && isMetric(at.Elt) {
						for _, el := range cl.Elts { // []metrics.Metric{{Name: ...}}: element type elided
							if inner, ok := el.(*ast.CompositeLit); ok && inner.Type == nil {
								fields(inner)
							}
						}
					}
					return true
				})
			}
		}
	}
	return names
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// TestAlarmMetricsAreEmitted: every alarm watches a metric that exists. A Gapless-namespace
// metric must be written by gapless's code (EMF, dimension Group = GroupName); an AWS one must be
// in awsMetrics.
func TestAlarmMetricsAreEmitted(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	emitted := emittedMetrics(t)
	for _, must := range []string{"GapsDetected", "LostToRetention", "VerifiedLagSeconds", "LedgerWriteFailures", "RecordsFailed"} {
		if !emitted[must] {
			t.Fatalf("the source scan did not find metric %s (found %v): the scan is broken", must, slices.Sorted(maps.Keys(emitted)))
		}
	}
	for _, id := range c.resourcesOfType("AWS::CloudWatch::Alarm") {
		ns, name := scalar(c.prop(id, "Namespace")), scalar(c.prop(id, "MetricName"))
		switch {
		case ns == metrics.Namespace:
			if !emitted[name] {
				t.Errorf("%s watches %s/%s, which no gapless code emits", id, ns, name)
			}
			d := c.prop(id, "Dimensions")
			if d == nil || len(d.Content) != 1 || scalar(get(d.Content[0], "Name")) != metrics.DimensionGroup ||
				ref(get(d.Content[0], "Value")) != "GroupName" {
				t.Errorf("%s: a gapless metric carries exactly the dimension %s = !Ref GroupName", id, metrics.DimensionGroup)
			}
		case awsMetrics[ns][name] == "":
			t.Errorf("%s watches %s/%s: not a known AWS metric (add it to awsMetrics with its page)", id, ns, name)
		}
	}
}

// sectionRef is an alarm description's pointer to a section of the runbook.
var sectionRef = regexp.MustCompile(`docs/deploy\.md, "([^"]+)"`)

// TestAlarmDescriptionsNameRealSections: every section of docs/deploy.md an alarm's description
// names ("See docs/deploy.md, \"The verify queue\"") is a heading there, and each alarm is in a
// table of it, so the operator the alarm wakes finds what to do.
func TestAlarmDescriptionsNameRealSections(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, id := range c.resourcesOfType("AWS::CloudWatch::Alarm") {
		for _, m := range sectionRef.FindAllStringSubmatch(scalar(c.prop(id, "AlarmDescription")), -1) {
			if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(m[1]) + `\s*$`).MatchString(doc) {
				t.Errorf("%s points to docs/deploy.md, %q: no such heading", id, m[1])
			}
		}
		if !strings.Contains(doc, "| `"+id+"`") && !strings.Contains(doc, "`"+id+"`, ") && !strings.Contains(doc, ", `"+id+"` |") {
			t.Errorf("%s is in no table of docs/deploy.md", id)
		}
	}
}

// TestAlarmsForSilentFailures: the alarms for failures that are otherwise silent exist and are shaped so they fire.
func TestAlarmsForSilentFailures(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	type want struct {
		namespace, metric, dimTarget, missing string
	}
	for id, w := range map[string]want{
		// The mapping could not deliver on-failure metadata.
		"DestinationDeliveryFailuresAlarm": {"AWS/Lambda", "DestinationDeliveryFailures", "ConsumerFunction", "notBreaching"},
		// Lambda's own count of records the mapping dropped, per mapping (SAM's generated
		// mapping of ConsumerFunction's event Stream).
		"MappingDroppedEventsAlarm": {"AWS/Lambda", "DroppedEventCount", "ConsumerFunctionStream", "notBreaching"},
		// A ledger failure is a partial batch response, not a Lambda error.
		"LedgerWriteFailuresAlarm": {metrics.Namespace, "LedgerWriteFailures", "GroupName", "notBreaching"},
		"RecordsFailedAlarm":       {metrics.Namespace, "RecordsFailed", "GroupName", "notBreaching"},
		"ParkedQueueAgeAlarm":      {"AWS/SQS", "ApproximateAgeOfOldestMessage", "ParkedQueue.QueueName", "notBreaching"},
		// The fan-out: a shard whose walks keep failing, walkers falling behind, refused work.
		"VerifyDeadLetterAlarm":     {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "VerifyDeadLetterQueue.QueueName", "notBreaching"},
		"VerifyQueueAgeAlarm":       {"AWS/SQS", "ApproximateAgeOfOldestMessage", "VerifyQueue.QueueName", "notBreaching"},
		"VerifyMessageRefusedAlarm": {metrics.Namespace, "VerifyMessageRefused", "GroupName", "notBreaching"},
		// Silence is not health: no data means nothing reads or verifies.
		"VerifiedLagAlarm":         {metrics.Namespace, "VerifiedLagSeconds", "GroupName", "breaching"},
		"ConsumerIteratorAgeAlarm": {"AWS/Lambda", "IteratorAge", "ConsumerFunction", "breaching"},
	} {
		t.Run(id, func(t *testing.T) {
			if scalar(get(c.root, "Resources", id, "Type")) != "AWS::CloudWatch::Alarm" {
				t.Fatalf("no alarm %s", id)
			}
			if got := scalar(c.prop(id, "Namespace")) + "/" + scalar(c.prop(id, "MetricName")); got != w.namespace+"/"+w.metric {
				t.Errorf("metric %s, want %s/%s", got, w.namespace, w.metric)
			}
			if d := c.prop(id, "Dimensions"); d == nil || len(d.Content) != 1 || strings.Join(targets(get(d.Content[0], "Value")), ",") != w.dimTarget {
				t.Errorf("dimension value must come from %s", w.dimTarget)
			}
			if got := scalar(c.prop(id, "TreatMissingData")); got != w.missing {
				t.Errorf("TreatMissingData %q, want %q", got, w.missing)
			}
			if get(c.root, "Resources", id, "Condition") != nil {
				t.Errorf("conditional: every deployment needs it")
			}
		})
	}
	// VerifiedLagAlarm breaches on missing data: its window must hold at least two scheduled
	// passes, or a healthy reconciler on the default schedule would alarm.
	m := regexp.MustCompile(`^rate\((\d+) minutes?\)$`).FindStringSubmatch(c.paramDefault("ReconcileSchedule"))
	if m == nil {
		t.Fatalf("ReconcileSchedule default %q: want rate(N minutes)", c.paramDefault("ReconcileSchedule"))
	}
	every, _ := strconv.Atoi(m[1])
	period, _ := strconv.Atoi(scalar(c.prop("VerifiedLagAlarm", "Period")))
	evals, _ := strconv.Atoi(scalar(c.prop("VerifiedLagAlarm", "EvaluationPeriods")))
	if period*evals < 2*every*60 {
		t.Errorf("VerifiedLagAlarm window %ds holds fewer than two passes every %d minutes", period*evals, every)
	}
	// The parked-queue age alarm must leave time to act before SQS deletes the message.
	threshold, err := strconv.Atoi(scalar(c.prop("ParkedQueueAgeAlarm", "Threshold")))
	if err != nil || threshold <= 0 || threshold > schema.ParkedRetentionSeconds/2 {
		t.Errorf("ParkedQueueAgeAlarm threshold %q: want at most half the parked retention (%d s)", scalar(c.prop("ParkedQueueAgeAlarm", "Threshold")), schema.ParkedRetentionSeconds/2)
	}
	// The verify queue's age alarm: a pass's message for a shard can wait for the walk of the
	// previous pass's (one walker per shard, up to the reconciler's timeout) and for a pass to
	// come round again; more than two schedule periods plus a timeout is a backlog.
	verifyAge, err := strconv.Atoi(scalar(c.prop("VerifyQueueAgeAlarm", "Threshold")))
	if want := 2*every*60 + c.functionTimeout("ReconcilerFunction"); err != nil || verifyAge < want {
		t.Errorf("VerifyQueueAgeAlarm threshold %q: want at least two schedule periods plus the reconciler's timeout (%d s)", scalar(c.prop("VerifyQueueAgeAlarm", "Threshold")), want)
	}
	if got := scalar(c.prop("ConsumerErrorsAlarm", "AlarmDescription")); strings.Contains(got, "ledger write error)") || strings.Contains(got, "ledger write error;") {
		t.Errorf("ConsumerErrorsAlarm claims ledger write errors count as Lambda Errors: %s", got)
	}
}
