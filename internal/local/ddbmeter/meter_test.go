package ddbmeter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
)

func TestMain(m *testing.M) { os.Exit(stacktest.Run(m, localstack.DynamoDB)) }

func item(pk, sk string, blob int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk},
		"sk": &types.AttributeValueMemberS{Value: sk},
		"b":  &types.AttributeValueMemberB{Value: make([]byte, blob)},
	}
}

// TestMeterAgainstStack drives real calls through the SDK and checks calls, attempts, items
// and units as the middleware sees them.
func TestMeterAgainstStack(t *testing.T) {
	ctx := context.Background()
	table := stacktest.LedgerTable(t)
	m := ddbmeter.New()
	client := dynamodb.NewFromConfig(stacktest.Config(t), m.Options())

	// 2,000-byte blob + keys: 2 WCU each.
	for i, sk := range []string{"a", "b", "c"} {
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item("p", sk, 2000+i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A failed condition still costs its write.
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item("p", "a", 1),
		ConditionExpression: aws.String("attribute_not_exists(pk)")})
	if err == nil {
		t.Fatal("conditional put on an existing item succeeded")
	}
	out, err := client.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table),
		KeyConditionExpression:    aws.String("pk = :p"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: "p"}},
		ConsistentRead:            aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 3 {
		t.Fatalf("query returned %d items, want 3", len(out.Items))
	}
	if _, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "p"}, "sk": &types.AttributeValueMemberS{Value: "zz"}}}); err != nil {
		t.Fatal(err)
	}

	s := m.Snapshot()
	put := s.Ops["PutItem"]
	// Item sizes: "pk"+"p" 3, "sk"+sk 3, "b"+blob → 2007, 2008, 2009 and 8 for the failed one.
	if put.Calls != 4 || put.Attempts != 4 || put.Errors != 1 || put.ItemsWritten != 4 || put.WriteUnits != 2+2+2+1 {
		t.Fatalf("PutItem stats %+v", put)
	}
	q := s.Ops["Query"]
	// 2007+2008+2009 = 6024 bytes, one consistent Query: ceil(6024/4096) = 2 RCU.
	if q.Calls != 1 || q.ItemsRead != 3 || q.BytesRead != 6024 || q.ReadUnits != 2 {
		t.Fatalf("Query stats %+v", q)
	}
	if g := s.Ops["GetItem"]; g.Calls != 1 || g.ItemsRead != 0 || g.ReadUnits != 0.5 {
		t.Fatalf("GetItem stats %+v", g)
	}
	if s.Total.Calls != 6 || s.Total.WriteUnits != 7 || s.Total.ReadUnits != 2.5 {
		t.Fatalf("total %+v", s.Total)
	}

	before := m.Snapshot()
	if _, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "p"}, "sk": &types.AttributeValueMemberS{Value: "a"}}}); err != nil {
		t.Fatal(err)
	}
	if d := m.Snapshot().Sub(before); d.Total.Calls != 1 || d.Total.ReadUnits != 1 || d.Ops["GetItem"].BytesRead != 2007 {
		t.Fatalf("delta %+v", d.Total)
	}

	m.Reset()
	if s := m.Snapshot(); s.Total != (ddbmeter.OpStats{}) || len(s.Ops) != 0 {
		t.Fatalf("after Reset: %+v", s)
	}
}

// TestMeterCountsRetriesAsAttempts serves two 500 responses before a success: one logical call,
// three HTTP attempts.
func TestMeterCountsRetriesAsAttempts(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if hits.Add(1) <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()

	m := ddbmeter.New()
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("k", "s", ""),
		Retryer:      stacktest.Config(t).Retryer(),
	}, m.Options())
	if _, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("t"), Item: item("p", "s", 0)}); err != nil {
		t.Fatalf("PutItem after retries: %v", err)
	}
	s := m.Snapshot().Ops["PutItem"]
	if s.Calls != 1 || s.Attempts != 3 || s.Errors != 0 || s.WriteUnits != 1 {
		t.Fatalf("stats %+v, want 1 call, 3 attempts, 1 WCU", s)
	}
	if hits.Load() != 3 {
		t.Fatalf("server saw %d requests, want 3", hits.Load())
	}
}

// TestMeterConcurrent shares one meter between goroutines (run with -race).
func TestMeterConcurrent(t *testing.T) {
	ctx := context.Background()
	table := stacktest.LedgerTable(t)
	m := ddbmeter.New()
	client := dynamodb.NewFromConfig(stacktest.Config(t), m.Options())
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
					Item: item("c", string(rune('a'+w))+string(rune('a'+i)), 10)})
				errs <- err
				_ = m.Snapshot()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := m.Snapshot().Ops["PutItem"]; s.Calls != workers*each || s.ItemsWritten != workers*each {
		t.Fatalf("stats %+v, want %d calls", s, workers*each)
	}
}

// TestAPIOptionMetersOnlyDynamoDB puts the meter on a whole aws.Config: the DynamoDB client
// built from it is metered, an SQS client built from the same config is not.
func TestAPIOptionMetersOnlyDynamoDB(t *testing.T) {
	ctx := context.Background()
	m := ddbmeter.New()
	cfg := stacktest.Config(t).Copy()
	cfg.APIOptions = append(cfg.APIOptions, m.APIOption)
	if _, err := dynamodb.NewFromConfig(cfg).ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	// No SQS endpoint is needed: the call passes the middleware before it fails to connect.
	_, _ = sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.RetryMaxAttempts = 1
	}).ListQueues(ctx, &sqs.ListQueuesInput{})
	s := m.Snapshot()
	if s.Total.Calls != 1 || s.Total.Attempts != 1 || s.Ops["ListTables"].Calls != 1 {
		t.Errorf("snapshot %+v, want exactly the one ListTables call and attempt", s)
	}
	if _, ok := s.Ops["ListQueues"]; ok {
		t.Errorf("the SQS call was metered: %+v", s.Ops["ListQueues"])
	}
}
