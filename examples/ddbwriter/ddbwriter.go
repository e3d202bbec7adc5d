// Package ddbwriter is a complete custom gapless service: its Process writes every record of
// the stream to a DynamoDB table (OUTPUT_TABLE), once. gapless makes sure no record is skipped;
// the Process makes a record that arrives twice harmless, with a conditional write keyed by the
// record's id.
//
// It is its own Go module, built against the public package github.com/gapless-dev/gapless only
// (its module path is outside the gapless module, so the compiler would refuse anything under
// gapless's internal/). functions/consumer and functions/reconciler are its two Lambda
// functions; template.yaml deploys them with sam build && sam deploy --guided.
package ddbwriter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless"
)

// EnvOutputTable names the table the records are written to (template.yaml's OutputTable).
const EnvOutputTable = "OUTPUT_TABLE"

// Attribute names of an output item; the key is AttrID (a string, the record's id).
const (
	AttrID           = "id"
	AttrPartitionKey = "partitionKey"
	AttrData         = "data"
	AttrArrivalTime  = "arrivalTime"
)

// putItemAPI is the one DynamoDB call the Writer makes; *dynamodb.Client satisfies it.
type putItemAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

var _ putItemAPI = (*dynamodb.Client)(nil)

// Writer writes records to one table.
type Writer struct {
	client putItemAPI
	table  string
}

// New returns a Writer putting items into table through client.
func New(client putItemAPI, table string) *Writer { return &Writer{client: client, table: table} }

// Process is the gapless.ProcessFunc: it puts r as one item keyed by r.ID(), on the condition
// that no item has that id yet. A retry, a replay by the reconciler or a redrive of a record
// already written fails the condition, which is success: the item is there, written once. Any
// other error fails the record, which gapless retries and, after MAX_RECORD_ATTEMPTS, parks
// with its payload; a record over DynamoDB's 400 KB item size is such a record.
func (w *Writer) Process(ctx context.Context, r gapless.Record) error {
	item := map[string]types.AttributeValue{
		AttrID:           &types.AttributeValueMemberS{Value: r.ID()},
		AttrPartitionKey: &types.AttributeValueMemberS{Value: r.PartitionKey},
		AttrData:         &types.AttributeValueMemberB{Value: r.Data},
	}
	if !r.ArrivalTime.IsZero() {
		item[AttrArrivalTime] = &types.AttributeValueMemberS{Value: r.ArrivalTime.UTC().Format(time.RFC3339Nano)}
	}
	_, err := w.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(w.table),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": AttrID},
	})
	var written *types.ConditionalCheckFailedException
	if errors.As(err, &written) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ddbwriter: put record %s into %s: %w", r.ID(), w.table, err)
	}
	return nil
}

// Main is what both functions' main calls with gapless.StartConsumer or
// gapless.StartReconciler: it reads OUTPUT_TABLE and the AWS configuration, then starts the
// function around Writer.Process with that configuration (gapless reads its own variables). A
// missing OUTPUT_TABLE fails the cold start naming it.
func Main(start func(gapless.ProcessFunc, ...gapless.Option)) {
	table := os.Getenv(EnvOutputTable)
	if table == "" {
		fmt.Fprintf(os.Stderr, "ddbwriter: cold start failed: %s is required\n", EnvOutputTable)
		os.Exit(1)
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "ddbwriter: cold start failed: load AWS configuration: %v\n", err)
		os.Exit(1)
	}
	start(New(dynamodb.NewFromConfig(cfg), table).Process, gapless.WithAWSConfig(cfg))
}
