// Package doctor checks a gapless deployment against what gapless needs to lose nothing, and
// says line by line what is wrong and how to fix it.
//
// A deployment is described by a Deployment, read either offline from template.yaml (with a
// samconfig.toml environment's parameter overrides: FromTemplate) or live from a deployed stack
// through small interfaces this package declares (Collect). Both feed the same checks (Checks),
// each with an id, a level (error or warning), what is wrong and how to fix it. An error-level
// finding means records can be lost, blocked or left unverified; a warning means they cannot,
// but something an operator relies on (an alarm e-mail, a cheap replacement) is missing.
package doctor

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Level is a finding's severity.
type Level string

// Levels.
const (
	Error   Level = "error"
	Warning Level = "warning"
)

// Starting positions of the mapping.
const (
	TrimHorizon = "TRIM_HORIZON"
	Latest      = "LATEST"
)

// Mapping is the consumer's Kinesis event-source mapping, named after
// CreateEventSourceMapping's parameters.
type Mapping struct {
	StartingPosition        string
	ReportBatchItemFailures bool
	MaximumRetryAttempts    int           // -1 = infinite
	MaximumRecordAge        time.Duration // negative = infinite (-1 in the API)
	ParallelizationFactor   int
	BatchingWindow          time.Duration
	// OnFailure is the destination's identity: an ARN live, "Resource.Arn" offline; "" = none.
	OnFailure string
	// OnFailureBucket is the destination's bucket when it is an S3 bucket (live: its name;
	// offline: its resource id); OnFailureNotifies are the queues its ObjectCreated
	// notifications go to (as ReconcilerQueues; offline only, nil when unknown).
	OnFailureBucket   string
	OnFailureNotifies []string
	// State is the mapping's state live ("Enabled", "Disabled", …); "" offline.
	State string
	// Filters are the patterns of the mapping's FilterCriteria (none = every record is sent).
	// FiltersUnknown: they could not be read (live: Lambda could not decrypt them).
	Filters        []string
	FiltersUnknown bool
	// Metrics are the metric groups of the mapping's MetricsConfig ("EventCount" makes Lambda
	// emit the mapping's own counts, DroppedEventCount among them); none = off.
	Metrics []string
	// EnhancedFanOut: the mapping reads through a registered stream consumer (live: its event
	// source is a consumer ARN; offline: an AWS::Kinesis::StreamConsumer), with read
	// throughput of its own instead of the shard's shared 2 MB/s.
	EnhancedFanOut bool
}

// Schedule is the reconciler's scheduled trigger.
type Schedule struct {
	Expression string // rate(...) or cron(...)
	Enabled    bool
}

// Alarm is one CloudWatch alarm.
type Alarm struct {
	Name, Namespace, Metric string
	Actions                 int // AlarmActions
}

// Deployment is everything the checks look at. Unknown values are zero and skip their checks
// (Notes says which).
type Deployment struct {
	// Source names what was read ("template.yaml, samconfig.toml [prod]", "stack gapless").
	Source string
	// Mapping is nil when no Kinesis event-source mapping of the consumer was found.
	Mapping *Mapping
	// Retention is the stream's retention period (0 = unknown).
	Retention time.Duration
	// MaxRecordSize is the stream's maximum record size in bytes (MaxRecordSizeInKiB; 0 =
	// unknown).
	MaxRecordSize int
	// ConsumerTimeout is the consumer function's timeout.
	ConsumerTimeout time.Duration
	// MaxRecordAttempts, LedgerTTL and SettleAfter are the functions' MAX_RECORD_ATTEMPTS,
	// LEDGER_TTL and SETTLE_AFTER (0 = unset or unreadable).
	MaxRecordAttempts int
	LedgerTTL         time.Duration
	SettleAfter       time.Duration
	// LedgerTTLAttribute is the attribute the ledger table's TTL deletes by ("" = TTL off);
	// LedgerTTLKnown is false when it could not be read.
	LedgerTTLAttribute string
	LedgerTTLKnown     bool
	// ReconcilerQueues are the identities (as Mapping.OnFailure) of the queues the reconciler
	// has an SQS event-source mapping on.
	ReconcilerQueues []string
	// VerifyQueueFIFO says whether the queue the reconciler's VERIFY_QUEUE_URL names is FIFO,
	// offline (the template's FifoQueue); nil = unknown or no fan-out. Live, a URL says it
	// (.fifo).
	VerifyQueueFIFO *bool
	// Ingest is the stream's busiest shard's write rate (live, from CloudWatch; nil = unknown).
	Ingest *Ingest
	// Schedule is the reconciler's schedule; nil = none.
	Schedule *Schedule
	// LastPass is the newest reconciler watermark move (live; zero = unknown or never).
	LastPass time.Time
	// LastCheckpoint is the newest checkpoint move of the consumer (live; zero = unknown).
	LastCheckpoint time.Time
	// Now is when the deployment was read (live checks of LastPass).
	Now time.Time
	// Alarms are the stack's alarms; AlarmsKnown is false when they could not be read.
	Alarms      []Alarm
	AlarmsKnown bool
	// KPLAggregation says whether producers write KPL aggregated records: "yes", "no" or ""
	// (unknown).
	KPLAggregation string
	// ConsumerEnv and ReconcilerEnv are the functions' environment variables (nil = the
	// function was not found or not read: the checks comparing them leave it out).
	ConsumerEnv, ReconcilerEnv map[string]string
	// Notes are facts worth printing that are not findings (what was assumed or unknown).
	Notes []string
}

// Finding is one failed check.
type Finding struct {
	ID      string
	Level   Level
	Message string // what is wrong, with the values
	Fix     string // how to fix it
}

// Report is the outcome of Run.
type Report struct {
	Source   string
	Findings []Finding
	Notes    []string
	Checked  int // checks run
}

// Errors counts the error-level findings.
func (r Report) Errors() int { return r.count(Error) }

// Warnings counts the warning-level findings.
func (r Report) Warnings() int { return r.count(Warning) }

func (r Report) count(l Level) int {
	n := 0
	for _, f := range r.Findings {
		if f.Level == l {
			n++
		}
	}
	return n
}

// Has reports whether a finding with the given id is in the report.
func (r Report) Has(id string) bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.ID == id })
}

// IDs lists the findings' ids in report order.
func (r Report) IDs() []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		out = append(out, f.ID)
	}
	return out
}

// Run applies every check to d: errors first, then warnings, each in Checks order.
func Run(d Deployment) Report {
	rep := Report{Source: d.Source, Notes: append([]string(nil), d.Notes...)}
	for _, c := range Checks {
		rep.Checked++
		if msg := c.Eval(&d); msg != "" {
			rep.Findings = append(rep.Findings, Finding{ID: c.ID, Level: c.Level, Message: msg, Fix: c.Fix})
		}
	}
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int {
		if a.Level == b.Level {
			return 0
		}
		if a.Level == Error {
			return -1
		}
		return 1
	})
	rep.Notes = append(rep.Notes, replacementNote(d))
	return rep
}

// replacementNote says what a replacement of the mapping would do with this starting position.
func replacementNote(d Deployment) string {
	if d.Mapping == nil {
		return "no mapping: nothing to say about its replacement"
	}
	ret := "the stream's retention"
	if d.Retention > 0 {
		ret = "the stream's retention (" + short(d.Retention) + ")"
	}
	switch d.Mapping.StartingPosition {
	case TrimHorizon:
		return "a replacement of the mapping (StreamArn, StartingPosition or EnhancedFanOut changed) re-reads " + ret +
			" from TRIM_HORIZON: the ledger skips what was done, at the cost of reading the backlog"
	case Latest:
		return "a replacement of the mapping (StreamArn, StartingPosition or EnhancedFanOut changed) starts at LATEST and " +
			"skips every record written while no mapping exists; only the reconciler replays them, once older than SettleAfter"
	}
	return "starting position " + d.Mapping.StartingPosition
}

// Write prints the report: one line per finding (level, id, what is wrong; then how to fix it),
// the notes, and a summary line.
func Write(w io.Writer, rep Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "gapless doctor: %s\n", rep.Source)
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "%-7s %s: %s\n        fix: %s\n", strings.ToUpper(string(f.Level)), f.ID, f.Message, f.Fix)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note    %s\n", n)
	}
	verdict := "ok"
	if rep.Errors() > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%s: %d checks, %s, %s\n", verdict, rep.Checked, plural(rep.Errors(), "error"), plural(rep.Warnings(), "warning"))
	_, err := io.WriteString(w, b.String())
	return err
}

// plural is "1 error", "2 errors".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// short formats a duration without zero units: 24h, 30m, 7m6s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
