package bench

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/local/bench/checksum"
	"github.com/gapless-dev/gapless/internal/pipeline"
)

// Workload shape. Every handler sees exactly the same events.
const (
	// Keys is the number of distinct partition keys of the shard.
	Keys = 64
	// DataBytes is the size of each record's data (a JSON object), chosen so that a batch of
	// 10,000 records is an invocation payload just under Lambda's 6 MB limit: the event's
	// metadata costs about 560 bytes per record, the base64 data the rest.
	DataBytes = 48
	// Region and account of the synthetic event source.
	region  = "us-east-1"
	account = "000000000000"
)

// seqBase is a 56-digit sequence number like the ones Kinesis hands out; consecutive records
// of a shard are 1, 2 or 3 times 2^80 apart, the spacing seen in the field report (see
// internal/dedupe's benchmarks), which is what the ledger's delta encoding has to cope with.
var (
	seqBase, _ = new(big.Int).SetString("49590338271490256608559692538361571095921575989136588898", 10)
	seqStep    = new(big.Int).Lsh(big.NewInt(1), 80)
)

// Workload generates the records of one synthetic shard. Record g (from 0) has partition key
// g mod Keys and a sequence number increasing with g. With ParallelizationFactor pf, lane l
// (0 <= l < pf) holds the records whose key index is l mod pf: the lanes' keys are disjoint,
// as with the event-source mapping, which assigns lanes by partition-key hash.
type Workload struct {
	Stream  string
	ShardID string
	Arrival time.Time
}

// seq is the sequence number of record g: base + 2^80 * sum_{i<=g} (1 + i mod 3).
func seq(g int) string {
	c, r := (g+1)/3, (g+1)%3
	sum := int64(g+1) + int64(3*c)
	if r == 2 {
		sum++
	}
	v := new(big.Int).Mul(seqStep, big.NewInt(sum))
	return v.Add(v, seqBase).String()
}

// PartitionKey of record g.
func PartitionKey(g int) string { return fmt.Sprintf("pk-%04d", g%Keys) }

// data is the record's payload: a JSON object of exactly DataBytes bytes.
func data(g int) []byte {
	head := fmt.Sprintf(`{"id":"r-%09d","n":%d,"pad":"`, g, g)
	pad := DataBytes - len(head) - 2
	return []byte(head + strings.Repeat("x", max(pad, 0)) + `"}`)
}

// Batch returns batch number b (from 0) of lane `lane` out of pf lanes, size records.
func (w Workload) Batch(lane, pf, b, size int) events.KinesisEvent {
	ev := events.KinesisEvent{Records: make([]events.KinesisEventRecord, size)}
	arn := fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", region, account, w.Stream)
	for j := range size {
		g := (b*size+j)*pf + lane
		s := seq(g)
		ev.Records[j] = events.KinesisEventRecord{
			AwsRegion:         region,
			EventID:           w.ShardID + ":" + s,
			EventName:         "aws:kinesis:record",
			EventSource:       "aws:kinesis",
			EventSourceArn:    arn,
			EventVersion:      "1.0",
			InvokeIdentityArn: "arn:aws:iam::" + account + ":role/bench",
			Kinesis: events.KinesisRecord{
				ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: w.Arrival.Add(time.Duration(g) * time.Microsecond)},
				Data:                        data(g),
				EncryptionType:              "NONE",
				PartitionKey:                PartitionKey(g),
				SequenceNumber:              s,
				KinesisSchemaVersion:        "1.0",
			},
		}
	}
	return ev
}

// Payload is Batch marshalled as the Lambda runtime would hand it to the function.
func (w Workload) Payload(lane, pf, b, size int) ([]byte, error) {
	raw, err := json.Marshal(w.Batch(lane, pf, b, size))
	if err != nil {
		return nil, fmt.Errorf("bench: marshal event: %w", err)
	}
	return raw, nil
}

// Checksum is the Process every handler runs (see internal/local/bench/checksum).
var Checksum pipeline.ProcessFunc = checksum.Process
