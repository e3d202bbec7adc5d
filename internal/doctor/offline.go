package doctor

import (
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/config"
)

// DefaultRetention is Kinesis's default retention period, assumed for a stream the template
// does not create (its retention is only known live).
const DefaultRetention = 24 * time.Hour

// FromTemplate describes the deployment template t makes with its current parameter values
// (defaults plus Override). The consumer is the function with a Kinesis event; the reconciler
// the function whose environment has SETTLE_AFTER. A stream the template does not create has
// an unknown retention: retention, when positive, stands for it (else DefaultRetention, noted).
func FromTemplate(t *Template, source string, retention time.Duration) Deployment {
	d := Deployment{Source: source}
	fns := t.Resources("AWS::Serverless::Function")
	consumer, reconciler := "", ""
	for _, fn := range fns {
		if !t.Exists(fn) {
			continue
		}
		if consumer == "" && len(t.Events(fn, "Kinesis")) > 0 {
			consumer = fn
		}
		if reconciler == "" && t.Prop(fn, "Environment", "Variables", config.EnvSettleAfter) != nil {
			reconciler = fn
		}
	}
	if consumer != "" {
		ev := t.Events(consumer, "Kinesis")[0]
		m := &Mapping{
			StartingPosition:      val(t, get(ev, "StartingPosition")),
			MaximumRetryAttempts:  intOr(val(t, get(ev, "MaximumRetryAttempts")), -1), // Lambda's default: infinite
			ParallelizationFactor: intOr(val(t, get(ev, "ParallelizationFactor")), 1),
			BatchingWindow:        time.Duration(intOr(val(t, get(ev, "MaximumBatchingWindowInSeconds")), 0)) * time.Second,
			OnFailure:             val(t, get(ev, "DestinationConfig", "OnFailure", "Destination")),
		}
		m.MaximumRecordAge = -1
		if age := intOr(val(t, get(ev, "MaximumRecordAgeInSeconds")), -1); age >= 0 {
			m.MaximumRecordAge = time.Duration(age) * time.Second
		}
		if id, _, _ := strings.Cut(m.OnFailure, "."); t.Type(id) == "AWS::S3::Bucket" {
			m.OnFailureBucket = id
			qs := t.chosen(t.Prop(id, "NotificationConfiguration", "QueueConfigurations"))
			if qs != nil {
				for _, q := range qs.Content {
					if strings.HasPrefix(val(t, get(q, "Event")), "s3:ObjectCreated:") {
						m.OnFailureNotifies = append(m.OnFailureNotifies, val(t, get(q, "Queue")))
					}
				}
			}
		}
		m.ReportBatchItemFailures = slices.Contains(t.List(get(ev, "FunctionResponseTypes")), "ReportBatchItemFailures")
		m.Filters = filterPatterns(t, get(ev, "FilterCriteria"))
		m.Metrics = t.List(get(ev, "MetricsConfig", "Metrics"))
		if id, _, _ := strings.Cut(val(t, get(ev, "Stream")), "."); t.Type(id) == "AWS::Kinesis::StreamConsumer" {
			m.EnhancedFanOut = true
		}
		d.Mapping = m
		d.ConsumerTimeout = time.Duration(intOr(val(t, t.Prop(consumer, "Timeout")), intOr(scalar(get(t.root, "Globals", "Function", "Timeout")), 3))) * time.Second
		d.Retention = streamRetention(t, val(t, get(ev, "Stream")))
		d.MaxRecordSize = streamMaxRecordSize(t, val(t, get(ev, "Stream")))
		env := func(name string) string { return val(t, t.Prop(consumer, "Environment", "Variables", name)) }
		d.LedgerTTL = durationOr(env(config.EnvLedgerTTL), config.DefaultLedgerTTL)
		d.MaxRecordAttempts = intOr(env(config.EnvMaxRecordAttempts), config.DefaultMaxRecordAttempts)
	}
	if consumer != "" {
		d.ConsumerEnv = functionEnv(t, consumer)
	}
	if reconciler != "" {
		d.ReconcilerEnv = functionEnv(t, reconciler)
	}
	if d.Retention == 0 {
		if retention > 0 {
			d.Retention = retention
			d.Notes = append(d.Notes, "the stream is not created by the template: retention "+short(retention)+" as given")
		} else {
			d.Retention = DefaultRetention
			d.Notes = append(d.Notes, "the stream is not created by the template: its retention is assumed to be Kinesis's default 24h (give --retention, or run doctor against the stack)")
		}
	}
	if reconciler != "" {
		env := func(name string) string { return val(t, t.Prop(reconciler, "Environment", "Variables", name)) }
		d.SettleAfter = durationOr(env(config.EnvSettleAfter), config.DefaultSettleAfter)
		if d.LedgerTTL == 0 {
			d.LedgerTTL = durationOr(env(config.EnvLedgerTTL), config.DefaultLedgerTTL)
		}
		for _, ev := range t.Events(reconciler, "SQS") {
			if q := val(t, get(ev, "Queue")); q != "" {
				d.ReconcilerQueues = append(d.ReconcilerQueues, q)
			}
		}
		// The fan-out's queue, when VERIFY_QUEUE_URL is !Ref of a queue of the template.
		if q := env(config.EnvVerifyQueueURL); t.Type(q) == "AWS::SQS::Queue" {
			fifo := val(t, t.Prop(q, "FifoQueue")) == "true"
			d.VerifyQueueFIFO = &fifo
		}
		for _, ev := range t.Events(reconciler, "Schedule") {
			enabled := true
			if e := val(t, get(ev, "Enabled")); e == "false" {
				enabled = false
			}
			if st := val(t, get(ev, "State")); st != "" && st != "ENABLED" {
				enabled = false
			}
			d.Schedule = &Schedule{Expression: val(t, get(ev, "Schedule")), Enabled: enabled}
			break
		}
	}
	// The ledger: the table the functions' DEDUPE_TABLE names.
	ledger := ""
	for _, fn := range []string{consumer, reconciler} {
		if fn != "" && ledger == "" {
			ledger = val(t, t.Prop(fn, "Environment", "Variables", config.EnvDedupeTable))
		}
	}
	if ledger != "" && t.Type(ledger) == "AWS::DynamoDB::Table" {
		d.LedgerTTLKnown = true
		ttl := t.Prop(ledger, "TimeToLiveSpecification")
		if val(t, get(ttl, "Enabled")) == "true" {
			d.LedgerTTLAttribute = val(t, get(ttl, "AttributeName"))
		}
	}
	d.AlarmsKnown = true
	for _, id := range t.Resources("AWS::CloudWatch::Alarm") {
		if !t.Exists(id) {
			continue
		}
		d.Alarms = append(d.Alarms, Alarm{
			Name: id, Namespace: val(t, t.Prop(id, "Namespace")), Metric: val(t, t.Prop(id, "MetricName")),
			Actions: len(t.List(t.Prop(id, "AlarmActions"))),
		})
	}
	return d
}

// streamRetention follows the mapping's event source to a stream the template creates and
// returns its retention; 0 when the stream is not the template's.
func streamRetention(t *Template, source string) time.Duration {
	id, _, _ := strings.Cut(source, ".")
	if t.Type(id) == "AWS::Kinesis::StreamConsumer" {
		id, _, _ = strings.Cut(val(t, t.Prop(id, "StreamARN")), ".")
	}
	if t.Type(id) != "AWS::Kinesis::Stream" {
		return 0
	}
	return time.Duration(intOr(val(t, t.Prop(id, "RetentionPeriodHours")), 24)) * time.Hour
}

// streamMaxRecordSize is the maximum record size in bytes of a stream the template creates
// (MaxRecordSizeInKiB, Kinesis's default 1024 when absent); 0 when the stream is not the
// template's.
func streamMaxRecordSize(t *Template, source string) int {
	id, _, _ := strings.Cut(source, ".")
	if t.Type(id) == "AWS::Kinesis::StreamConsumer" {
		id, _, _ = strings.Cut(val(t, t.Prop(id, "StreamARN")), ".")
	}
	if t.Type(id) != "AWS::Kinesis::Stream" {
		return 0
	}
	return intOr(val(t, t.Prop(id, "MaxRecordSizeInKiB")), 1024) * 1024
}

// functionEnv is a function's environment variables, resolved for this deployment (a variable
// that resolves to nothing, !Ref AWS::NoValue, is left out).
func functionEnv(t *Template, fn string) map[string]string {
	vars := t.Prop(fn, "Environment", "Variables")
	env := map[string]string{}
	for _, k := range keys(vars) {
		if v, ok := t.Value(get(vars, k)); ok {
			env[k] = v
		}
	}
	return env
}

// filterPatterns resolves a FilterCriteria node (or an !If choosing one) to its Filters'
// patterns.
func filterPatterns(t *Template, n *yaml.Node) []string {
	n = t.chosen(n)
	if n == nil || ref(n) == "AWS::NoValue" {
		return nil
	}
	var out []string
	fs := get(n, "Filters")
	if fs == nil || fs.Kind != yaml.SequenceNode {
		return nil
	}
	for _, f := range fs.Content {
		if p := val(t, get(f, "Pattern")); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// val is a node's resolved value, "" when absent.
func val(t *Template, n *yaml.Node) string {
	v, _ := t.Value(n)
	return v
}

func intOr(s string, def int) int {
	if n, ok := atoi(s); ok {
		return n
	}
	return def
}

func durationOr(s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}
