package deploy

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"gopkg.in/yaml.v3"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/process"
)

// The parameter names and defaults other code relies on (the local event-source mapping reads
// these defaults from template.yaml).
var wantParameterDefaults = map[string]string{
	"StreamArn":                  "",
	"StreamShardCount":           "4",
	"StreamRetentionHours":       "24",
	"GroupName":                  "gapless",
	"BatchSize":                  "100",
	"BatchingWindowSeconds":      "1",
	"ParallelizationFactor":      "4",
	"MaximumRetryAttempts":       "10",
	"MaximumRecordAgeSeconds":    "21600",
	"BisectBatchOnFunctionError": "true",
	"StartingPosition":           "TRIM_HORIZON",
	"ConsumerTimeoutSeconds":     "60",
	"MaxRecordAttempts":          "5",
	"OnPark":                     "continue",
	"MaxConcurrency":             "16",
	"ReconcileSchedule":          "rate(5 minutes)",
	"SettleAfter":                "30m",
	"LedgerTTL":                  "192h",
	"AlarmEmail":                 "",
	"TableDeletionProtection":    "true",
	"TargetQueueFifo":            "false",
	"DedupeKey":                  "",
	"VerifyConcurrency":          "5",
}

func TestParameterDefaults(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	for _, name := range slices.Sorted(maps.Keys(wantParameterDefaults)) {
		if got, want := c.paramDefault(name), wantParameterDefaults[name]; got != want {
			t.Errorf("parameter %s: Default %q, want %q", name, got, want)
		}
	}
	// Defaults the code also has must be the same values.
	if got := c.paramDefaultInt("MaxRecordAttempts"); got != config.DefaultMaxRecordAttempts {
		t.Errorf("MaxRecordAttempts default %d, config.DefaultMaxRecordAttempts %d", got, config.DefaultMaxRecordAttempts)
	}
	if got := c.paramDefaultInt("MaxConcurrency"); got != config.DefaultMaxConcurrency {
		t.Errorf("MaxConcurrency default %d, config.DefaultMaxConcurrency %d", got, config.DefaultMaxConcurrency)
	}
	if got := c.paramDefaultInt("MaximumRetryAttempts"); got != config.DefaultMappingRetryAttempts {
		t.Errorf("MaximumRetryAttempts default %d, config.DefaultMappingRetryAttempts %d", got, config.DefaultMappingRetryAttempts)
	}
	if got := time.Duration(c.paramDefaultInt("MaximumRecordAgeSeconds")) * time.Second; got != config.DefaultMappingMaxRecordAge {
		t.Errorf("MaximumRecordAgeSeconds default %v, config.DefaultMappingMaxRecordAge %v", got, config.DefaultMappingMaxRecordAge)
	}
	for name, want := range map[string]time.Duration{"SettleAfter": config.DefaultSettleAfter, "LedgerTTL": config.DefaultLedgerTTL} {
		got, err := time.ParseDuration(c.paramDefault(name))
		if err != nil || got != want {
			t.Errorf("%s default %q (%v), config default %v", name, c.paramDefault(name), err, want)
		}
	}
}

// settings are the parameter values a deployment runs with.
type settings map[string]string

func (s settings) duration(t *testing.T, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s[name])
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s[name], err)
	}
	return d
}

func (s settings) int(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(s[name])
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s[name], err)
	}
	return n
}

func (c *cfn) defaults() settings {
	s := settings{}
	for _, name := range keys(get(c.root, "Parameters")) {
		s[name] = c.paramDefault(name)
	}
	return s
}

// checkTiming asserts the settle window and ledger TTL rules of internal/config for one set of
// parameter values.
func checkTiming(t *testing.T, s settings) {
	t.Helper()
	settle := s.duration(t, "SettleAfter")
	minSettle := config.MinSettle(
		time.Duration(s.int(t, "ConsumerTimeoutSeconds"))*time.Second,
		time.Duration(s.int(t, "BatchingWindowSeconds"))*time.Second,
		s.int(t, "MaxRecordAttempts"),
		s.int(t, "MaximumRetryAttempts"),
	)
	if settle < minSettle {
		t.Errorf("SettleAfter %v < config.MinSettle %v", settle, minSettle)
	}
	ttl := s.duration(t, "LedgerTTL")
	retention := time.Duration(s.int(t, "StreamRetentionHours")) * time.Hour
	if ttl < retention+settle {
		t.Errorf("LedgerTTL %v < StreamRetentionHours %v + SettleAfter %v", ttl, retention, settle)
	}
	// The mapping gives up instead of blocking, and early enough that the reconciler has at
	// least half the retention left to re-read what it gave up on (docs/deploy.md).
	if n := s.int(t, "MaximumRetryAttempts"); n < 0 {
		t.Errorf("MaximumRetryAttempts %d: a record that kills every invocation blocks its shard until it expires", n)
	}
	switch age := s.int(t, "MaximumRecordAgeSeconds"); {
	case age == -1:
		t.Errorf("MaximumRecordAgeSeconds -1: no bound on how long one record holds its shard")
	case age < 60:
		t.Errorf("MaximumRecordAgeSeconds %d: Lambda accepts -1 or 60-604800", age)
	case time.Duration(age)*time.Second > retention/2:
		t.Errorf("MaximumRecordAgeSeconds %d is more than half of StreamRetentionHours %v", age, retention)
	}
}

func TestSettleWindowCoversMinSettle(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	s := c.defaults()
	checkTiming(t, s)
	// The description quotes the minimum for the defaults; keep it honest.
	minimum := config.MinSettle(
		time.Duration(s.int(t, "ConsumerTimeoutSeconds"))*time.Second,
		time.Duration(s.int(t, "BatchingWindowSeconds"))*time.Second,
		s.int(t, "MaxRecordAttempts"), s.int(t, "MaximumRetryAttempts"))
	if desc := scalar(get(c.param("SettleAfter"), "Description")); !strings.Contains(desc, minimum.String()+" for the defaults") {
		t.Errorf("SettleAfter description should say %q: %s", minimum.String()+" for the defaults", desc)
	}
}

// The environment each function must get, as the targets of each value (see targets).
var (
	commonEnv = map[string][]string{
		config.EnvGroup:             {"GroupName"},
		config.EnvCheckpointTable:   {"CheckpointTable"},
		config.EnvDedupeTable:       {"LedgerTable"},
		config.EnvParkedQueueURL:    {"ParkedQueue"},
		config.EnvTargetQueueURL:    {"TargetQueue"},
		config.EnvPayloadBucket:     {"PayloadBucket"},
		config.EnvMaxRecordAttempts: {"MaxRecordAttempts"},
		config.EnvOnPark:            {"OnPark"},
		config.EnvMaxConcurrency:    {"MaxConcurrency"},
		config.EnvDedupeKey:         {"DedupeKey"},
		config.EnvLedgerTTL:         {"LedgerTTL"},
		config.EnvLogPayloads:       {"=false"},
		config.EnvRecordFilter:      {"RecordFilter"}, // the mapping's FilterCriteria (filter_test.go)
	}
	wantEnv = map[string]map[string][]string{
		"ConsumerFunction": with(commonEnv, map[string][]string{
			// optional for the consumer: records of another stream are rejected, naming both
			config.EnvStreamName: {"Stream", "StreamArn"},
			// the same stream by ARN: records of a same-named stream elsewhere are refused
			config.EnvStreamARN: {"Stream.Arn", "StreamArn"},
		}),
		"ReconcilerFunction": with(commonEnv, map[string][]string{
			// the created stream's name, or the name part of StreamArn
			config.EnvStreamName: {"Stream", "StreamArn"},
			// the stream's ARN: Kinesis calls name it so, as a stream in another account requires
			config.EnvStreamARN:   {"Stream.Arn", "StreamArn"},
			config.EnvSettleAfter: {"SettleAfter"},
			// the same parameter as the mapping's MaximumRecordAgeInSeconds: the tail bound
			config.EnvMaxRecordAge: {"MaximumRecordAgeSeconds"},
			// the same parameter as the mapping's StartingPosition: the scope of a lineage the
			// mapping never checkpointed
			config.EnvStartingPosition: {"StartingPosition"},
			// failure-queue messages of another function are refused; ranges replay one lane
			config.EnvConsumerFunction:      {"ConsumerFunction.Arn"},
			config.EnvParallelizationFactor: {"ParallelizationFactor"},
			// the S3 on-failure destination, the only bucket the reconciler reads objects
			// from ("" with the SQS destination)
			config.EnvFailureBucket: {"=", "FailureBucket"},
			// the fan-out's FIFO work queue, which the reconciler also consumes (Events.Verify)
			config.EnvVerifyQueueURL: {"VerifyQueue"},
		}),
	}
)

func with(base, extra map[string][]string) map[string][]string {
	m := maps.Clone(base)
	maps.Copy(m, extra)
	return m
}

func (c *cfn) env(fn string) map[string]*yaml.Node {
	vars := c.prop(fn, "Environment", "Variables")
	m := map[string]*yaml.Node{}
	for _, k := range keys(vars) {
		m[k] = get(vars, k)
	}
	if g := get(c.root, "Globals", "Function", "Environment"); g != nil {
		c.t.Errorf("Globals sets Environment: keep each function's variables in one place")
	}
	return m
}

func TestFunctionEnvironment(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	required := map[string][]string{
		"ConsumerFunction":   config.ConsumerRequired,
		"ReconcilerFunction": config.ReconcilerRequired,
	}
	for fn, want := range wantEnv {
		t.Run(fn, func(t *testing.T) {
			env := c.env(fn)
			for _, name := range required[fn] {
				if env[name] == nil {
					t.Errorf("required %s not set", name)
				}
			}
			for _, name := range slices.Sorted(maps.Keys(env)) {
				w, ok := want[name]
				if !ok {
					t.Errorf("unexpected variable %s", name)
					continue
				}
				if got := targets(env[name]); !slices.Equal(got, w) {
					t.Errorf("%s = %v, want %v", name, got, w)
				}
			}
			for name := range want {
				if env[name] == nil {
					t.Errorf("%s not set", name)
				}
			}
		})
	}
}

// TestDefaultsLoad feeds each function's environment, with every parameter at its default and
// every resource given a placeholder, to the config loaders the mains use.
func TestDefaultsLoad(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	defaults := c.defaults()
	resolve := func(fn string) map[string]string {
		out := map[string]string{}
		for name, v := range c.env(fn) {
			alts := alternatives(v)
			if len(alts) == 0 {
				t.Fatalf("%s: %s has no value", fn, name)
			}
			switch p := ref(alts[0]); {
			case scalar(alts[0]) != "" || alts[0].Tag == "!!str":
				out[name] = alts[0].Value
			case p != "" && get(c.root, "Parameters", p) != nil:
				out[name] = defaults[p]
			case name == config.EnvStreamARN: // the ARN of the stream named by STREAM_NAME
				out[name] = "arn:aws:kinesis:us-east-1:111122223333:stream/placeholder-" + strings.ReplaceAll(strings.ToLower(config.EnvStreamName), "_", "-")
			case p != "" && scalar(get(c.root, "Resources", p, "Type")) == "AWS::SQS::Queue":
				// !Ref of a queue is its URL; a FIFO queue's name ends in .fifo.
				out[name] = "https://sqs.us-east-1.amazonaws.com/111122223333/placeholder-" + strings.ToLower(p)
				if scalar(c.prop(p, "FifoQueue")) == "true" {
					out[name] += ".fifo"
				}
			default: // a resource: table name, queue URL, stream name
				out[name] = "placeholder-" + strings.ReplaceAll(strings.ToLower(name), "_", "-") // a valid bucket name too
			}
		}
		return out
	}
	consumerEnv := resolve("ConsumerFunction")
	cons, err := config.LoadConsumer(func(k string) string { return consumerEnv[k] })
	if err != nil {
		t.Fatalf("consumer config with template defaults: %v", err)
	}
	reconcilerEnv := resolve("ReconcilerFunction")
	rec, err := config.LoadReconciler(func(k string) string { return reconcilerEnv[k] })
	if err != nil {
		t.Fatalf("reconciler config with template defaults: %v", err)
	}
	for _, com := range []config.Common{cons.Common, rec.Common} {
		if com.Group != defaults["GroupName"] || com.LogPayloads || com.DedupeKey != "" ||
			com.MaxRecordAttempts != defaults.int(t, "MaxRecordAttempts") || com.LedgerTTL != defaults.duration(t, "LedgerTTL") {
			t.Errorf("loaded %+v, want the template defaults", com)
		}
	}
	if rec.SettleAfter != defaults.duration(t, "SettleAfter") {
		t.Errorf("SettleAfter loaded %v, default %s", rec.SettleAfter, defaults["SettleAfter"])
	}
	if rec.VerifyQueueURL == "" {
		t.Errorf("VERIFY_QUEUE_URL not loaded: the template's reconciler fans out")
	}
}

func TestParameterPatternsMatchCode(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	pattern := func(name string) *regexp.Regexp {
		p := scalar(get(c.param(name), "AllowedPattern"))
		if p == "" {
			t.Fatalf("parameter %s has no AllowedPattern", name)
		}
		return regexp.MustCompile(p)
	}
	group := pattern("GroupName")
	for _, g := range []string{"gapless", "orders-v2", "a.b:c_d", "", "has space", "a|b", "ü", strings.Repeat("g", 256), strings.Repeat("g", 257)} {
		codeOK := recordid.Shard{Group: g, Stream: "s", ShardID: "s"}.Validate() == nil
		if group.MatchString(g) != codeOK {
			t.Errorf("GroupName %q: template pattern accepts=%v, recordid accepts=%v", g, group.MatchString(g), codeOK)
		}
	}
	for _, name := range []string{"SettleAfter", "LedgerTTL"} {
		re := pattern(name)
		for _, v := range []string{"30m", "192h", "1h30m", "90s", "1.5h", "250ms", "", "30", "-1h", "1d", "h", "30 m"} {
			d, err := time.ParseDuration(v)
			codeOK := err == nil && d > 0
			if re.MatchString(v) != codeOK {
				t.Errorf("%s %q: template pattern accepts=%v, time.ParseDuration>0 accepts=%v", name, v, re.MatchString(v), codeOK)
			}
		}
	}
	dedupe := pattern("DedupeKey")
	for _, v := range []string{"", "id", "order.id", "a.b.c", ".id", "id.", "a..b"} {
		codeOK := true
		if _, err := config.LoadConsumer(func(k string) string {
			return map[string]string{config.EnvGroup: "g", config.EnvCheckpointTable: "c", config.EnvDedupeTable: "d",
				config.EnvParkedQueueURL: "p", config.EnvTargetQueueURL: "t", config.EnvPayloadBucket: "payloads", config.EnvDedupeKey: v}[k]
		}); err != nil {
			codeOK = false
		}
		if dedupe.MatchString(v) != codeOK {
			t.Errorf("DedupeKey %q: template pattern accepts=%v, config accepts=%v", v, dedupe.MatchString(v), codeOK)
		}
	}
}

func TestTablesMatchSchema(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	for id, def := range map[string]schema.Table{
		"CheckpointTable": schema.CheckpointTable("x"),
		"LedgerTable":     schema.LedgerTable("x"),
	} {
		t.Run(id, func(t *testing.T) {
			in := def.CreateTableInput()
			var wantAttrs, gotAttrs, wantKeys, gotKeys []string
			for _, a := range in.AttributeDefinitions {
				wantAttrs = append(wantAttrs, aws.ToString(a.AttributeName)+":"+string(a.AttributeType))
			}
			for _, k := range in.KeySchema {
				wantKeys = append(wantKeys, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
			}
			for _, a := range c.prop(id, "AttributeDefinitions").Content {
				gotAttrs = append(gotAttrs, scalar(get(a, "AttributeName"))+":"+scalar(get(a, "AttributeType")))
			}
			for _, k := range c.prop(id, "KeySchema").Content {
				gotKeys = append(gotKeys, scalar(get(k, "AttributeName"))+":"+scalar(get(k, "KeyType")))
			}
			slices.Sort(wantAttrs)
			slices.Sort(gotAttrs)
			if !slices.Equal(gotAttrs, wantAttrs) {
				t.Errorf("AttributeDefinitions %v, schema %v", gotAttrs, wantAttrs)
			}
			if !slices.Equal(gotKeys, wantKeys) { // order matters: HASH first
				t.Errorf("KeySchema %v, schema %v", gotKeys, wantKeys)
			}
			if got := scalar(c.prop(id, "BillingMode")); got != string(in.BillingMode) {
				t.Errorf("BillingMode %q, schema %q", got, in.BillingMode)
			}
			ttl := c.prop(id, "TimeToLiveSpecification")
			if got := scalar(get(ttl, "AttributeName")); got != def.TTLAttribute {
				t.Errorf("TTL attribute %q, schema %q", got, def.TTLAttribute)
			}
			if def.TTLAttribute != "" && scalar(get(ttl, "Enabled")) != "true" {
				t.Errorf("TTL not enabled")
			}
			if scalar(c.prop(id, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled")) != "true" {
				t.Errorf("point-in-time recovery not enabled")
			}
			if got := c.paramOf(c.prop(id, "DeletionProtectionEnabled")); got != "TableDeletionProtection" {
				t.Errorf("DeletionProtectionEnabled comes from %q, want parameter TableDeletionProtection", got)
			}
		})
	}
	if schema.LedgerTable("x").TTLAttribute != schema.TTLAttribute {
		t.Errorf("schema.LedgerTable TTL %q != schema.TTLAttribute %q", schema.LedgerTable("x").TTLAttribute, schema.TTLAttribute)
	}
}

// TestPayloadBucket: the claim-check bucket for records too large for an SQS message (SSE, no public access,
// TLS only, kept on delete, objects outliving every queue whose messages name them) and the
// 1 MiB queues the code's inline limits assume.
func TestPayloadBucket(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if ids := c.resourcesOfType("AWS::S3::Bucket"); !slices.Equal(ids, []string{"FailureBucket", "PayloadBucket"}) {
		t.Fatalf("buckets %v, want FailureBucket and PayloadBucket", ids)
	}
	b := c.resource("PayloadBucket")
	for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
		if scalar(get(b, k)) != "Retain" {
			t.Errorf("PayloadBucket %s %q, want Retain: it can hold the only copy of a parked payload", k, scalar(get(b, k)))
		}
	}
	sse := get(c.prop("PayloadBucket", "BucketEncryption", "ServerSideEncryptionConfiguration").Content[0], "ServerSideEncryptionByDefault", "SSEAlgorithm")
	if v := scalar(sse); v != "AES256" && v != "aws:kms" {
		t.Errorf("PayloadBucket SSEAlgorithm %q", v)
	}
	for _, k := range []string{"BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"} {
		if scalar(c.prop("PayloadBucket", "PublicAccessBlockConfiguration", k)) != "true" {
			t.Errorf("PayloadBucket %s is not true", k)
		}
	}
	var expire int
	for _, r := range c.prop("PayloadBucket", "LifecycleConfiguration", "Rules").Content {
		if scalar(get(r, "Status")) != "Enabled" || get(r, "Prefix") != nil || get(r, "Filter") != nil {
			t.Errorf("lifecycle rule %q: want enabled, over the whole bucket", scalar(get(r, "Id")))
		}
		if n, err := strconv.Atoi(scalar(get(r, "ExpirationInDays"))); err == nil {
			expire = n
		}
	}
	if expire != schema.PayloadRetentionDays {
		t.Errorf("objects expire after %d days, schema.PayloadRetentionDays %d", expire, schema.PayloadRetentionDays)
	}
	for _, q := range []string{"ParkedQueue", "TargetQueue", "TargetDeadLetterQueue"} {
		ret, err := strconv.Atoi(scalar(c.prop(q, "MessageRetentionPeriod")))
		if err != nil || expire*24*3600 <= ret {
			t.Errorf("%s keeps messages %ds: payload objects (%d days) must outlive them", q, ret, expire)
		}
		if got := scalar(c.prop(q, "MaximumMessageSize")); got != strconv.Itoa(park.DefaultMaxMessageBytes) || park.DefaultMaxMessageBytes != process.DefaultMaxMessageBytes {
			t.Errorf("%s MaximumMessageSize %q, the code sends up to %d inline", q, got, park.DefaultMaxMessageBytes)
		}
	}
	var tls bool
	for _, st := range get(c.prop("PayloadBucketPolicy", "PolicyDocument"), "Statement").Content {
		tls = tls || scalar(get(st, "Effect")) == "Deny" && scalar(get(st, "Condition", "Bool", "aws:SecureTransport")) == "false"
	}
	if ref(c.prop("PayloadBucketPolicy", "Bucket")) != "PayloadBucket" || !tls {
		t.Errorf("PayloadBucketPolicy must deny requests without TLS on PayloadBucket")
	}
}

func TestQueues(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if got := scalar(c.prop("ParkedQueue", "MessageRetentionPeriod")); got != strconv.Itoa(schema.ParkedRetentionSeconds) {
		t.Errorf("ParkedQueue retention %s, schema.ParkedRetentionSeconds %d", got, schema.ParkedRetentionSeconds)
	}
	for _, id := range c.resourcesOfType("AWS::SQS::Queue") {
		if scalar(c.prop(id, "SqsManagedSseEnabled")) != "true" {
			t.Errorf("%s: SqsManagedSseEnabled is not true", id)
		}
	}
	for queue, dlq := range map[string]string{"FailureQueue": "FailureDeadLetterQueue", "TargetQueue": "TargetDeadLetterQueue", "VerifyQueue": "VerifyDeadLetterQueue"} {
		rp := c.prop(queue, "RedrivePolicy")
		if got := getAtt(get(rp, "deadLetterTargetArn")); got != dlq+".Arn" {
			t.Errorf("%s redrives to %q, want %s", queue, got, dlq)
		}
		if n, err := strconv.Atoi(scalar(get(rp, "maxReceiveCount"))); err != nil || n < 1 {
			t.Errorf("%s: maxReceiveCount %q", queue, scalar(get(rp, "maxReceiveCount")))
		}
	}
	// A FIFO queue's DLQ must be FIFO too: both follow the same condition.
	for _, id := range []string{"TargetQueue", "TargetDeadLetterQueue"} {
		cond, a, b, ok := ifArgs(c.prop(id, "FifoQueue"))
		if !ok || cond != "TargetFifo" || scalar(a) != "true" || ref(b) != "AWS::NoValue" {
			t.Errorf("%s: FifoQueue must be !If [TargetFifo, true, !Ref AWS::NoValue]", id)
		}
	}
	if c.conditionParam("TargetFifo") != "TargetQueueFifo" {
		t.Errorf("condition TargetFifo must test parameter TargetQueueFifo")
	}
	// The verify queue is FIFO (message group = shard: one walker per shard), and so is its
	// DLQ (SQS requires a FIFO queue's dead-letter queue to be FIFO). The reconciler sets every
	// MessageDeduplicationId itself (shard and pass time): content-based deduplication would
	// drop a pass's message whose body equals an earlier pass's.
	for _, id := range []string{"VerifyQueue", "VerifyDeadLetterQueue"} {
		if got := scalar(c.prop(id, "FifoQueue")); got != "true" {
			t.Errorf("%s: FifoQueue %q, want true", id, got)
		}
	}
	if got := scalar(c.prop("VerifyQueue", "ContentBasedDeduplication")); got != "false" {
		t.Errorf("VerifyQueue: ContentBasedDeduplication %q, want false", got)
	}
	// Every queue the reconciler's SQS event sources poll: "set the source queue's visibility
	// timeout to at least six times the configuration timeout on your function" (Lambda
	// developer guide, "Creating and configuring an Amazon SQS event source mapping",
	// https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html); Lambda refuses
	// a mapping whose queue's timeout is below the function's.
	timeout := c.functionTimeout("ReconcilerFunction")
	for _, ev := range c.events("ReconcilerFunction", "SQS") {
		q := strings.TrimSuffix(getAtt(get(ev, "Queue")), ".Arn")
		vis, err := strconv.Atoi(scalar(c.prop(q, "VisibilityTimeout")))
		if err != nil || vis < 6*timeout {
			t.Errorf("%s VisibilityTimeout %q: want at least 6 x the reconciler's Timeout %d = %d", q, scalar(c.prop(q, "VisibilityTimeout")), timeout, 6*timeout)
		}
	}
}

// functionTimeout is a function's literal Timeout, from its Properties or Globals.
func (c *cfn) functionTimeout(fn string) int {
	c.t.Helper()
	n := c.prop(fn, "Timeout")
	if n == nil {
		n = get(c.root, "Globals", "Function", "Timeout")
	}
	v, err := strconv.Atoi(scalar(n))
	if err != nil {
		c.t.Fatalf("%s: Timeout is not a literal number", fn)
	}
	return v
}

// events returns a function's events of the given Type.
func (c *cfn) events(fn, typ string) []*yaml.Node {
	evs := c.prop(fn, "Events")
	var out []*yaml.Node
	for _, k := range keys(evs) {
		if scalar(get(evs, k, "Type")) == typ {
			out = append(out, get(evs, k, "Properties"))
		}
	}
	return out
}

func TestConsumerMapping(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	evs := c.events("ConsumerFunction", "Kinesis")
	if len(evs) != 1 {
		t.Fatalf("ConsumerFunction has %d Kinesis events, want 1", len(evs))
	}
	ev := evs[0]
	for prop, param := range map[string]string{
		"StartingPosition":               "StartingPosition",
		"BatchSize":                      "BatchSize",
		"MaximumBatchingWindowInSeconds": "BatchingWindowSeconds",
		"ParallelizationFactor":          "ParallelizationFactor",
		"MaximumRetryAttempts":           "MaximumRetryAttempts",
		"MaximumRecordAgeInSeconds":      "MaximumRecordAgeSeconds",
		"BisectBatchOnFunctionError":     "BisectBatchOnFunctionError",
	} {
		if got := c.paramOf(get(ev, prop)); got != param {
			t.Errorf("mapping %s comes from %q, want parameter %s", prop, got, param)
		}
	}
	// The stream, or (EnhancedFanOut) the registered consumer the mapping reads through.
	if got := targets(get(ev, "Stream")); !slices.Equal(got, []string{"Stream.Arn", "StreamArn", "StreamConsumer.ConsumerARN"}) {
		t.Errorf("mapping Stream = %v", got)
	}
	if c.paramOf(c.prop("ConsumerFunction", "Timeout")) != "ConsumerTimeoutSeconds" {
		t.Errorf("ConsumerFunction Timeout must be !Ref ConsumerTimeoutSeconds (MinSettle depends on it)")
	}
	if !slices.Contains(stringList(get(ev, "FunctionResponseTypes")), "ReportBatchItemFailures") {
		t.Errorf("Kinesis event lacks FunctionResponseTypes ReportBatchItemFailures")
	}
	if got := targets(get(ev, "DestinationConfig", "OnFailure", "Destination")); !slices.Equal(got, []string{"FailureBucket.Arn", "FailureQueue.Arn"}) {
		t.Errorf("OnFailure destination %v, want FailureBucket.Arn or FailureQueue.Arn (OnFailureDestination)", got)
	}
	// Lambda emits the mapping's own counts (DroppedEventCount, …) only with EventCount on.
	if !slices.Contains(stringList(get(ev, "MetricsConfig", "Metrics")), "EventCount") {
		t.Errorf("Kinesis event lacks MetricsConfig Metrics [EventCount]")
	}
}

func TestReconcilerEvents(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	sched := c.events("ReconcilerFunction", "Schedule")
	if len(sched) != 1 || c.paramOf(get(sched[0], "Schedule")) != "ReconcileSchedule" {
		t.Errorf("ReconcilerFunction needs one Schedule event on !Ref ReconcileSchedule")
	}
	byQueue := map[string]*yaml.Node{}
	for _, ev := range c.events("ReconcilerFunction", "SQS") {
		byQueue[getAtt(get(ev, "Queue"))] = ev
	}
	if got := slices.Sorted(maps.Keys(byQueue)); !slices.Equal(got, []string{"FailureQueue.Arn", "VerifyQueue.Arn"}) {
		t.Fatalf("ReconcilerFunction's SQS events are on %v, want FailureQueue.Arn and VerifyQueue.Arn", got)
	}
	for q, ev := range byQueue {
		// A refused or failed message is reported alone; without it the whole batch returns.
		if !slices.Contains(stringList(get(ev, "FunctionResponseTypes")), "ReportBatchItemFailures") {
			t.Errorf("SQS event on %s lacks FunctionResponseTypes ReportBatchItemFailures", q)
		}
	}
	// The fan-out: one shard per invocation, as many walkers at once as VerifyConcurrency.
	verify := byQueue["VerifyQueue.Arn"]
	if got := scalar(get(verify, "BatchSize")); got != "1" {
		t.Errorf("Verify event BatchSize %q, want 1 (one shard per invocation)", got)
	}
	if got := c.paramOf(get(verify, "ScalingConfig", "MaximumConcurrency")); got != "VerifyConcurrency" {
		t.Errorf("Verify event ScalingConfig.MaximumConcurrency comes from %q, want parameter VerifyConcurrency", got)
	}
}

func TestFunctionsBuildWithMakefile(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "mk", "sam.mk"))
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^-?include mk/sam\.mk\s*$`).Match(makefile) {
		t.Errorf("Makefile does not include mk/sam.mk: sam build runs make in the module root")
	}
	fns := c.resourcesOfType("AWS::Serverless::Function")
	if !slices.Equal(fns, []string{"ConsumerFunction", "ReconcilerFunction"}) {
		t.Errorf("functions %v", fns)
	}
	for _, fn := range fns {
		if got := scalar(get(c.resource(fn), "Metadata", "BuildMethod")); got != "makefile" {
			t.Errorf("%s: BuildMethod %q, want makefile", fn, got)
		}
		if got := scalar(c.prop(fn, "CodeUri")); got != "." {
			t.Errorf("%s: CodeUri %q, want . (the Makefile is in the module root)", fn, got)
		}
		if !regexp.MustCompile(`(?m)^build-` + fn + `:`).Match(mk) {
			t.Errorf("mk/sam.mk has no build-%s target", fn)
		}
		if got := getAtt(c.prop(fn, "Role")); got != strings.TrimSuffix(fn, "Function")+"Role.Arn" {
			t.Errorf("%s: Role %q", fn, got)
		}
		if c.prop(fn, "Policies") != nil {
			t.Errorf("%s: Policies set next to Role: all permissions belong in the role", fn)
		}
	}
	g := get(c.root, "Globals", "Function")
	for k, want := range map[string]string{"Runtime": "provided.al2023", "Handler": "bootstrap"} {
		if got := scalar(get(g, k)); got != want {
			t.Errorf("Globals.Function.%s %q, want %q", k, got, want)
		}
	}
	if got := scalar(get(g, "LoggingConfig", "LogFormat")); got != "JSON" {
		t.Errorf("Globals LogFormat %q, want JSON", got)
	}
	arch := stringList(get(g, "Architectures"))
	goarch := map[string]string{"arm64": "arm64", "x86_64": "amd64"}
	m := regexp.MustCompile(`(?m)^GOARCH_LAMBDA\s*\?=\s*(\S+)`).FindSubmatch(mk)
	if len(arch) != 1 || m == nil || goarch[arch[0]] != string(m[1]) {
		t.Errorf("Architectures %v and GOARCH_LAMBDA default %q disagree", arch, m)
	}
}

// Policy statements as action -> resource targets (see targets).
type grants map[string][]string

func (g grants) add(actions []string, resources ...string) {
	for _, a := range actions {
		g[a] = append(g[a], resources...)
		slices.Sort(g[a])
		g[a] = slices.Compact(g[a])
	}
}

var (
	streamRead = []string{"kinesis:DescribeStream", "kinesis:DescribeStreamSummary", "kinesis:GetRecords", "kinesis:GetShardIterator", "kinesis:ListShards"}
	stateRW    = []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem", "dynamodb:DeleteItem"} // BatchGetItem: key holds (ON_PARK=hold-key); DeleteItem: markers released, holds released
	logWrite   = []string{"logs:CreateLogStream", "logs:PutLogEvents"}
)

// serviceGrants are what a service's own Process needs beyond gapless's grants, per template
// (TestEveryDynamoDBCallIsGranted checks the service's calls are granted).
var serviceGrants = map[string]map[string]grants{
	// ddbwriter's Process: a conditional PutItem on its output table, in both functions.
	"examples/ddbwriter/template.yaml": {
		"ConsumerRole":   {"dynamodb:PutItem": {"OutputTable.Arn"}},
		"ReconcilerRole": {"dynamodb:PutItem": {"OutputTable.Arn"}},
	},
	// The scaffold's Process starts as ddbwriter's.
	scaffoldTemplate: {
		"ConsumerRole":   {"dynamodb:PutItem": {"OutputTable.Arn"}},
		"ReconcilerRole": {"dynamodb:PutItem": {"OutputTable.Arn"}},
	},
}

// wantGrants are the roles' grants for the template at path: gapless's (template.yaml's, which
// has every optional resource), less those on resources and parameters the template does not
// declare, plus the service's own (serviceGrants). The target/ payload prefix belongs to the
// default Process, which forwards to TargetQueue: without that queue nothing writes there.
func wantGrants(c *cfn, path string) map[string]grants {
	want := map[string]grants{}
	for role, g := range gaplessGrants() {
		want[role] = grants{}
		for a, ts := range g {
			for _, tg := range ts {
				base := strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(tg, "sub:"), "${"), ".", 2)[0]
				declared := get(c.root, "Resources", base) != nil || get(c.root, "Parameters", base) != nil
				if strings.Contains(tg, "/"+process.KeyPrefix) && get(c.root, "Resources", "TargetQueue") == nil {
					declared = false
				}
				if tg == "=*" { // the trace writes: only a template with the Tracing parameter
					declared = get(c.root, "Parameters", "Tracing") != nil
				}
				if declared {
					want[role].add([]string{a}, tg)
				}
			}
		}
		for a, ts := range serviceGrants[path][role] {
			want[role].add([]string{a}, ts...)
		}
	}
	return want
}

// gaplessGrants are the roles' grants in template.yaml.
func gaplessGrants() map[string]grants {
	consumer, reconciler := grants{}, grants{}
	for _, g := range []struct {
		grants
		logGroup string
	}{{consumer, "ConsumerLogGroup.Arn"}, {reconciler, "ReconcilerLogGroup.Arn"}} {
		g.add(logWrite, g.logGroup)
		g.add(streamRead, "Stream.Arn", "StreamArn")
		g.add([]string{"kms:Decrypt"}, "StreamKey.Arn", "StreamKmsKeyArn")
		g.add(stateRW, "CheckpointTable.Arn", "LedgerTable.Arn")
		// A customer managed table key (TableKmsKeyArn), used through DynamoDB only.
		g.add([]string{"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"}, "TableKmsKeyArn")
		g.add([]string{"sqs:SendMessage"}, "ParkedQueue.Arn", "TargetQueue.Arn")
		// Payloads over 1 MiB: put only, under the key prefixes park and process write.
		g.add([]string{"s3:PutObject"}, "sub:${PayloadBucket.Arn}/"+park.KeyPrefix+"*", "sub:${PayloadBucket.Arn}/"+process.KeyPrefix+"*")
	}
	// Enhanced fan-out: the mapping subscribes through the registered consumer with the
	// consumer's role.
	consumer.add([]string{"kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"}, "StreamConsumer.ConsumerARN")
	// The mapping sends on-failure records with the consumer's role: to the queue, or as
	// objects to the bucket (s3:PutObject and s3:ListBucket).
	consumer.add([]string{"sqs:SendMessage"}, "FailureQueue.Arn")
	consumer.add([]string{"s3:PutObject"}, "sub:${FailureBucket.Arn}/aws/lambda/*")
	consumer.add([]string{"s3:ListBucket"}, "FailureBucket.Arn")
	// The reconciler reads the on-failure objects the failure queue's notifications name.
	reconciler.add([]string{"s3:GetObject"}, "sub:${FailureBucket.Arn}/aws/lambda/*")
	// The SQS event source polls the failure queue with the reconciler's role.
	reconciler.add([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}, "FailureQueue.Arn")
	// The reconciler releases on-failure messages it had no time to try (reconcile.WithRelease).
	reconciler.add([]string{"sqs:GetQueueUrl", "sqs:SendMessage"}, "FailureQueue.Arn")
	// The fan-out: the scheduled pass sends one message per shard to the verify queue, a walker
	// the children of a closed parent; the SQS event source polls it with the reconciler's role
	// (the same three actions as the failure queue's: nothing changes a message's visibility).
	reconciler.add([]string{"sqs:SendMessage"}, "VerifyQueue.Arn")
	reconciler.add([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}, "VerifyQueue.Arn")
	// Redrive runs in the reconciler (reconcile.WithCommands): it consumes the parked queue and
	// reads parked payloads back.
	reconciler.add([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}, "ParkedQueue.Arn")
	reconciler.add([]string{"s3:GetObject"}, "sub:${PayloadBucket.Arn}/"+park.KeyPrefix+"*")
	// Tracing=Active: both functions write traces (tracingWrite, on "*" only).
	consumer.add(tracingWrite, "=*")
	reconciler.add(tracingWrite, "=*")
	return map[string]grants{"ConsumerRole": consumer, "ReconcilerRole": reconciler}
}

// tracingWrite are the X-Ray actions an actively traced function's role needs: the Lambda
// developer guide, "Visualize Lambda function invocations using AWS X-Ray" (services-xray), and
// the Service Authorization Reference for AWS X-Ray, which gives them no resource type (so "*").
// They are granted only under the TracingActive condition (TestTracingGrantsOnlyWhenActive).
var tracingWrite = []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}

// starOnly lists actions that accept only Resource "*": the Service Authorization Reference
// (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonkinesisdatastreams.html)
// gives them no resource type ("If there is no value for this column, you must specify all
// resources ("*")"). gapless grants none of them; the list documents why none is needed.
var starOnly = map[string]string{
	// Lambda developer guide, services-kinesis-create: "You don't need the kinesis:ListStreams
	// permission to create and manage event source mappings for Kinesis."
	"kinesis:ListStreams": "account-level listing; not needed by the event-source mapping",
}

// statements returns every statement of the role's inline policies, !If branches expanded.
func (c *cfn) statements(role string) []*yaml.Node {
	var out []*yaml.Node
	for _, pol := range c.prop(role, "Policies").Content {
		for _, s := range get(pol, "PolicyDocument", "Statement").Content {
			out = append(out, alternatives(s)...)
		}
	}
	return out
}

// TestIAMLeastPrivilege, for every SAM template of the repository: two roles, each granting
// exactly wantGrants, scoped to the stack's resources.
func TestIAMLeastPrivilege(t *testing.T) {
	t.Parallel()
	forEachTemplate(t, func(t *testing.T, path string, c *cfn) { checkLeastPrivilege(t, path, c) })
}

func checkLeastPrivilege(t *testing.T, path string, c *cfn) {
	for _, typ := range []string{"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::User", "AWS::IAM::Group"} {
		if ids := c.resourcesOfType(typ); len(ids) > 0 {
			t.Errorf("%s %v: keep permissions inline in the two roles", typ, ids)
		}
	}
	roles := c.resourcesOfType("AWS::IAM::Role")
	want := wantGrants(c, path)
	if !slices.Equal(roles, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("roles %v, want %v", roles, slices.Sorted(maps.Keys(want)))
	}
	for _, role := range roles {
		t.Run(role, func(t *testing.T) {
			if c.prop(role, "ManagedPolicyArns") != nil {
				t.Errorf("ManagedPolicyArns: AWS managed policies grant Resource \"*\"")
			}
			principal := stringList(get(c.prop(role, "AssumeRolePolicyDocument", "Statement").Content[0], "Principal", "Service"))
			if !slices.Equal(principal, []string{"lambda.amazonaws.com"}) {
				t.Errorf("assumable by %v", principal)
			}
			got := grants{}
			for _, s := range c.statements(role) {
				if scalar(get(s, "Effect")) != "Allow" || get(s, "NotAction") != nil || get(s, "NotResource") != nil {
					t.Errorf("statement %q: only plain Allow statements", scalar(get(s, "Sid")))
				}
				actions := stringList(get(s, "Action"))
				resources := targets(get(s, "Resource"))
				for _, a := range actions {
					if strings.Contains(a, "*") {
						t.Errorf("wildcard action %q", a)
					}
				}
				for _, r := range resources {
					// Objects under a key prefix of the stack's own bucket are scoped, not "*".
					prefixed := false
					for _, b := range []string{"sub:${PayloadBucket.Arn}/", "sub:${FailureBucket.Arn}/"} {
						prefixed = prefixed || strings.HasPrefix(r, b) && !strings.HasPrefix(r, b+"*") &&
							strings.Count(r, "*") == 1 && strings.HasSuffix(r, "/*")
					}
					star := !prefixed && (r == "=*" || (strings.HasPrefix(r, "=") || strings.HasPrefix(r, "sub:")) && strings.Contains(r, "*"))
					if star {
						for _, a := range actions {
							if _, ok := starOnly[a]; !ok && !slices.Contains(tracingWrite, a) {
								t.Errorf("%s on %q: resource \"*\" is reserved for actions without a resource type", a, r)
							}
						}
					} else if !prefixed && (strings.HasPrefix(r, "=") || strings.HasPrefix(r, "sub:")) {
						t.Errorf("statement %q: literal resource %q, reference the stack's resources instead", scalar(get(s, "Sid")), r)
					}
				}
				got.add(actions, resources...)
			}
			for a := range starOnly {
				if got[a] != nil {
					t.Errorf("%s granted; the mapping does not need it", a)
				}
			}
			for _, a := range slices.Sorted(maps.Keys(got)) {
				if !slices.Equal(got[a], want[role][a]) {
					t.Errorf("%s on %v, want %v", a, got[a], want[role][a])
				}
			}
			for _, a := range slices.Sorted(maps.Keys(want[role])) {
				if got[a] == nil {
					t.Errorf("%s missing (want on %v)", a, want[role][a])
				}
			}
		})
	}
}

func TestAlarms(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	type metric struct{ namespace, name, dimName, dimTarget string }
	var have []metric
	for _, id := range c.resourcesOfType("AWS::CloudWatch::Alarm") {
		dims := c.prop(id, "Dimensions")
		if dims == nil || len(dims.Content) != 1 {
			t.Errorf("%s: want exactly one dimension", id)
			continue
		}
		d := dims.Content[0]
		have = append(have, metric{
			scalar(c.prop(id, "Namespace")), scalar(c.prop(id, "MetricName")),
			scalar(get(d, "Name")), strings.Join(targets(get(d, "Value")), ","),
		})
		cond, a, b, ok := ifArgs(c.prop(id, "AlarmActions"))
		if !ok || cond != "HasAlarmEmail" || len(a.Content) != 1 || ref(a.Content[0]) != "AlarmTopic" || ref(b) != "AWS::NoValue" {
			t.Errorf("%s: AlarmActions must be !If [HasAlarmEmail, [!Ref AlarmTopic], !Ref AWS::NoValue]", id)
		}
	}
	// EMF metrics of the reconciler (internal/metrics): dimension Group = the group name.
	for _, m := range []metric{
		{metrics.Namespace, "GapsDetected", metrics.DimensionGroup, "GroupName"},
		{metrics.Namespace, "LostToRetention", metrics.DimensionGroup, "GroupName"},
		{metrics.Namespace, "VerifiedLagSeconds", metrics.DimensionGroup, "GroupName"},
		// Refused forged or stale input (never applied): its alarm is the only trace.
		{metrics.Namespace, "ParkedRefused", metrics.DimensionGroup, "GroupName"},
		{metrics.Namespace, "FailureMessageRefused", metrics.DimensionGroup, "GroupName"},
		{metrics.Namespace, "RecordsOfAnotherStream", metrics.DimensionGroup, "GroupName"},
		{metrics.Namespace, "VerifyMessageRefused", metrics.DimensionGroup, "GroupName"},
		{"AWS/Lambda", "IteratorAge", "FunctionName", "ConsumerFunction"},
		{"AWS/Lambda", "Errors", "FunctionName", "ConsumerFunction"},
		{"AWS/Lambda", "Throttles", "FunctionName", "ConsumerFunction"},
		{"AWS/Lambda", "Errors", "FunctionName", "ReconcilerFunction"},
		{"AWS/Lambda", "Throttles", "FunctionName", "ReconcilerFunction"},
		{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "ParkedQueue.QueueName"},
		{"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "FailureQueue.QueueName"},
		{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "FailureDeadLetterQueue.QueueName"},
		// The fan-out: a shard whose walks keep failing (or refused work), walkers falling behind.
		{"AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "VerifyDeadLetterQueue.QueueName"},
		{"AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "VerifyQueue.QueueName"},
	} {
		if !slices.Contains(have, m) {
			t.Errorf("no alarm on %+v", m)
		}
	}
	if scalar(get(c.resource("AlarmTopic"), "Condition")) != "HasAlarmEmail" {
		t.Errorf("AlarmTopic must exist only with an AlarmEmail")
	}
	if fn, _ := intrinsic(get(c.root, "Conditions", "HasAlarmEmail")); fn != "Fn::Not" || !mentions(get(c.root, "Conditions", "HasAlarmEmail"), "AlarmEmail") {
		t.Errorf("HasAlarmEmail must test AlarmEmail != \"\"")
	}
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	outs := get(c.root, "Outputs")
	referenced := map[string]bool{}
	for _, k := range keys(outs) {
		for _, tg := range targets(get(outs, k, "Value")) {
			referenced[strings.SplitN(tg, ".", 2)[0]] = true
		}
	}
	for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Serverless::Function", "AWS::Kinesis::Stream", "AWS::S3::Bucket"} {
		for _, id := range c.resourcesOfType(typ) {
			if !referenced[id] {
				t.Errorf("no output for %s %s", typ, id)
			}
		}
	}
}

// TestCfnLint runs cfn-lint (preinstalled on every machine here) on template.yaml; any finding,
// warning or informational, fails the test.
func TestCfnLint(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Fatalf("cfn-lint not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "template.yaml")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("cfn-lint template.yaml: %v\n%s", err, out)
	}
}

// TestFailureBucket: the S3 on-failure destination (OnFailureDestination S3, the default): kept
// on delete, SSE, no public access, objects outliving every notification that names them (the
// failure queue and its dead-letter queue keep messages 14 days each), and ObjectCreated
// notifications of Lambda's key prefix to the failure queue, which S3 may send to.
func TestFailureBucket(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if d := scalar(get(c.param("OnFailureDestination"), "Default")); d != "S3" {
		t.Errorf("OnFailureDestination defaults to %q, want S3", d)
	}
	b := c.resource("FailureBucket")
	if scalar(get(b, "Condition")) != "FailureToS3" || scalar(get(b, "DeletionPolicy")) != "Retain" {
		t.Errorf("FailureBucket: condition %q, deletion policy %q", scalar(get(b, "Condition")), scalar(get(b, "DeletionPolicy")))
	}
	if sse := get(c.prop("FailureBucket", "BucketEncryption", "ServerSideEncryptionConfiguration").Content[0], "ServerSideEncryptionByDefault", "SSEAlgorithm"); scalar(sse) != "AES256" {
		t.Errorf("FailureBucket SSE %q", scalar(sse))
	}
	if name := c.prop("FailureBucket", "BucketName"); name == nil || name.Tag != "!Join" ||
		len(name.Content) != 2 || len(name.Content[1].Content) != 2 || name.Content[1].Content[0].Value != "gapless-fail-" ||
		name.Content[1].Content[1].Tag != "!Select" {
		t.Errorf("FailureBucket's BucketName must be gapless-fail-<stack id> (the roles and the failure queue's policy name it so)")
	}
	days := 0
	for _, r := range c.prop("FailureBucket", "LifecycleConfiguration", "Rules").Content {
		days, _ = strconv.Atoi(scalar(get(r, "ExpirationInDays")))
	}
	if days <= 28 {
		t.Errorf("FailureBucket objects expire after %d days: a notification can wait 14 days in the failure queue and 14 in its DLQ", days)
	}
	qs := c.prop("FailureBucket", "NotificationConfiguration", "QueueConfigurations").Content
	if len(qs) != 1 || getAtt(get(qs[0], "Queue")) != "FailureQueue.Arn" || !strings.HasPrefix(scalar(get(qs[0], "Event")), "s3:ObjectCreated:") {
		t.Fatalf("FailureBucket must notify the failure queue of ObjectCreated events")
	}
	// One policy per queue (a second QueuePolicy on the queue would replace the first): the
	// failure queue's carries the S3 allow when the destination is the bucket.
	var s3Allow bool
	for _, st := range c.prop("FailureQueuePolicy", "PolicyDocument", "Statement").Content {
		if st.Tag == "!If" && len(st.Content) == 3 && st.Content[0].Value == "FailureToS3" &&
			scalar(get(st.Content[1], "Effect")) == "Allow" &&
			slices.Contains(stringList(get(st.Content[1], "Principal", "Service")), "s3.amazonaws.com") &&
			get(st.Content[1], "Condition", "ArnEquals", "aws:SourceArn") != nil {
			s3Allow = true
		}
	}
	if !s3Allow {
		t.Errorf("FailureQueuePolicy must let s3.amazonaws.com send the failure bucket's notifications (aws:SourceArn the bucket) when OnFailureDestination is S3")
	}
}

// TestTracingGrantsOnlyWhenActive: the X-Ray writes ("*": they have no resource type) are in
// each role only under the TracingActive condition, so a stack without tracing grants none.
func TestTracingGrantsOnlyWhenActive(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if get(c.root, "Globals", "Function", "Tracing") == nil {
		t.Fatal("Globals.Function.Tracing is not set from the Tracing parameter")
	}
	for _, role := range c.resourcesOfType("AWS::IAM::Role") {
		found := false
		for _, pol := range c.prop(role, "Policies").Content {
			for _, st := range get(pol, "PolicyDocument", "Statement").Content {
				cond, a, _, isIf := ifArgs(st)
				for _, alt := range alternatives(st) {
					if !slices.ContainsFunc(stringList(get(alt, "Action")), func(x string) bool { return strings.HasPrefix(x, "xray:") }) {
						continue
					}
					if !isIf || cond != "TracingActive" || alt != a {
						t.Errorf("%s: X-Ray actions granted outside !If [TracingActive, ...]", role)
					}
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: no X-Ray grant under TracingActive", role)
		}
	}
}
