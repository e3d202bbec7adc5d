package loadgen

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type sqstypesEntry struct{ id, handle string }

func deleteAll(ctx context.Context, client sqsAPI, queueURL string, entries []sqstypesEntry) error {
	if len(entries) == 0 {
		return nil
	}
	in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL)}
	for i, e := range entries {
		in.Entries = append(in.Entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(e.handle)})
	}
	out, err := client.DeleteMessageBatch(ctx, in)
	if err != nil {
		return fmt.Errorf("loadgen: delete from %s: %w", queueURL, err)
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("loadgen: delete from %s: %d entries failed (first: %s)", queueURL, len(out.Failed), aws.ToString(out.Failed[0].Message))
	}
	return nil
}
