package faultproxy_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/gapless-dev/gapless/internal/local/faultproxy"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) {
	os.Exit(stacktest.Run(m, localstack.DynamoDB, localstack.SQS))
}

// deadTarget is a target nobody listens on: faults that answer without forwarding never
// need it, and anything forwarded comes back as 502.
const deadTarget = "http://127.0.0.1:1"

const (
	opPutItem    = "DynamoDB_20120810.PutItem"
	opGetItem    = "DynamoDB_20120810.GetItem"
	opSendMsg    = "AmazonSQS.SendMessage"
	opGetRecords = "Kinesis_20131202.GetRecords"
)

func start(t *testing.T, target string, opts ...faultproxy.Option) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// retryer is the standard retryer with short backoff and no retry quota, so fault tests are
// fast and the attempt count is exactly maxAttempts.
func retryer(maxAttempts int) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.MaxBackoff = 20 * time.Millisecond
		o.RateLimiter = ratelimit.None
	})
}

func dynamoVia(t *testing.T, endpoint string, maxAttempts int) *dynamodb.Client {
	return dynamodb.NewFromConfig(stacktest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = retryer(maxAttempts)
	})
}

func sqsVia(t *testing.T, endpoint string, maxAttempts int) *sqs.Client {
	return sqs.NewFromConfig(stacktest.Config(t), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = retryer(maxAttempts)
	})
}

func kinesisVia(t *testing.T, endpoint string, maxAttempts int) *kinesis.Client {
	return kinesis.NewFromConfig(stacktest.Config(t), func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = retryer(maxAttempts)
	})
}

func putItemInput(table, pk string) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{
		TableName: aws.String(table),
		Item: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: pk},
			"sk": &ddbtypes.AttributeValueMemberS{Value: "s"},
		},
	}
}

// itemExists reads directly from the emulator, bypassing the proxy.
func itemExists(t *testing.T, table, pk string) bool {
	t.Helper()
	out, err := stacktest.DynamoDB(t).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: pk},
			"sk": &ddbtypes.AttributeValueMemberS{Value: "s"},
		},
	})
	if err != nil {
		t.Fatalf("direct GetItem: %v", err)
	}
	return out.Item != nil
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// TestInjectedErrorsDecodeAsTheServiceErrors checks, per service, that the Go SDK decodes an
// injected fault into the modeled error a real throttle or failure produces, with the right
// status and the retry decision of the SDK's standard retryer.
func TestInjectedErrorsDecodeAsTheServiceErrors(t *testing.T) {
	ctx := context.Background()
	p := start(t, deadTarget)
	isRetryable := retry.IsErrorRetryables(retry.DefaultRetryables)

	cases := []struct {
		name      string
		operation string
		fault     faultproxy.Fault
		call      func() error
		status    int
		code      string
		modeled   func(error) bool
	}{
		{
			name: "dynamodb throttle", operation: opPutItem, fault: faultproxy.Throttle,
			call: func() error {
				_, err := dynamoVia(t, p.URL(), 1).PutItem(ctx, putItemInput("any-table", "x"))
				return err
			},
			status: 400, code: "ProvisionedThroughputExceededException",
			modeled: func(err error) bool {
				var e *ddbtypes.ProvisionedThroughputExceededException
				return errors.As(err, &e)
			},
		},
		{
			name: "dynamodb server error", operation: opPutItem, fault: faultproxy.ServerError,
			call: func() error {
				_, err := dynamoVia(t, p.URL(), 1).PutItem(ctx, putItemInput("any-table", "x"))
				return err
			},
			status: 500, code: "InternalServerError",
			modeled: func(err error) bool { var e *ddbtypes.InternalServerError; return errors.As(err, &e) },
		},
		{
			name: "kinesis data-plane throttle", operation: opGetRecords, fault: faultproxy.Throttle,
			call: func() error {
				_, err := kinesisVia(t, p.URL(), 1).GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
				return err
			},
			status: 400, code: "ProvisionedThroughputExceededException",
			modeled: func(err error) bool {
				var e *kintypes.ProvisionedThroughputExceededException
				return errors.As(err, &e)
			},
		},
		{
			name: "kinesis control-plane throttle", operation: "Kinesis_20131202.ListShards", fault: faultproxy.Throttle,
			call: func() error {
				_, err := kinesisVia(t, p.URL(), 1).ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("s")})
				return err
			},
			status: 400, code: "LimitExceededException",
			modeled: func(err error) bool { var e *kintypes.LimitExceededException; return errors.As(err, &e) },
		},
		{
			name: "kinesis server error", operation: opGetRecords, fault: faultproxy.ServerError,
			call: func() error {
				_, err := kinesisVia(t, p.URL(), 1).GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("it")})
				return err
			},
			status: 500, code: "InternalFailure",
			modeled: func(err error) bool { var e *smithy.GenericAPIError; return errors.As(err, &e) },
		},
		{
			name: "sqs throttle", operation: opSendMsg, fault: faultproxy.Throttle,
			call: func() error {
				_, err := sqsVia(t, p.URL(), 1).SendMessage(ctx, &sqs.SendMessageInput{
					QueueUrl: aws.String("http://127.0.0.1:1/000000000000/q"), MessageBody: aws.String("m")})
				return err
			},
			status: 400, code: "RequestThrottled",
			modeled: func(err error) bool { var e *sqstypes.RequestThrottled; return errors.As(err, &e) },
		},
		{
			name: "sqs server error", operation: opSendMsg, fault: faultproxy.ServerError,
			call: func() error {
				_, err := sqsVia(t, p.URL(), 1).SendMessage(ctx, &sqs.SendMessageInput{
					QueueUrl: aws.String("http://127.0.0.1:1/000000000000/q"), MessageBody: aws.String("m")})
				return err
			},
			status: 500, code: "InternalFailure",
			modeled: func(err error) bool {
				var e *smithy.GenericAPIError
				return errors.As(err, &e) && e.ErrorFault() == smithy.FaultServer
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(tc.operation), Fault: tc.fault, Rate: 1})
			before := p.Stats().Op(tc.operation)
			err := tc.call()
			if err == nil {
				t.Fatal("call succeeded through an injected fault")
			}
			if got := httpStatus(err); got != tc.status {
				t.Errorf("HTTP status = %d, want %d (err: %v)", got, tc.status, err)
			}
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code {
				t.Errorf("error code: got %v, want %s", err, tc.code)
			}
			if !tc.modeled(err) {
				t.Errorf("error %T (%v) is not the expected SDK type", err, err)
			}
			if isRetryable.IsErrorRetryable(err) != aws.TrueTernary {
				t.Errorf("the SDK's standard retryer would not retry %v", err)
			}
			after := p.Stats().Op(tc.operation)
			if after.Requests-before.Requests != 1 || after.Faults()-before.Faults() != 1 || after.Forwarded != before.Forwarded {
				t.Errorf("stats moved from %+v to %+v, want one request, one fault, nothing forwarded", before, after)
			}
		})
	}
}

// TestRetryableFaultsAreRetriedBySDK puts the proxy in front of the DynamoDB emulator: a
// bounded number of throttles or 5xx is absorbed by the SDK's retries (counted by the proxy),
// an unbounded one is surfaced after exactly MaxAttempts attempts and nothing is written.
func TestRetryableFaultsAreRetriedBySDK(t *testing.T) {
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	p := start(t, os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	const attempts = 3
	client := dynamoVia(t, p.URL(), attempts)

	cases := []struct {
		name      string
		fault     faultproxy.Fault
		count     int
		wantErr   bool
		wantCode  string
		wantFault func(faultproxy.OpStats) int
	}{
		{"two throttles then success", faultproxy.Throttle, 2, false, "", func(o faultproxy.OpStats) int { return o.Throttled }},
		{"two 500s then success", faultproxy.ServerError, 2, false, "", func(o faultproxy.OpStats) int { return o.ServerErrors }},
		{"throttled on every attempt", faultproxy.Throttle, 0, true, "ProvisionedThroughputExceededException", func(o faultproxy.OpStats) int { return o.Throttled }},
		{"500 on every attempt", faultproxy.ServerError, 0, true, "InternalServerError", func(o faultproxy.OpStats) int { return o.ServerErrors }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk := "retry-" + string(rune('a'+i))
			p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opPutItem), Fault: tc.fault, Rate: 1, Count: tc.count})
			before := p.Stats().Op(opPutItem)
			_, err := client.PutItem(ctx, putItemInput(table, pk))
			after := p.Stats().Op(opPutItem)
			requests, faults, forwarded := after.Requests-before.Requests, tc.wantFault(after)-tc.wantFault(before), after.Forwarded-before.Forwarded

			if tc.wantErr {
				var api smithy.APIError
				if err == nil || !errors.As(err, &api) || api.ErrorCode() != tc.wantCode {
					t.Fatalf("err = %v, want %s", err, tc.wantCode)
				}
				if !strings.Contains(err.Error(), "PutItem") {
					t.Errorf("error %q does not name the operation", err)
				}
				if requests != attempts || faults != attempts || forwarded != 0 {
					t.Errorf("requests=%d faults=%d forwarded=%d, want %d, %d, 0", requests, faults, forwarded, attempts, attempts)
				}
				if itemExists(t, table, pk) {
					t.Error("item written although every attempt was answered by the proxy")
				}
				return
			}
			if err != nil {
				t.Fatalf("PutItem: %v", err)
			}
			if requests != tc.count+1 || faults != tc.count || forwarded != 1 {
				t.Errorf("requests=%d faults=%d forwarded=%d, want %d, %d, 1", requests, faults, forwarded, tc.count+1, tc.count)
			}
			if !itemExists(t, table, pk) {
				t.Error("item missing after a successful retried PutItem")
			}
		})
	}
}

// TestNonRetryableErrorsPassThrough checks the proxy forwards the service's own error responses
// verbatim: the SDK surfaces them after one attempt with their modeled type.
func TestNonRetryableErrorsPassThrough(t *testing.T) {
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	p := start(t, os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	client := dynamoVia(t, p.URL(), 3)

	cases := []struct {
		name  string
		call  func() error
		check func(error) bool
	}{
		{
			name: "missing table",
			call: func() error {
				_, err := client.PutItem(ctx, putItemInput(table+"-missing", "x"))
				return err
			},
			check: func(err error) bool { var e *ddbtypes.ResourceNotFoundException; return errors.As(err, &e) },
		},
		{
			name: "failed condition",
			call: func() error {
				in := putItemInput(table, "cond")
				in.ConditionExpression = aws.String("attribute_exists(pk)")
				_, err := client.PutItem(ctx, in)
				return err
			},
			check: func(err error) bool { var e *ddbtypes.ConditionalCheckFailedException; return errors.As(err, &e) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Stats().Op(opPutItem)
			err := tc.call()
			after := p.Stats().Op(opPutItem)
			if err == nil || !tc.check(err) {
				t.Fatalf("err = %v (%T)", err, err)
			}
			if after.Requests-before.Requests != 1 || after.Forwarded-before.Forwarded != 1 || after.Faults() != before.Faults() {
				t.Errorf("stats %+v -> %+v, want exactly one forwarded request", before, after)
			}
		})
	}
}

// TestDropAfterForwardReallyForwards: the client sees an error but the write happened.
func TestDropAfterForwardReallyForwards(t *testing.T) {
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	p := start(t, os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))

	t.Run("single attempt sees an error, item exists", func(t *testing.T) {
		p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opPutItem), Fault: faultproxy.DropAfterForward, Rate: 1})
		_, err := dynamoVia(t, p.URL(), 1).PutItem(ctx, putItemInput(table, "dropped-after"))
		if err == nil {
			t.Fatal("PutItem succeeded although its response was dropped")
		}
		if !itemExists(t, table, "dropped-after") {
			t.Fatal("DropAfterForward did not forward the write")
		}
		if s := p.Stats().Op(opPutItem); s.DroppedAfter != 1 || s.Forwarded != 1 {
			t.Errorf("stats = %+v, want one forwarded and dropped request", s)
		}
	})
	t.Run("the SDK retries a dropped response", func(t *testing.T) {
		p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opPutItem), Fault: faultproxy.DropAfterForward, Rate: 1, Count: 1})
		before := p.Stats().Op(opPutItem)
		if _, err := dynamoVia(t, p.URL(), 3).PutItem(ctx, putItemInput(table, "dropped-retried")); err != nil {
			t.Fatalf("PutItem: %v", err)
		}
		after := p.Stats().Op(opPutItem)
		if after.Requests-before.Requests != 2 || after.Forwarded-before.Forwarded != 2 || after.DroppedAfter-before.DroppedAfter != 1 {
			t.Errorf("stats %+v -> %+v, want 2 forwarded requests, 1 dropped", before, after)
		}
	})
	t.Run("drop before forward writes nothing", func(t *testing.T) {
		p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opPutItem), Fault: faultproxy.DropBeforeForward, Rate: 1})
		_, err := dynamoVia(t, p.URL(), 1).PutItem(ctx, putItemInput(table, "dropped-before"))
		if err == nil {
			t.Fatal("PutItem succeeded although its connection was dropped")
		}
		if itemExists(t, table, "dropped-before") {
			t.Fatal("DropBeforeForward forwarded the write")
		}
	})
	t.Run("delay forwards", func(t *testing.T) {
		p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opPutItem), Fault: faultproxy.Delay(20 * time.Millisecond), Rate: 1})
		before := p.Stats().Op(opPutItem)
		if _, err := dynamoVia(t, p.URL(), 1).PutItem(ctx, putItemInput(table, "delayed")); err != nil {
			t.Fatalf("PutItem: %v", err)
		}
		after := p.Stats().Op(opPutItem)
		if after.Delayed-before.Delayed != 1 || after.Forwarded-before.Forwarded != 1 || !itemExists(t, table, "delayed") {
			t.Errorf("stats %+v -> %+v; delayed write must be forwarded once", before, after)
		}
	})
}

// TestRulesSelectByOperation: faults hit only the matched operation.
func TestRulesSelectByOperation(t *testing.T) {
	ctx := context.Background()
	table := stacktest.CheckpointTable(t)
	p := start(t, os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"))
	client := dynamoVia(t, p.URL(), 1)
	p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opGetItem), Fault: faultproxy.Throttle, Rate: 1})

	if _, err := client.PutItem(ctx, putItemInput(table, "ops")); err != nil {
		t.Fatalf("PutItem must not be affected by a GetItem rule: %v", err)
	}
	_, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: putItemInput(table, "ops").Item})
	var throttled *ddbtypes.ProvisionedThroughputExceededException
	if !errors.As(err, &throttled) {
		t.Fatalf("GetItem err = %v, want throttled", err)
	}
	s := p.Stats()
	if s.Op(opPutItem).Faults() != 0 || s.Op(opGetItem).Throttled != 1 || s.Total().Requests != 2 {
		t.Errorf("stats = %+v", s.Ops)
	}
}

// TestSQSThroughProxy checks forwarding to the SQS emulator (Host kept, bodies verbatim) and a
// retried injected throttle.
func TestSQSThroughProxy(t *testing.T) {
	ctx := context.Background()
	url := stacktest.Queue(t, "fp", false)
	p := start(t, os.Getenv("AWS_ENDPOINT_URL_SQS"))
	client := sqsVia(t, p.URL(), 3)
	p.SetRules(faultproxy.Rule{Match: faultproxy.Ops(opSendMsg), Fault: faultproxy.Throttle, Rate: 1, Count: 1})

	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("through the proxy")}); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if s := p.Stats().Op(opSendMsg); s.Requests != 2 || s.Throttled != 1 || s.Forwarded != 1 {
		t.Errorf("stats = %+v, want a throttled attempt and a forwarded retry", s)
	}
	out, err := stacktest.SQS(t).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "through the proxy" {
		t.Fatalf("received %+v, want the one message sent through the proxy", out.Messages)
	}
}

// rawStatuses sends n bare requests for op and returns their status codes.
func rawStatuses(t *testing.T, url, op string, n int) []int {
	t.Helper()
	codes := make([]int, n)
	for i := range codes {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[i] = resp.StatusCode
	}
	return codes
}

// TestRateIsSeededAndCountBounded: a seed fixes which requests get faults; Count caps them.
func TestRateIsSeededAndCountBounded(t *testing.T) {
	const n = 300
	rule := faultproxy.Rule{Match: faultproxy.Service("DynamoDB_20120810"), Fault: faultproxy.Throttle, Rate: 0.3}
	pattern := func(seed int64, r faultproxy.Rule) []int {
		p := start(t, deadTarget, faultproxy.WithSeed(seed))
		p.SetRules(r)
		return rawStatuses(t, p.URL(), opPutItem, n)
	}
	count := func(codes []int, code int) int {
		c := 0
		for _, x := range codes {
			if x == code {
				c++
			}
		}
		return c
	}

	a, b, c := pattern(7, rule), pattern(7, rule), pattern(8, rule)
	if fmtInts(a) != fmtInts(b) {
		t.Error("same seed gave different fault patterns")
	}
	if fmtInts(a) == fmtInts(c) {
		t.Error("different seeds gave the same fault pattern over 300 draws")
	}
	// Binomial(300, 0.3): mean 90, sd ~7.9; 50..130 is over five standard deviations wide.
	if k := count(a, http.StatusBadRequest); k < 50 || k > 130 {
		t.Errorf("%d of %d requests throttled at rate 0.3", k, n)
	}
	if k := count(a, http.StatusBadRequest) + count(a, http.StatusBadGateway); k != n {
		t.Errorf("%d requests neither throttled nor forwarded", n-k)
	}

	capped := rule
	capped.Rate, capped.Count = 1, 5
	got := pattern(1, capped)
	for i, code := range got {
		want := http.StatusBadGateway // forwarded to the dead target
		if i < 5 {
			want = http.StatusBadRequest
		}
		if code != want {
			t.Fatalf("request %d: status %d, want %d", i, code, want)
		}
	}

	never := rule
	never.Rate = 0
	if k := count(pattern(1, never), http.StatusBadRequest); k != 0 {
		t.Errorf("rate 0 injected %d faults", k)
	}
}

func fmtInts(xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(http.StatusText(x))
		b.WriteByte(' ')
	}
	return b.String()
}

// TestConcurrentRequestsRespectCount: Count holds under concurrent requests and concurrent
// SetRules calls (run with -race).
func TestConcurrentRequestsRespectCount(t *testing.T) {
	p := start(t, deadTarget)
	p.SetRules(faultproxy.Rule{Fault: faultproxy.Throttle, Rate: 1, Count: 10})

	var wg sync.WaitGroup
	var mu sync.Mutex
	throttled := 0
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes := rawStatuses(t, p.URL(), opPutItem, 10)
			mu.Lock()
			defer mu.Unlock()
			for _, c := range codes {
				if c == http.StatusBadRequest {
					throttled++
				}
			}
		}()
	}
	wg.Wait()
	if throttled != 10 {
		t.Fatalf("%d requests throttled, want exactly Count=10", throttled)
	}
	if s := p.Stats().Op(opPutItem); s.Requests != 80 || s.Throttled != 10 || s.ForwardErrors != 70 {
		t.Errorf("stats = %+v", s)
	}

	// Rules replaced while requests are in flight.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p.SetRules(faultproxy.Rule{Fault: faultproxy.ServerError, Rate: float64(i%2) * 0.5})
		}
	}()
	for _, c := range rawStatuses(t, p.URL(), opPutItem, 50) {
		if c != http.StatusInternalServerError && c != http.StatusBadGateway {
			t.Errorf("unexpected status %d", c)
		}
	}
	close(stop)
	<-done
}

func TestStartRejectsBadTargetsAndCloseIsIdempotent(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:4569", "ftp://127.0.0.1", "http://"} {
		if p, err := faultproxy.Start(target); err == nil {
			p.Close()
			t.Errorf("Start(%q) succeeded", target)
		}
	}
	p, err := faultproxy.Start(deadTarget)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") {
		t.Errorf("URL = %q, want loopback", p.URL())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := http.Post(p.URL(), "application/json", strings.NewReader("{}")); err == nil {
		t.Error("closed proxy still answers")
	}
}
