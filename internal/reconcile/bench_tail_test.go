package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/ddbsize"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/local/ddbmeter"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// tailEntryRecords is the size of the ledger entries of the tail: consumer batches of 100.
const tailEntryRecords = 100

// tailData is benchSetup's stream (10,000 records, all processed) with a ledger table of its own
// holding, besides the stream's 100 entries, tail entries past the checkpoint.
type tailData struct {
	*benchData
	ledgerTable string
	build       time.Duration
}

var (
	tailOnce  = map[int]*sync.Once{}
	tailSets  = map[int]*tailData{}
	tailMutex sync.Mutex
)

// tailSetup builds the shape with tail entries once, on base's stream. The tail is written straight into the
// table with BatchWriteItem (25 items a call, 4 calls at once), in the layout docs/ledger.md
// documents: entries of 100 records each, consecutive records 1-3 x 2^80 apart (the seed
// report's spacing), starting right after the checkpoint. Bounded: 10 minutes at most.
func tailSetup(b *testing.B, base *benchData, tail int) *tailData {
	b.Helper()
	tailMutex.Lock()
	once, ok := tailOnce[tail]
	if !ok {
		once = &sync.Once{}
		tailOnce[tail] = once
	}
	tailMutex.Unlock()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ddb := stacktest.DynamoDB(b)
		d := &tailData{benchData: base, ledgerTable: stacktest.LedgerTable(b)}
		shard := recordid.Shard{Group: "bench", Stream: base.stream, ShardID: base.shardID}
		ledger := dedupe.New(ddb, d.ledgerTable)
		for i := 0; i < benchVerify; i += consumerBatch {
			e := dedupe.Entry{First: base.seqs[i], Last: base.seqs[i+consumerBatch-1], Source: dedupe.SourceConsumer}
			for _, s := range base.seqs[i : i+consumerBatch] {
				e.Done = append(e.Done, recordid.ID{ShardID: base.shardID, Seq: s})
			}
			if err := ledger.Record(ctx, shard, e); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		items := make(chan []ddbtypes.WriteRequest, 8)
		errs := make(chan error, 4)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for reqs := range items {
					for len(reqs) > 0 {
						out, err := ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{d.ledgerTable: reqs}})
						if err != nil {
							errs <- err
							for range items { // drain
							}
							return
						}
						reqs = out.UnprocessedItems[d.ledgerTable]
					}
				}
			})
		}
		seq, _ := new(big.Int).SetString(base.seqs[len(base.seqs)-1], 10)
		step := new(big.Int).Lsh(big.NewInt(1), 80)
		expires := strconv.FormatInt(time.Now().Add(dedupe.DefaultTTL).Unix(), 10)
		var batch []ddbtypes.WriteRequest
		for k := range tail {
			ids := make([]recordid.ID, tailEntryRecords)
			for i := range ids {
				seq.Add(seq, new(big.Int).Mul(step, big.NewInt(int64(1+(k+i)%3))))
				ids[i] = recordid.ID{ShardID: base.shardID, Seq: seq.String()}
			}
			set, err := dedupe.AppendSet(nil, ids)
			if err != nil {
				b.Fatal(err)
			}
			first, last := ids[0].Seq, ids[len(ids)-1].Seq
			batch = append(batch, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: map[string]ddbtypes.AttributeValue{
				schema.PartitionKey: &ddbtypes.AttributeValueMemberS{Value: "L" + recordid.Separator + shard.String()},
				schema.SortKey:      &ddbtypes.AttributeValueMemberS{Value: seqnum.MustEncode(last) + "#B#tail" + strconv.Itoa(k) + "#0"},
				"first":             &ddbtypes.AttributeValueMemberS{Value: first},
				"last":              &ddbtypes.AttributeValueMemberS{Value: last},
				"firstEnc":          &ddbtypes.AttributeValueMemberS{Value: seqnum.MustEncode(first)},
				"src":               &ddbtypes.AttributeValueMemberS{Value: dedupe.SourceConsumer},
				schema.TTLAttribute: &ddbtypes.AttributeValueMemberN{Value: expires},
				"ids":               &ddbtypes.AttributeValueMemberB{Value: set},
			}}})
			if len(batch) == 25 || k == tail-1 {
				select {
				case items <- batch:
				case err := <-errs:
					b.Fatalf("tail: %v", err)
				}
				batch = nil
			}
		}
		close(items)
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatalf("tail: %v", err)
		default:
		}
		d.build = time.Since(start)
		b.Logf("tail of %d entries (%d records) written in %.1f s", tail, tail*tailEntryRecords, d.build.Seconds())
		tailSets[tail] = d
	})
	d := tailSets[tail]
	if d == nil {
		b.Fatal("benchmark setup failed earlier")
	}
	return d
}

// queryLog is the ledger's DynamoDB client, remembering every Query it sends.
type queryLog struct {
	*dynamodb.Client
	mu      sync.Mutex
	queries []*dynamodb.QueryInput
}

func (q *queryLog) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q.mu.Lock()
	if !slices.Contains(q.queries, in) { // a lookup's next page reuses its input
		q.queries = append(q.queries, in)
	}
	q.mu.Unlock()
	return q.Client.Query(ctx, in, opts...)
}

// chargedUnits is what DynamoDB charges for in: every item the key condition reads, 1 unit per
// 4 KB of each (1 MB) page, strongly consistent; a filter does not reduce it, so in is re-run
// without its filter. unbounded replaces the key condition by sk >= :from (the lookup before
// it was bounded). It returns the units and the items read.
func chargedUnits(b *testing.B, ddb *dynamodb.Client, in *dynamodb.QueryInput, unbounded bool) (float64, int) {
	b.Helper()
	q := *in
	q.FilterExpression, q.ExclusiveStartKey = nil, nil
	q.ExpressionAttributeNames = map[string]string{"#pk": schema.PartitionKey, "#sk": schema.SortKey}
	q.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":pk": in.ExpressionAttributeValues[":pk"], ":from": in.ExpressionAttributeValues[":from"]}
	if up, ok := in.ExpressionAttributeValues[":upto"]; ok && !unbounded {
		q.ExpressionAttributeValues[":upto"] = up
	} else {
		q.KeyConditionExpression = aws.String("#pk = :pk AND #sk >= :from")
	}
	units, n := 0.0, 0
	for {
		out, err := ddb.Query(context.Background(), &q)
		if err != nil {
			b.Fatal(err)
		}
		bytes := 0
		for _, it := range out.Items {
			bytes += ddbsize.ItemSize(it)
		}
		n += len(out.Items)
		units += math.Ceil(float64(bytes) / 4096)
		if len(out.LastEvaluatedKey) == 0 {
			return units, n
		}
		q.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// BenchmarkVerifyTail measures one scheduled pass verifying 10,000 records the consumer already
// processed, with a ledger tail of 0, 10,000 and 100,000 entries of 100 records past the
// checkpoint (the settle window's and the verification window's traffic): records verified per
// second, read units per record as DynamoDB charges them for the bounded lookup
// (rcu-charged/rec) and for the same lookup unbounded, as before (rcu-unbounded/rec), and the
// ledger items each reads. docs/benchmarks.md records the results and the command.
func BenchmarkVerifyTail(b *testing.B) {
	base := benchSetup(b, 0) // the stream lives as long as the parent benchmark
	for _, tail := range []int{0, 10000, 100000} {
		b.Run(fmt.Sprintf("tail=%d", tail), func(b *testing.B) {
			d := tailSetup(b, base, tail)
			ctx := context.Background()
			meterC := ddbmeter.New()
			ddbC := dynamodb.NewFromConfig(stacktest.Config(b), meterC.Options())
			plain := stacktest.DynamoDB(b)
			kin := stacktest.Kinesis(b)
			shard := recordid.Shard{Group: "bench", Stream: d.stream, ShardID: d.shardID}
			var charged, unbounded float64
			var itemsBounded, itemsUnbounded, lookups int
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				cps := checkpoint.New(ddbC, stacktest.CheckpointTable(b))
				if _, err := cps.Advance(ctx, shard, d.seqs[benchVerify-1]); err != nil {
					b.Fatal(err)
				}
				ql := &queryLog{Client: stacktest.DynamoDB(b)}
				p, err := pipeline.New(pipeline.DedupeLedger{L: dedupe.New(ql, d.ledgerTable)}, pipeline.CheckpointStore{S: cps}, nopParker{},
					func(context.Context, pipeline.Record) error { return nil }, pipeline.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				r, err := New(kin, cps, p, Config{Group: "bench", Stream: d.stream, ReadInterval: time.Millisecond},
					WithClock(later), WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				meterC.Reset()
				start := time.Now()
				b.StartTimer()
				rep, err := r.Run(ctx)
				b.StopTimer()
				elapsed += time.Since(start)
				if err != nil || rep.RecordsVerified != benchVerify || rep.GapsDetected != 0 {
					b.Fatalf("pass: verified %d gaps %d err %v", rep.RecordsVerified, rep.GapsDetected, err)
				}
				charged += meterC.Snapshot().Total.ReadUnits // the checkpoint reads: unfiltered, metered exactly
				unbounded += meterC.Snapshot().Total.ReadUnits
				for _, in := range ql.queries {
					u, n := chargedUnits(b, plain, in, false)
					charged, itemsBounded = charged+u, itemsBounded+n
					u, n = chargedUnits(b, plain, in, true)
					unbounded, itemsUnbounded = unbounded+u, itemsUnbounded+n
				}
				lookups += len(ql.queries)
			}
			n := float64(b.N)
			b.ReportMetric(benchVerify*n/elapsed.Seconds(), "records/s")
			b.ReportMetric(charged/n/benchVerify, "rcu-charged/rec")
			b.ReportMetric(unbounded/n/benchVerify, "rcu-unbounded/rec")
			b.ReportMetric(float64(itemsBounded)/n, "items-read")
			b.ReportMetric(float64(itemsUnbounded)/n, "items-unbounded")
			b.ReportMetric(float64(lookups)/n, "lookups")
			b.ReportMetric(d.build.Seconds(), "tail-build-s")
		})
	}
}
