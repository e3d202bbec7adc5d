package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
)

// errNotFound marks a stream, table or group that does not exist where the command looked.
var errNotFound = errors.New("does not exist")

// checkNames makes sure the stream and tables a command was given exist, so that a typo is one
// line naming the flag and its variable instead of an SDK error (or, for the ledger, a silent
// table of zeros).
func checkNames(ctx context.Context, c opsClients, o *opsOptions) error {
	if _, err := c.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(o.stream)}); err != nil {
		var nf *kintypes.ResourceNotFoundException
		if errors.As(err, &nf) {
			return fmt.Errorf("stream %q %w (--stream or $%s)", o.stream, errNotFound, config.EnvStreamName)
		}
		return fmt.Errorf("stream %s: %w", o.stream, err)
	}
	for _, t := range []struct{ name, flag, env string }{
		{o.checkpointTable, "checkpoint-table", config.EnvCheckpointTable},
		{o.dedupeTable, "dedupe-table", config.EnvDedupeTable},
	} {
		if _, err := c.ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.name)}); err != nil {
			var nf *ddbtypes.ResourceNotFoundException
			if errors.As(err, &nf) {
				return fmt.Errorf("table %q %w (--%s or $%s)", t.name, errNotFound, t.flag, t.env)
			}
			return fmt.Errorf("table %s: %w", t.name, err)
		}
	}
	return nil
}

// checkGroup is called when no shard of the stream has a checkpoint of the group: when other
// groups have checkpoints on this stream, the group is wrong (an error listing them); when none
// has, nothing was consumed yet, which is said on stderr.
func checkGroup(ctx context.Context, c opsClients, o *opsOptions, stderr io.Writer) error {
	var groups []string
	p := dynamodb.NewScanPaginator(c.ddb, &dynamodb.ScanInput{
		TableName:                aws.String(o.checkpointTable),
		ProjectionExpression:     aws.String("#pk"),
		ExpressionAttributeNames: map[string]string{"#pk": schema.PartitionKey},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("table %s: %w", o.checkpointTable, err)
		}
		for _, it := range out.Items {
			pk, ok := it[schema.PartitionKey].(*ddbtypes.AttributeValueMemberS)
			if !ok {
				continue
			}
			if g, s, ok := strings.Cut(pk.Value, recordid.Separator); ok && s == o.stream && !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	if len(groups) > 0 {
		slices.Sort(groups)
		return fmt.Errorf("group %q %w on stream %s: table %s has checkpoints of group %s there (--group or $%s)",
			o.group, errNotFound, o.stream, o.checkpointTable, strings.Join(groups, ", "), config.EnvGroup)
	}
	fmt.Fprintf(stderr, "no group has a checkpoint on stream %s in table %s yet: nothing was consumed\n", o.stream, o.checkpointTable)
	return nil
}

// queueError says in one line that the parked queue does not exist, naming the flag and
// variable; other errors are returned as they are.
func queueError(err error, u string) error {
	var nq *sqstypes.QueueDoesNotExist
	if errors.As(err, &nq) {
		return fmt.Errorf("queue %q %w (--parked-queue or $%s)", u, errNotFound, config.EnvParkedQueueURL)
	}
	return err
}
