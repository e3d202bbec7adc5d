package doctor

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// offline runs the checks on template text with parameter overrides.
func offline(t *testing.T, tmpl []byte, over map[string]string) Report {
	t.Helper()
	tp, err := ParseTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Override(over); err != nil {
		t.Fatal(err)
	}
	return Run(FromTemplate(tp, "test", 0))
}

// The real template.yaml, with its defaults and with every samconfig.toml environment, has no
// error-level finding.
func TestRealTemplatePasses(t *testing.T) {
	t.Parallel()
	tmpl := readRepoFile(t, "template.yaml")
	sc, err := ParseSamconfig(readRepoFile(t, "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"default", "dev", "prod"} {
		t.Run(env, func(t *testing.T) {
			over, err := sc.Overrides(env)
			if err != nil {
				t.Fatal(err)
			}
			rep := offline(t, tmpl, over)
			if rep.Errors() > 0 {
				var b bytes.Buffer
				_ = Write(&b, rep)
				t.Fatalf("errors on the real template:\n%s", b.String())
			}
			if rep.Checked != len(Checks) {
				t.Errorf("ran %d checks of %d", rep.Checked, len(Checks))
			}
		})
	}
}

// TestEachFindingOffline breaks the template (its text or a parameter) one way per case and
// asserts that exactly the expected findings appear relative to the real template's.
func TestEachFindingOffline(t *testing.T) {
	t.Parallel()
	tmpl := string(readRepoFile(t, "template.yaml"))
	base := offline(t, []byte(tmpl), nil)
	baseIDs := base.IDs()
	if base.Errors() != 0 {
		t.Fatalf("real template has errors: %v", baseIDs)
	}
	edit := func(old, new string) func(t *testing.T, s string) string {
		return func(t *testing.T, s string) string {
			t.Helper()
			if strings.Count(s, old) != 1 {
				t.Fatalf("template.yaml holds %q %d times, want once", old, strings.Count(s, old))
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	editAll := func(old, new string, n int) func(t *testing.T, s string) string {
		return func(t *testing.T, s string) string {
			t.Helper()
			if strings.Count(s, old) != n {
				t.Fatalf("template.yaml holds %q %d times, want %d", old, strings.Count(s, old), n)
			}
			return strings.ReplaceAll(s, old, new)
		}
	}
	const orders = `{"data": {"kind": ["order"]}}`
	cases := []struct {
		name  string
		edit  func(t *testing.T, s string) string
		over  map[string]string
		added []string // findings beyond the real template's
		gone  []string // findings of the real template that disappear
	}{
		{name: "no ReportBatchItemFailures",
			edit:  edit("FunctionResponseTypes: [ReportBatchItemFailures]\n            # Only when RecordFilter", "# Only when RecordFilter"),
			added: []string{"mapping.report-batch-item-failures"}},
		{name: "no Kinesis event",
			edit:  edit("          Type: Kinesis\n", "          Type: DynamoDB\n"),
			added: []string{"mapping.missing"}, gone: []string{"kpl.unknown"}},
		{name: "infinite retries", over: map[string]string{"MaximumRetryAttempts": "-1"},
			added: []string{"mapping.retries-infinite"}},
		{name: "infinite record age", over: map[string]string{"MaximumRecordAgeSeconds": "-1"},
			added: []string{"mapping.record-age-infinite"}},
		{name: "record age = retention", over: map[string]string{"MaximumRecordAgeSeconds": "86400"},
			added: []string{"mapping.record-age-vs-retention"}},
		{name: "record age over half the retention", over: map[string]string{"MaximumRecordAgeSeconds": "50000"},
			added: []string{"mapping.record-age-over-half-retention"}},
		{name: "no on-failure destination",
			edit:  edit("            DestinationConfig:\n              OnFailure:\n                Destination: !If [FailureToS3, !GetAtt FailureBucket.Arn, !GetAtt FailureQueue.Arn]\n", ""),
			added: []string{"mapping.on-failure-missing"}},
		{name: "SQS destination", over: map[string]string{"OnFailureDestination": "SQS"}},
		{name: "destination the reconciler does not consume", over: map[string]string{"OnFailureDestination": "SQS"},
			edit:  edit("!GetAtt FailureBucket.Arn, !GetAtt FailureQueue.Arn]", "!GetAtt FailureBucket.Arn, !GetAtt FailureDeadLetterQueue.Arn]"),
			added: []string{"mapping.on-failure-not-consumed"}},
		{name: "S3 destination the reconciler may not read (FAILURE_BUCKET)",
			edit:  edit("FAILURE_BUCKET: !If [FailureToS3, !Ref FailureBucket, \"\"]", "FAILURE_BUCKET: \"\""),
			added: []string{"mapping.on-failure-not-consumed"}},
		{name: "S3 destination notifying a queue the reconciler does not consume",
			edit:  edit("          - Queue: !GetAtt FailureQueue.Arn\n", "          - Queue: !GetAtt TargetQueue.Arn\n"),
			added: []string{"mapping.on-failure-not-consumed"}},
		{name: "reconciler without the SQS event",
			edit:  edit("            Queue: !GetAtt FailureQueue.Arn", "            Queue: !GetAtt TargetQueue.Arn"),
			added: []string{"mapping.on-failure-not-consumed"}},
		// The fan-out: VERIFY_QUEUE_URL names a FIFO queue the reconciler consumes.
		{name: "reconciler without the Verify event",
			edit:  edit("            Queue: !GetAtt VerifyQueue.Arn\n", "            Queue: !GetAtt VerifyDeadLetterQueue.Arn\n"),
			added: []string{"verify.queue-not-consumed"}},
		{name: "verify queue not FIFO",
			edit:  edit("      FifoQueue: true\n      ContentBasedDeduplication: false\n", ""),
			added: []string{"verify.queue-not-fifo"}},
		{name: "VERIFY_QUEUE_URL names another queue",
			edit:  edit("          VERIFY_QUEUE_URL: !Ref VerifyQueue\n", "          VERIFY_QUEUE_URL: !Ref TargetQueue\n"),
			added: []string{"verify.queue-not-consumed", "verify.queue-not-fifo"}},
		{name: "no alarm on refused verify messages",
			edit:  edit("      MetricName: VerifyMessageRefused\n", "      MetricName: VerifyMessageRefusedRenamed\n"),
			added: []string{"alarms.missing"}},
		// Without the fan-out, neither the Verify event nor its refusal alarm is needed.
		{name: "no fan-out",
			edit: func(t *testing.T, s string) string {
				s = edit("          VERIFY_QUEUE_URL: !Ref VerifyQueue\n", "")(t, s)
				s = edit("            Queue: !GetAtt VerifyQueue.Arn\n", "            Queue: !GetAtt VerifyDeadLetterQueue.Arn\n")(t, s)
				return edit("      MetricName: VerifyMessageRefused\n", "      MetricName: VerifyMessageRefusedRenamed\n")(t, s)
			}},
		{name: "LATEST", over: map[string]string{"StartingPosition": "LATEST"},
			added: []string{"mapping.latest"}},
		{name: "STARTING_POSITION LATEST on the reconciler only",
			edit:  edit("          STARTING_POSITION: !Ref StartingPosition\n", "          STARTING_POSITION: LATEST\n"),
			added: []string{"mapping.starting-position-mismatch"}},
		{name: "STARTING_POSITION TRIM_HORIZON on the reconciler, LATEST on the mapping", over: map[string]string{"StartingPosition": "LATEST"},
			edit:  edit("          STARTING_POSITION: !Ref StartingPosition\n", "          STARTING_POSITION: TRIM_HORIZON\n"),
			added: []string{"mapping.latest", "mapping.starting-position-mismatch"}},
		{name: "retries below the attempts", over: map[string]string{"MaximumRetryAttempts": "2"},
			added: []string{"mapping.retries-below-attempts"}},
		{name: "ledger TTL shorter than retention + settle", over: map[string]string{"LedgerTTL": "24h15m"},
			added: []string{"ledger.ttl-short"}},
		{name: "longer retention, same ledger TTL", over: map[string]string{"StreamRetentionHours": "192"},
			added: []string{"ledger.ttl-short"}},
		{name: "ledger TTL off",
			edit:  edit("        AttributeName: expiresAt\n        Enabled: true", "        AttributeName: expiresAt\n        Enabled: false"),
			added: []string{"ledger.ttl-off"}},
		{name: "settle below the minimum", over: map[string]string{"SettleAfter": "5m"},
			added: []string{"settle.below-minimum"}},
		{name: "settle window reaches the retention", over: map[string]string{"SettleAfter": "24h", "LedgerTTL": "72h"},
			added: []string{"settle.vs-retention"}},
		{name: "tail reaches the retention", over: map[string]string{"SettleAfter": "12h", "MaximumRecordAgeSeconds": "43200", "LedgerTTL": "72h"},
			added: []string{"settle.vs-retention"}},
		{name: "no schedule",
			edit:  edit("        Schedule:\n          Type: Schedule\n", "        Schedule:\n          Type: ScheduleV2\n"),
			added: []string{"reconciler.schedule-missing"}},
		{name: "schedule disabled",
			edit:  edit("            Schedule: !Ref ReconcileSchedule\n", "            Schedule: !Ref ReconcileSchedule\n            Enabled: false\n"),
			added: []string{"reconciler.schedule-disabled"}},
		{name: "slow schedule", over: map[string]string{"ReconcileSchedule": "rate(1 hour)"},
			added: []string{"reconciler.schedule-slow"}},
		// Lambda's own counts of the mapping: off without MetricsConfig EventCount.
		{name: "no MetricsConfig on the mapping",
			edit:  edit("            MetricsConfig:\n              Metrics: [EventCount]\n", ""),
			added: []string{"mapping.metrics-off"}},
		{name: "MetricsConfig without EventCount",
			edit:  edit("              Metrics: [EventCount]\n", "              Metrics: []\n"),
			added: []string{"mapping.metrics-off"}},
		{name: "no alarm on the mapping's dropped records",
			edit:  edit("      MetricName: DroppedEventCount\n", "      MetricName: DroppedEventCountRenamed\n"),
			added: []string{"alarms.missing"}},
		// A stream whose maximum record size was raised past what one invocation carries.
		{name: "stream maximum record size 10 MiB",
			edit:  edit("      RetentionPeriodHours: !Ref StreamRetentionHours\n", "      RetentionPeriodHours: !Ref StreamRetentionHours\n      MaxRecordSizeInKiB: 10240\n"),
			added: []string{"stream.records-undeliverable"}},
		{name: "stream maximum record size 2 MiB",
			edit: edit("      RetentionPeriodHours: !Ref StreamRetentionHours\n", "      RetentionPeriodHours: !Ref StreamRetentionHours\n      MaxRecordSizeInKiB: 2048\n")},
		{name: "no loss alarm",
			edit:  edit("      MetricName: LostToRetention\n", "      MetricName: LostToRetentionRenamed\n"),
			added: []string{"alarms.missing"}},
		// Records that expired before the reconciler verified them: no loss, but no proof.
		{name: "no alarm on records expired unverified",
			edit:  edit("      MetricName: ExpiredUnverified\n", "      MetricName: ExpiredUnverifiedRenamed\n"),
			added: []string{"alarms.missing"}},
		// A refusal of forged or stale input is never applied: only its alarm reports it.
		{name: "no alarm on refused parked messages",
			edit:  edit("      MetricName: ParkedRefused\n", "      MetricName: ParkedRefusedRenamed\n"),
			added: []string{"alarms.missing"}},
		{name: "no alarm on refused failure-queue messages",
			edit:  edit("      MetricName: FailureMessageRefused\n", "      MetricName: FailureMessageRefusedRenamed\n"),
			added: []string{"alarms.missing"}},
		{name: "no alarm on records of another stream",
			edit:  edit("      MetricName: RecordsOfAnotherStream\n", "      MetricName: RecordsOfAnotherStreamRenamed\n"),
			added: []string{"alarms.missing"}},
		{name: "alarm e-mail set", over: map[string]string{"AlarmEmail": "ops@example.com"},
			gone: []string{"alarms.no-actions"}},
		{name: "no parallelism", over: map[string]string{"ParallelizationFactor": "1"},
			gone: []string{"kpl.unknown"}},
		// The record filter: one parameter sets the mapping and both functions alike.
		{name: "record filter set", over: map[string]string{"RecordFilter": orders}},
		{name: "record filter on the consumer only",
			edit:  edit("          RECORD_FILTER: !Ref RecordFilter\n      Events:\n        Stream:", "          RECORD_FILTER: '"+orders+"'\n      Events:\n        Stream:"),
			added: []string{"filter.mismatch"}},
		{name: "record filter not on the mapping", over: map[string]string{"RecordFilter": orders},
			edit:  edit("            FilterCriteria: !If\n", "            FilterCriteriaOff: !If\n"),
			added: []string{"filter.mismatch"}},
		{name: "record filter not on the reconciler", over: map[string]string{"RecordFilter": orders},
			edit:  edit("          RECORD_FILTER: !Ref RecordFilter\n      Events:\n        Schedule:", "          RECORD_FILTER: ''\n      Events:\n        Schedule:"),
			added: []string{"filter.mismatch"}},
		{name: "record filter the same but written differently", over: map[string]string{"RecordFilter": orders},
			edit: edit("          RECORD_FILTER: !Ref RecordFilter\n      Events:\n        Schedule:", "          RECORD_FILTER: '{\"data\":{\"kind\":[\"order\"]}}'\n      Events:\n        Schedule:")},
		{name: "record filter internal/filter cannot parse", over: map[string]string{"RecordFilter": `{"data": {"kind": [{"wildcard": "ord*"}]}}`},
			added: []string{"filter.invalid"}},
		// ON_PARK: one parameter gives both functions the same value.
		{name: "hold-key", over: map[string]string{"OnPark": "hold-key"}},
		{name: "ON_PARK hold-key on the reconciler only",
			edit:  edit("          MAX_RECORD_ATTEMPTS: !Ref MaxRecordAttempts\n          ON_PARK: !Ref OnPark\n          MAX_CONCURRENCY: !Ref MaxConcurrency\n          DEDUPE_KEY: !Ref DedupeKey\n          LEDGER_TTL: !Ref LedgerTTL\n          LOG_PAYLOADS: \"false\"\n          # The mapping's filter", "          MAX_RECORD_ATTEMPTS: !Ref MaxRecordAttempts\n          ON_PARK: hold-key\n          MAX_CONCURRENCY: !Ref MaxConcurrency\n          DEDUPE_KEY: !Ref DedupeKey\n          LEDGER_TTL: !Ref LedgerTTL\n          LOG_PAYLOADS: \"false\"\n          # The mapping's filter"),
			added: []string{"onpark.mismatch"}},
		{name: "ON_PARK neither continue nor hold-key",
			edit:  editAll("          ON_PARK: !Ref OnPark\n", "          ON_PARK: hold\n", 2),
			added: []string{"onpark.invalid"}},
		{name: "hold-key with more attempts than the mapping's retries", over: map[string]string{"OnPark": "hold-key", "MaximumRetryAttempts": "4"},
			added: []string{"onpark.hold-key-retries"}},
		{name: "continue with more attempts than the mapping's retries", over: map[string]string{"MaximumRetryAttempts": "4"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := tmpl
			if c.edit != nil {
				s = c.edit(t, s)
			}
			got := offline(t, []byte(s), c.over).IDs()
			want := slices.DeleteFunc(slices.Clone(baseIDs), func(id string) bool { return slices.Contains(c.gone, id) })
			want = append(want, c.added...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
				t.Errorf("findings %v, want %v", got, want)
			}
		})
	}
}

// TestKPLAggregation: aggregated producers with ParallelizationFactor > 1 is an error.
func TestKPLAggregation(t *testing.T) {
	t.Parallel()
	tp, err := ParseTemplate(readRepoFile(t, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kpl, pf string
		want    []string
	}{
		{"yes", "4", []string{"kpl.parallelization"}},
		{"yes", "1", nil},
		{"no", "4", nil},
		{"", "4", []string{"kpl.unknown"}},
	} {
		if err := tp.Override(map[string]string{"ParallelizationFactor": c.pf}); err != nil {
			t.Fatal(err)
		}
		d := FromTemplate(tp, "test", 0)
		d.KPLAggregation = c.kpl
		rep := Run(d)
		var got []string
		for _, id := range rep.IDs() {
			if strings.HasPrefix(id, "kpl.") {
				got = append(got, id)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("kpl=%q pf=%s: %v, want %v", c.kpl, c.pf, got, c.want)
		}
	}
}

// TestEveryCheckHasACase: each check id appears in a case of the package's tests (above, the
// live tests, the fan-out's), so a new check cannot arrive untested.
func TestEveryCheckHasACase(t *testing.T) {
	t.Parallel()
	tests, err := filepath.Glob("*_test.go")
	if err != nil || len(tests) < 3 {
		t.Fatalf("test files %v: %v", tests, err)
	}
	var src string
	for _, f := range tests {
		src += string(readRepoFile(t, filepath.Join("internal", "doctor", f)))
	}
	ids := map[string]bool{}
	for _, c := range Checks {
		if ids[c.ID] {
			t.Errorf("check id %s twice", c.ID)
		}
		ids[c.ID] = true
		if c.Fix == "" || c.Eval == nil || (c.Level != Error && c.Level != Warning) {
			t.Errorf("check %s: needs a level, a fix and an Eval", c.ID)
		}
		if strings.Count(src, `"`+c.ID+`"`) == 0 {
			t.Errorf("check %s has no test case", c.ID)
		}
	}
}

func TestSchedulePeriod(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]time.Duration{
		"rate(5 minutes)": 5 * time.Minute, "rate(1 minute)": time.Minute, "rate(2 hours)": 2 * time.Hour,
		"rate(1 day)": 24 * time.Hour, "cron(0 * * * ? *)": 0, "": 0,
	} {
		got, ok := schedulePeriod(&Schedule{Expression: expr})
		if got != want || ok != (want > 0) {
			t.Errorf("%q: %v %v, want %v", expr, got, ok, want)
		}
	}
}
