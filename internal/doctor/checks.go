package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/schema"
)

// Check is one rule. Eval returns what is wrong ("" when the deployment passes, or when what it
// needs is unknown).
type Check struct {
	ID    string
	Level Level
	Fix   string
	Eval  func(d *Deployment) string
}

// MaxSchedulePeriod is the longest reconciler schedule period VerifiedLagAlarm tolerates: it
// treats 15 minutes without a pass as breaching, so two passes must fit in that window.
const MaxSchedulePeriod = 7 * time.Minute

// RequiredAlarms are the metrics a deployment must alarm on (namespace/metric): loss, records
// that expired before the reconciler verified them (processed, but the proof is gone), an
// unverified backlog or a silent reconciler, a mapping that stopped reading, on-failure
// metadata that never reached the failure queue, ledger writes that fail, and every refusal of
// a forged or stale input (a parked message the ledger does not confirm, a failure-queue
// message not of the mapping, records of another stream): refused input is never applied, so
// only its alarm tells anyone it arrived.
var RequiredAlarms = []string{
	metrics.Namespace + "/LostToRetention",
	metrics.Namespace + "/ExpiredUnverified",
	metrics.Namespace + "/VerifiedLagSeconds",
	metrics.Namespace + "/LedgerWriteFailures",
	metrics.Namespace + "/ParkedRefused",
	metrics.Namespace + "/FailureMessageRefused",
	metrics.Namespace + "/RecordsOfAnotherStream",
	"AWS/Lambda/IteratorAge",
	"AWS/Lambda/DestinationDeliveryFailures",
	"AWS/Lambda/DroppedEventCount",
}

// MetricsEventCount is the MetricsConfig metric group that makes Lambda emit a Kinesis
// mapping's own counts: PolledEventCount, FilteredOutEventCount, InvokedEventCount,
// FailedInvokeEventCount, DroppedEventCount, OnFailureDestinationDeliveredEventCount (Lambda
// developer guide, "Types of metrics for Lambda functions", Event source mapping metrics).
const MetricsEventCount = "EventCount"

// Checks are every rule, in report order within a level. Ids are stable: tests and operators
// refer to them.
var Checks = []Check{
	{
		ID: "mapping.missing", Level: Error,
		Fix: "give the consumer function an event of Type: Kinesis on the stream (gapless's template.yaml: ConsumerFunction Events.Stream), or create its event-source mapping",
		Eval: func(d *Deployment) string {
			if d.Mapping == nil {
				return "the consumer has no Kinesis event-source mapping: nothing reads the stream"
			}
			return ""
		},
	},
	{
		ID: "mapping.report-batch-item-failures", Level: Error,
		Fix: "set FunctionResponseTypes: [ReportBatchItemFailures] on the mapping",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if !m.ReportBatchItemFailures {
				return "the mapping lacks FunctionResponseTypes ReportBatchItemFailures: Lambda ignores the consumer's partial batch response and treats a batch naming failed records as a success, so those records are skipped"
			}
			return ""
		}),
	},
	{
		ID: "mapping.retries-infinite", Level: Error,
		Fix: "set MaximumRetryAttempts to a finite value (template parameter MaximumRetryAttempts, default 10): what the mapping gives up on goes to the failure queue and the reconciler replays it",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if m.MaximumRetryAttempts < 0 {
				return "MaximumRetryAttempts is -1 (infinite): one record that kills every invocation blocks its shard until it expires"
			}
			return ""
		}),
	},
	{
		ID: "mapping.record-age-infinite", Level: Error,
		Fix: "set MaximumRecordAgeInSeconds (template parameter MaximumRecordAgeSeconds, default 21600) well under the stream's retention",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if m.MaximumRecordAge < 0 {
				return "MaximumRecordAgeInSeconds is -1 (infinite): nothing bounds how long a failing batch holds its lane"
			}
			return ""
		}),
	},
	{
		ID: "mapping.record-age-vs-retention", Level: Error,
		Fix: "lower MaximumRecordAgeSeconds to at most half the stream's retention, or raise the retention",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.MaximumRecordAge > 0 && d.Retention > 0 && m.MaximumRecordAge >= d.Retention {
				return fmt.Sprintf("MaximumRecordAgeInSeconds %s is not below the stream's retention %s: records expire before the mapping gives up on them, and the reconciler cannot re-read what it hands over",
					short(m.MaximumRecordAge), short(d.Retention))
			}
			return ""
		}),
	},
	{
		ID: "mapping.on-failure-missing", Level: Error,
		Fix: "set DestinationConfig.OnFailure.Destination to the failure queue (template.yaml: !GetAtt FailureQueue.Arn)",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if m.OnFailure == "" {
				return "the mapping has no on-failure destination: batches it gives up on are known to nobody but the reconciler's scheduled pass"
			}
			return ""
		}),
	},
	{
		ID: "mapping.on-failure-not-consumed", Level: Error,
		Fix: "give the reconciler function an event of Type: SQS on the mapping's on-failure queue (gapless's template.yaml: ReconcilerFunction Events.FailureQueue), or point the destination at the queue it consumes",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.OnFailureBucket != "" {
				return s3DestinationNotConsumed(m, d)
			}
			if m.OnFailure != "" && !slices.Contains(d.ReconcilerQueues, m.OnFailure) {
				return fmt.Sprintf("the on-failure destination %s is not consumed by the reconciler (it reads %v): ranges the mapping gives up on wait there until the scheduled pass finds them",
					m.OnFailure, d.ReconcilerQueues)
			}
			return ""
		}),
	},
	{
		ID: "mapping.disabled", Level: Error,
		Fix: "enable the mapping: aws lambda update-event-source-mapping --uuid <uuid> --enabled",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			switch m.State {
			case "", "Enabled", "Enabling", "Creating", "Updating":
				return ""
			}
			return "the mapping is " + m.State + ": nothing reads the stream, and records expire at the end of its retention"
		}),
	},
	{
		ID: "mapping.metrics-off", Level: Error,
		Fix: "set MetricsConfig: {Metrics: [EventCount]} in the Properties of the consumer function's Kinesis event (live: aws lambda update-event-source-mapping --uuid <uuid> --metrics-config Metrics=EventCount)",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if !slices.Contains(m.Metrics, MetricsEventCount) {
				return "the mapping has no MetricsConfig EventCount: Lambda emits none of its own counts (DroppedEventCount among them), so nothing alarms on records the mapping itself dropped"
			}
			return ""
		}),
	},
	{
		ID: "ledger.ttl-short", Level: Error,
		Fix: "raise LedgerTTL (LEDGER_TTL) to at least the stream's retention plus SettleAfter",
		Eval: func(d *Deployment) string {
			if d.LedgerTTL <= 0 || d.Retention <= 0 {
				return ""
			}
			if need := d.Retention + d.SettleAfter; d.LedgerTTL < need {
				return fmt.Sprintf("LEDGER_TTL %s is shorter than the stream's retention %s plus SettleAfter %s: a record still in the stream is forgotten by the ledger, so a replay or a replaced mapping processes it again",
					short(d.LedgerTTL), short(d.Retention), short(d.SettleAfter))
			}
			return ""
		},
	},
	{
		ID: "settle.below-minimum", Level: Error,
		Fix: "raise SettleAfter (SETTLE_AFTER) to at least config.MinSettle (docs/deploy.md, the two timing rules)",
		Eval: func(d *Deployment) string {
			if d.Mapping == nil || d.SettleAfter <= 0 || d.ConsumerTimeout <= 0 || d.MaxRecordAttempts <= 0 {
				return ""
			}
			minimum := config.MinSettle(d.ConsumerTimeout, d.Mapping.BatchingWindow, d.MaxRecordAttempts, d.Mapping.MaximumRetryAttempts)
			if d.SettleAfter < minimum {
				return fmt.Sprintf("SETTLE_AFTER %s is below %s, the time a record can still be in flight in another lane: the reconciler replays records that were merely late", short(d.SettleAfter), short(minimum))
			}
			return ""
		},
	},
	{
		ID: "settle.vs-retention", Level: Error,
		Fix: "shorten SettleAfter and the schedule, lower MaximumRecordAgeSeconds, or raise the stream's retention",
		Eval: func(d *Deployment) string {
			if d.Retention <= 0 || d.SettleAfter <= 0 {
				return ""
			}
			period, _ := schedulePeriod(d.Schedule)
			if d.SettleAfter+period >= d.Retention {
				return fmt.Sprintf("SETTLE_AFTER %s plus a schedule period %s reaches the stream's retention %s: records expire before the reconciler may judge them", short(d.SettleAfter), short(period), short(d.Retention))
			}
			if d.Mapping != nil {
				tail := reconcile.TailAfter(d.Mapping.MaximumRecordAge, d.SettleAfter)
				if tail+period >= d.Retention {
					return fmt.Sprintf("records past the checkpoint are verified once older than %s (min(MaximumRecordAge, 12h) + SettleAfter); with a schedule period %s that reaches the stream's retention %s, so a quiet shard's tail expires unverified", short(tail), short(period), short(d.Retention))
				}
			}
			return ""
		},
	},
	{
		ID: "reconciler.schedule-missing", Level: Error,
		Fix: "give the reconciler a Schedule event (template parameter ReconcileSchedule, default rate(5 minutes))",
		Eval: func(d *Deployment) string {
			if d.Schedule == nil {
				return "the reconciler has no schedule: gaps behind the checkpoint are never looked for, and the verified watermark never moves"
			}
			return ""
		},
	},
	{
		ID: "reconciler.schedule-disabled", Level: Error,
		Fix: "enable the reconciler's EventBridge rule: aws events enable-rule --name <rule>",
		Eval: func(d *Deployment) string {
			if d.Schedule != nil && !d.Schedule.Enabled {
				return "the reconciler's schedule " + d.Schedule.Expression + " is disabled: gaps are not looked for"
			}
			return ""
		},
	},
	{
		ID: "reconciler.not-running", Level: Error,
		Fix: "check the reconciler's errors and logs (ReconcilerErrorsAlarm), its schedule and its permissions; gapless status shows every watermark",
		Eval: func(d *Deployment) string {
			if d.LastPass.IsZero() && d.LastCheckpoint.IsZero() {
				return ""
			}
			period, ok := schedulePeriod(d.Schedule)
			if !ok {
				period = MaxSchedulePeriod
			}
			allowed := d.SettleAfter + 3*period
			if !d.LastCheckpoint.IsZero() && d.LastCheckpoint.Sub(d.LastPass) > allowed && d.Now.Sub(d.LastPass) > allowed {
				last := "never"
				if !d.LastPass.IsZero() {
					last = d.LastPass.UTC().Format(time.RFC3339)
				}
				return fmt.Sprintf("the consumer moved a checkpoint at %s, but the reconciler last moved a watermark %s: longer than SettleAfter plus three schedule periods (%s)",
					d.LastCheckpoint.UTC().Format(time.RFC3339), last, short(allowed))
			}
			return ""
		},
	},
	{
		ID: "alarms.missing", Level: Error,
		Fix: "add an AWS::CloudWatch::Alarm on each <namespace>/<metric> named, with an alarm action (gapless's template.yaml has one per metric, e.g. LostToRetentionAlarm on Gapless/LostToRetention, MappingDroppedEventsAlarm on AWS/Lambda/DroppedEventCount, ParkedRefusedAlarm on Gapless/ParkedRefused)",
		Eval: func(d *Deployment) string {
			if !d.AlarmsKnown {
				return ""
			}
			var missing []string
			required := RequiredAlarms
			if fanOut(d) != "" {
				required = append(slices.Clip(required), FanOutAlarms...)
			}
			for _, want := range required {
				if !slices.ContainsFunc(d.Alarms, func(a Alarm) bool { return a.Namespace+"/"+a.Metric == want }) {
					missing = append(missing, want)
				}
			}
			if len(missing) > 0 {
				return "no alarm on " + strings.Join(missing, ", ") + ": a loss, a stalled consumer or reconciler, or refused forged or stale input would go unnoticed"
			}
			return ""
		},
	},
	{
		ID: "mapping.latest", Level: Warning,
		Fix: "prefer StartingPosition TRIM_HORIZON; if you keep LATEST, run the reconciler before a replaced mapping's skipped records expire",
		Eval: mappingCheck(func(m *Mapping, _ *Deployment) string {
			if m.StartingPosition == Latest {
				return "StartingPosition LATEST: a new or replaced mapping skips every record written while no mapping existed; only the reconciler replays them"
			}
			return ""
		}),
	},
	{
		ID: "mapping.record-age-over-half-retention", Level: Warning,
		Fix: "lower MaximumRecordAgeSeconds to at most half the stream's retention",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.MaximumRecordAge > 0 && d.Retention > 0 && m.MaximumRecordAge < d.Retention && m.MaximumRecordAge > d.Retention/2 {
				return fmt.Sprintf("MaximumRecordAgeInSeconds %s is more than half the retention %s: the reconciler has less than %s to re-read what the mapping gives up on",
					short(m.MaximumRecordAge), short(d.Retention), short(d.Retention-m.MaximumRecordAge))
			}
			return ""
		}),
	},
	{
		ID: "mapping.retries-below-attempts", Level: Warning,
		Fix: "set MaximumRetryAttempts to at least MaxRecordAttempts - 1 (the default 10 covers MaxRecordAttempts 5)",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.MaximumRetryAttempts >= 0 && d.MaxRecordAttempts > 0 && m.MaximumRetryAttempts+1 < d.MaxRecordAttempts {
				return fmt.Sprintf("MaximumRetryAttempts %d gives a record at most %d attempts, fewer than MAX_RECORD_ATTEMPTS %d: the mapping gives poison records to the reconciler before the consumer can park them",
					m.MaximumRetryAttempts, m.MaximumRetryAttempts+1, d.MaxRecordAttempts)
			}
			return ""
		}),
	},
	{
		ID: "ledger.ttl-off", Level: Warning,
		Fix: "enable TTL on the ledger table on attribute " + schema.TTLAttribute + " (the ledger table's TimeToLiveSpecification)",
		Eval: func(d *Deployment) string {
			if !d.LedgerTTLKnown || d.LedgerTTLAttribute == schema.TTLAttribute {
				return ""
			}
			if d.LedgerTTLAttribute == "" {
				return "TTL is off on the ledger table: entries are never deleted (gapless ignores expired ones, so nothing is lost, but the table grows forever)"
			}
			return "the ledger table's TTL deletes by " + d.LedgerTTLAttribute + ", gapless writes " + schema.TTLAttribute + ": entries are never deleted"
		},
	},
	{
		ID: "reconciler.schedule-slow", Level: Warning,
		Fix: "run the reconciler at least every 7 minutes (ReconcileSchedule rate(5 minutes))",
		Eval: func(d *Deployment) string {
			if p, ok := schedulePeriod(d.Schedule); ok && p > MaxSchedulePeriod {
				return "the reconciler runs every " + short(p) + ": VerifiedLagAlarm treats 15 minutes without a pass as breaching and will fire"
			}
			return ""
		},
	},
	{
		ID: "alarms.no-actions", Level: Warning,
		Fix: "set AlarmEmail (template parameter) or add alarm actions: an alarm nobody hears protects nothing",
		Eval: func(d *Deployment) string {
			var silent []string
			for _, a := range d.Alarms {
				if a.Actions == 0 {
					silent = append(silent, a.Name)
				}
			}
			if len(silent) > 0 && len(silent) == len(d.Alarms) {
				return fmt.Sprintf("none of the %d alarms has an action: they change state and nobody hears it", len(d.Alarms))
			}
			if len(silent) > 0 {
				return fmt.Sprintf("%d of %d alarms have no actions (%s)", len(silent), len(d.Alarms), strings.Join(silent, ", "))
			}
			return ""
		},
	},
	{
		ID: "stream.records-undeliverable", Level: Warning,
		Fix: "keep the stream's maximum record size (MaxRecordSizeInKiB) at most what one invocation carries, or store large payloads in S3 and put a reference on the stream",
		Eval: func(d *Deployment) string {
			if !reconcile.Undeliverable(d.MaxRecordSize) {
				return ""
			}
			return fmt.Sprintf("the stream takes records of up to %d KiB, but one Lambda invocation (6 MB, the data base64-encoded) carries at most %d KiB of record data: the mapping never delivers a larger record; the reconciler's scheduled pass replays it through Process (or parks it with its payload) when it reads it, up to a schedule period late",
				d.MaxRecordSize/1024, reconcile.MaxDeliverableData/1024)
		},
	},
	{
		ID: "kpl.parallelization", Level: Error,
		Fix: "set ParallelizationFactor 1 while producers aggregate with the KPL, or stop aggregating",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.ParallelizationFactor > 1 && d.KPLAggregation == "yes" {
				return fmt.Sprintf("producers write KPL aggregated records and ParallelizationFactor is %d: Lambda spreads aggregates over lanes by the aggregate's partition key, so the order of user records per user key is not kept", m.ParallelizationFactor)
			}
			return ""
		}),
	},
	{
		ID: "kpl.unknown", Level: Warning,
		Fix: "tell doctor: --kpl yes|no (yes with ParallelizationFactor > 1 is an error)",
		Eval: mappingCheck(func(m *Mapping, d *Deployment) string {
			if m.ParallelizationFactor > 1 && d.KPLAggregation == "" {
				return fmt.Sprintf("ParallelizationFactor is %d and it is not known whether producers aggregate with the KPL: if they do, order per user key is not kept", m.ParallelizationFactor)
			}
			return ""
		}),
	},
}

// mappingCheck runs f only when there is a mapping.
func mappingCheck(f func(m *Mapping, d *Deployment) string) func(d *Deployment) string {
	return func(d *Deployment) string {
		if d.Mapping == nil {
			return ""
		}
		return f(d.Mapping, d)
	}
}

var rateExpr = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// schedulePeriod is a rate(...) schedule's period; ok false for none or cron.
func schedulePeriod(s *Schedule) (time.Duration, bool) {
	if s == nil {
		return 0, false
	}
	m := rateExpr.FindStringSubmatch(strings.TrimSpace(s.Expression))
	if m == nil {
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
	return time.Duration(n) * unit, true
}

// s3DestinationNotConsumed judges an S3 bucket as the on-failure destination: the reconciler
// reads its objects only from the bucket FAILURE_BUCKET names, and learns of them through the
// bucket's ObjectCreated notifications to a queue it consumes (checked offline; live, the
// bucket's notification configuration is not read).
func s3DestinationNotConsumed(m *Mapping, d *Deployment) string {
	if d.ReconcilerEnv != nil && d.ReconcilerEnv[config.EnvFailureBucket] != m.OnFailureBucket {
		return fmt.Sprintf("the on-failure destination is bucket %s but the reconciler's %s is %q: it refuses the bucket's objects, and ranges the mapping gives up on wait until the scheduled pass finds them",
			m.OnFailureBucket, config.EnvFailureBucket, d.ReconcilerEnv[config.EnvFailureBucket])
	}
	if m.OnFailureNotifies == nil {
		return ""
	}
	for _, q := range m.OnFailureNotifies {
		if slices.Contains(d.ReconcilerQueues, q) {
			return ""
		}
	}
	return fmt.Sprintf("the on-failure bucket %s notifies %v, none of which the reconciler consumes (it reads %v): ranges the mapping gives up on wait there until the scheduled pass finds them",
		m.OnFailureBucket, m.OnFailureNotifies, d.ReconcilerQueues)
}
