package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// benchData is a stream whose records were all processed by the consumer (ledger entries of
// consumerBatch records each): verifying it finds no gap, which is the reconciler's steady state.
type benchData struct {
	stream, shardID, ledgerTable string
	seqs                         []string
}

const (
	benchVerify   = 10000 // records verified per run (up to the checkpoint)
	consumerBatch = 100   // records per consumer invocation (ledger entry)
)

var (
	benchOnce  = map[int]*sync.Once{}
	benchSets  = map[int]*benchData{}
	benchMutex sync.Mutex
)

// benchSetup writes benchVerify+newer records and their ledger entries once per shape. newer
// records lie beyond the checkpoint but in the ledger: the traffic of the settle window, which
// a Lookup's Query reads and filters out.
func benchSetup(b *testing.B, newer int) *benchData {
	b.Helper()
	benchMutex.Lock()
	once, ok := benchOnce[newer]
	if !ok {
		once = &sync.Once{}
		benchOnce[newer] = once
	}
	benchMutex.Unlock()
	once.Do(func() {
		ctx := context.Background()
		kin, ddb := stacktest.Kinesis(b), stacktest.DynamoDB(b)
		d := &benchData{ledgerTable: stacktest.LedgerTable(b)}
		d.stream, _ = stacktest.Stream(b, 1)
		payload := []byte(`{"id":"order-0000000","amount":89.19,"customer":"customer-0001"}`) // ~64 bytes
		for len(d.seqs) < benchVerify+newer {
			in := &kinesis.PutRecordsInput{StreamName: aws.String(d.stream)}
			for i := range 500 {
				in.Records = append(in.Records, kintypes.PutRecordsRequestEntry{PartitionKey: aws.String(fmt.Sprint("customer-", i%64)), Data: payload})
			}
			out, err := kin.PutRecords(ctx, in)
			if err != nil || aws.ToInt32(out.FailedRecordCount) > 0 {
				b.Fatalf("PutRecords: %v (%d failed)", err, aws.ToInt32(out.FailedRecordCount))
			}
			for _, r := range out.Records {
				d.seqs, d.shardID = append(d.seqs, aws.ToString(r.SequenceNumber)), aws.ToString(r.ShardId)
			}
		}
		ledger := dedupe.New(ddb, d.ledgerTable)
		shard := recordid.Shard{Group: "bench", Stream: d.stream, ShardID: d.shardID}
		for i := 0; i < len(d.seqs); i += consumerBatch {
			e := dedupe.Entry{First: d.seqs[i], Last: d.seqs[i+consumerBatch-1], Source: dedupe.SourceConsumer}
			for _, s := range d.seqs[i : i+consumerBatch] {
				e.Done = append(e.Done, recordid.ID{ShardID: d.shardID, Seq: s})
			}
			if err := ledger.Record(ctx, shard, e); err != nil {
				b.Fatal(err)
			}
		}
		benchSets[newer] = d
	})
	d := benchSets[newer]
	if d == nil {
		b.Fatal("benchmark setup failed earlier")
	}
	return d
}

// lookupLog remembers the first sequence number of every ledger Lookup.
type lookupLog struct {
	pipeline.Ledger
	mu     sync.Mutex
	firsts []string
}

func (l *lookupLog) Lookup(ctx context.Context, shard recordid.Shard, first, last string) (pipeline.View, error) {
	l.mu.Lock()
	l.firsts = append(l.firsts, first)
	l.mu.Unlock()
	return l.Ledger.Lookup(ctx, shard, first, last)
}

// queryReadUnits is what DynamoDB charges for the ledger Query of a Lookup from first: the
// strongly consistent read of every item with sk >= Encode(first), filtered or not, 1 unit per
// 4 KB of the items of each (1 MB) page ("Query ... DynamoDB computes the total size of all items
// and then rounds up to the next 4 KB boundary"; a filter does not reduce it). ddbmeter only
// sees the items returned, so it is computed here with an unfiltered Query.
func queryReadUnits(b *testing.B, ddb *dynamodb.Client, table string, shard recordid.Shard, first string) float64 {
	b.Helper()
	in := &dynamodb.QueryInput{
		TableName:                aws.String(table),
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk >= :from"),
		ExpressionAttributeNames: map[string]string{"#pk": schema.PartitionKey, "#sk": schema.SortKey},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":pk":   &ddbtypes.AttributeValueMemberS{Value: "L" + recordid.Separator + shard.String()}, // dedupe's documented layout
			":from": &ddbtypes.AttributeValueMemberS{Value: seqnum.MustEncode(first)},
		},
		ConsistentRead: aws.Bool(true),
	}
	units := 0.0
	for {
		out, err := ddb.Query(context.Background(), in)
		if err != nil {
			b.Fatal(err)
		}
		bytes := 0
		for _, it := range out.Items {
			bytes += ddbsize.ItemSize(it)
		}
		units += math.Ceil(float64(bytes) / 4096)
		if len(out.LastEvaluatedKey) == 0 {
			return units
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// BenchmarkVerify measures one scheduled pass verifying 10,000 records that the consumer
// already processed (newer=N: with N more records beyond the checkpoint in the ledger, as the
// settle window holds): Kinesis GetRecords calls and DynamoDB read units per 10,000 records
// verified, and records verified per second on the local stack. docs/reconciler.md records the
// results and the command.
func BenchmarkVerify(b *testing.B) {
	for _, newer := range []int{0, 20000} {
		b.Run(fmt.Sprintf("newer=%d", newer), func(b *testing.B) {
			d := benchSetup(b, newer)
			ctx := context.Background()
			meterL, meterC := ddbmeter.New(), ddbmeter.New() // ledger, checkpoint mirror
			ddbL := dynamodb.NewFromConfig(stacktest.Config(b), meterL.Options())
			ddbC := dynamodb.NewFromConfig(stacktest.Config(b), meterC.Options())
			plain := stacktest.DynamoDB(b)
			kin := stacktest.Kinesis(b)
			shard := recordid.Shard{Group: "bench", Stream: d.stream, ShardID: d.shardID}
			var calls, pages int
			var metered, charged, writes float64
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				// A fresh checkpoint table per pass: the checkpoint on record benchVerify-1, no watermark.
				cps := checkpoint.New(ddbC, stacktest.CheckpointTable(b))
				if _, err := cps.Advance(ctx, shard, d.seqs[benchVerify-1]); err != nil {
					b.Fatal(err)
				}
				log := &lookupLog{Ledger: pipeline.DedupeLedger{L: dedupe.New(ddbL, d.ledgerTable)}}
				p, err := pipeline.New(log, pipeline.CheckpointStore{S: cps}, nopParker{}, func(context.Context, pipeline.Record) error { return nil }, pipeline.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				r, err := New(kin, cps, p, Config{Group: "bench", Stream: d.stream, ReadInterval: time.Millisecond},
					WithClock(later), WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				meterL.Reset()
				meterC.Reset()
				start := time.Now()
				b.StartTimer()
				rep, err := r.Run(ctx)
				b.StopTimer()
				elapsed += time.Since(start)
				if err != nil || rep.RecordsVerified != benchVerify || rep.GapsDetected != 0 {
					b.Fatalf("pass: verified %d gaps %d err %v", rep.RecordsVerified, rep.GapsDetected, err)
				}
				l, c := meterL.Snapshot(), meterC.Snapshot()
				calls += rep.GetRecordsCalls
				pages += len(log.firsts)
				metered += l.Total.ReadUnits + c.Total.ReadUnits
				writes += l.Total.WriteUnits + c.Total.WriteUnits
				charged += c.Total.ReadUnits // the checkpoint List: unfiltered, metered exactly
				for _, f := range log.firsts {
					charged += queryReadUnits(b, plain, d.ledgerTable, shard, f)
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(calls)/n, "getrecords/10k")
			b.ReportMetric(float64(pages)/n, "lookups/10k")
			b.ReportMetric(metered/n/benchVerify, "rcu-returned/rec")
			b.ReportMetric(charged/n/benchVerify, "rcu-charged/rec")
			b.ReportMetric(writes/n/benchVerify, "wcu/rec")
			b.ReportMetric(benchVerify*n/elapsed.Seconds(), "records/s")
		})
	}
}

// nopParker accepts every record (for pipelines whose Process never fails).
type nopParker struct{}

func (nopParker) Park(context.Context, park.Record) (park.Result, error) {
	return park.Result{MessageID: "nop"}, nil
}
