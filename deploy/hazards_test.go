package deploy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless/internal/config"
)

// lambdaAcceptsRecordAge is CreateEventSourceMapping's rule for MaximumRecordAgeInSeconds:
// -1 (infinite) or 60..604,800. "The minimum valid value for maximum record age is 60s.
// Although values less than 60 and greater than -1 fall within the parameter's absolute range,
// they are not allowed" (Lambda API reference, CreateEventSourceMapping,
// https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html).
func lambdaAcceptsRecordAge(n int) bool { return n == -1 || n >= 60 && n <= 604800 }

// TestMaximumRecordAgeMatchesLambda: the parameter accepts exactly what Lambda accepts, so a
// deployment fails at parameter validation, not halfway through an update.
func TestMaximumRecordAgeMatchesLambda(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	p := c.param("MaximumRecordAgeSeconds")
	re := regexp.MustCompile(scalar(get(p, "AllowedPattern")))
	if scalar(get(p, "AllowedPattern")) == "" || get(p, "MinValue") != nil || get(p, "MaxValue") != nil {
		t.Fatalf("MaximumRecordAgeSeconds must be constrained by an AllowedPattern alone (MinValue/MaxValue admit 0-59)")
	}
	for n := -1000; n <= 700000; n++ {
		if got, want := re.MatchString(strconv.Itoa(n)), lambdaAcceptsRecordAge(n); got != want {
			t.Fatalf("MaximumRecordAgeSeconds %d: template accepts=%v, Lambda accepts=%v", n, got, want)
		}
	}
	for _, v := range []string{"", "060", "+60", "1e3", "60.0", " 60", "-01", "6048000"} {
		if re.MatchString(v) {
			t.Errorf("MaximumRecordAgeSeconds %q accepted", v)
		}
	}
	if d := c.paramDefault("MaximumRecordAgeSeconds"); !re.MatchString(d) {
		t.Errorf("default %q fails the parameter's own pattern", d)
	}
}

// lambdaMaxConcurrency is the range of an SQS event source's ScalingConfig.MaximumConcurrency:
// "Valid Range: Minimum value of 2. Maximum value of 1000." (Lambda API reference,
// ScalingConfig, https://docs.aws.amazon.com/lambda/latest/api/API_ScalingConfig.html).
const lambdaMinConcurrency, lambdaMaxConcurrency = 2, 1000

// TestVerifyConcurrencyMatchesLambda: VerifyConcurrency accepts exactly what Lambda accepts as
// MaximumConcurrency, and every SQS event's literal MaximumConcurrency is in that range, so a
// deployment fails at parameter validation, not halfway through an update.
func TestVerifyConcurrencyMatchesLambda(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	p := c.param("VerifyConcurrency")
	if got := scalar(get(p, "Type")); got != "Number" {
		t.Errorf("VerifyConcurrency Type %q, want Number", got)
	}
	if lo, hi := scalar(get(p, "MinValue")), scalar(get(p, "MaxValue")); lo != strconv.Itoa(lambdaMinConcurrency) || hi != strconv.Itoa(lambdaMaxConcurrency) {
		t.Errorf("VerifyConcurrency MinValue %q MaxValue %q, want %d and %d (ScalingConfig)", lo, hi, lambdaMinConcurrency, lambdaMaxConcurrency)
	}
	if d := c.paramDefaultInt("VerifyConcurrency"); d < lambdaMinConcurrency || d > lambdaMaxConcurrency {
		t.Errorf("VerifyConcurrency default %d outside %d-%d", d, lambdaMinConcurrency, lambdaMaxConcurrency)
	}
	for _, fn := range c.resourcesOfType("AWS::Serverless::Function") {
		for _, ev := range c.events(fn, "SQS") {
			n := get(ev, "ScalingConfig", "MaximumConcurrency")
			if n == nil || c.paramOf(n) != "" {
				continue
			}
			if v, err := strconv.Atoi(scalar(n)); err != nil || v < lambdaMinConcurrency || v > lambdaMaxConcurrency {
				t.Errorf("%s: SQS event on %s has MaximumConcurrency %q, outside %d-%d", fn, getAtt(get(ev, "Queue")), scalar(n), lambdaMinConcurrency, lambdaMaxConcurrency)
			}
		}
	}
}

// TestStreamArnPatternMatchesConfig: the template's StreamArn and the reconciler's STREAM_ARN
// accept the same ARNs (the template passes one to the other).
func TestStreamArnPatternMatchesConfig(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	p := scalar(get(c.param("StreamArn"), "AllowedPattern"))
	if want := "^$|" + config.StreamARNPattern.String(); p != want {
		t.Fatalf("StreamArn AllowedPattern %q, want %q (config.StreamARNPattern)", p, want)
	}
}

// TestCreatedStreamIsRetained: deleting the stack or replacing the stream must not delete
// records nobody has read; its key must outlive it.
func TestCreatedStreamIsRetained(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	for _, id := range []string{"Stream", "StreamKey"} {
		r := c.resource(id)
		for _, policy := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if got := scalar(get(r, policy)); got != "Retain" {
				t.Errorf("%s %s %q, want Retain", id, policy, got)
			}
		}
	}
}

// TestOptionalParameters: each option defaults to off and switches its resources through one
// condition on its parameter.
func TestOptionalParameters(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	notEmpty := func(cond, param string) {
		t.Helper()
		n := get(c.root, "Conditions", cond)
		if fn, _ := intrinsic(n); fn != "Fn::Not" || !mentions(n, param) {
			t.Errorf("condition %s must be !Not [!Equals [!Ref %s, \"\"]]", cond, param)
		}
		if c.paramDefault(param) != "" {
			t.Errorf("%s defaults to %q, want empty (off)", param, c.paramDefault(param))
		}
	}

	// Customer managed table key: both tables, or neither.
	notEmpty("HasTableKey", "TableKmsKeyArn")
	for _, id := range []string{"CheckpointTable", "LedgerTable"} {
		cond, a, b, ok := ifArgs(c.prop(id, "SSESpecification"))
		if !ok || cond != "HasTableKey" || ref(b) != "AWS::NoValue" || scalar(get(a, "SSEType")) != "KMS" ||
			scalar(get(a, "SSEEnabled")) != "true" || ref(get(a, "KMSMasterKeyId")) != "TableKmsKeyArn" {
			t.Errorf("%s: SSESpecification must be !If [HasTableKey, {SSEEnabled: true, SSEType: KMS, KMSMasterKeyId: !Ref TableKmsKeyArn}, !Ref AWS::NoValue]", id)
		}
	}
	for _, role := range []string{"ConsumerRole", "ReconcilerRole"} {
		found := false
		for _, s := range c.statements(role) {
			if strings.Join(targets(get(s, "Resource")), ",") == "TableKmsKeyArn" {
				found = true
				if !mentions(get(s, "Condition"), "kms:ViaService") {
					t.Errorf("%s: table key use must be limited to kms:ViaService DynamoDB", role)
				}
			}
		}
		if !found {
			t.Errorf("%s: no statement for the table key", role)
		}
	}

	// Reserved concurrency: never 0 (that stops the consumer), empty = none.
	notEmpty("HasReservedConcurrency", "ConsumerReservedConcurrency")
	re := regexp.MustCompile(scalar(get(c.param("ConsumerReservedConcurrency"), "AllowedPattern")))
	for v, want := range map[string]bool{"": true, "1": true, "40": true, "1000": true, "0": false, "-1": false, "01": false, "x": false} {
		if re.MatchString(v) != want {
			t.Errorf("ConsumerReservedConcurrency %q: accepted=%v, want %v", v, !want, want)
		}
	}
	if cond, a, b, ok := ifArgs(c.prop("ConsumerFunction", "ReservedConcurrentExecutions")); !ok || cond != "HasReservedConcurrency" ||
		ref(a) != "ConsumerReservedConcurrency" || ref(b) != "AWS::NoValue" {
		t.Errorf("ConsumerFunction ReservedConcurrentExecutions must be !If [HasReservedConcurrency, !Ref ConsumerReservedConcurrency, !Ref AWS::NoValue]")
	}

	// Enhanced fan-out: a consumer registered on the consumed stream, read through by the
	// mapping, subscribed to with the consumer's role.
	if c.conditionParam("UseFanOut") != "EnhancedFanOut" || c.paramDefault("EnhancedFanOut") != "false" {
		t.Errorf("UseFanOut must test EnhancedFanOut == \"true\", default false")
	}
	if scalar(get(c.resource("StreamConsumer"), "Type")) != "AWS::Kinesis::StreamConsumer" ||
		scalar(get(c.resource("StreamConsumer"), "Condition")) != "UseFanOut" {
		t.Errorf("StreamConsumer must be an AWS::Kinesis::StreamConsumer under condition UseFanOut")
	}
	if got := strings.Join(targets(c.prop("StreamConsumer", "StreamARN")), ","); got != "Stream.Arn,StreamArn" {
		t.Errorf("StreamConsumer registers on %s, want the consumed stream", got)
	}
	ev := c.events("ConsumerFunction", "Kinesis")[0]
	if cond, a, _, ok := ifArgs(get(ev, "Stream")); !ok || cond != "UseFanOut" || getAtt(a) != "StreamConsumer.ConsumerARN" {
		t.Errorf("the mapping must read through StreamConsumer.ConsumerARN when UseFanOut")
	}
}

// TestReplacementHazardsSaid: the two parameters whose change replaces the mapping (and so
// restarts it from StartingPosition) say so where an operator changes them.
func TestReplacementHazardsSaid(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	for _, p := range []string{"StreamArn", "StartingPosition"} {
		if d := scalar(get(c.param(p), "Description")); !strings.Contains(d, "replaces the mapping") {
			t.Errorf("%s description does not say a change replaces the mapping: %s", p, d)
		}
	}
}
