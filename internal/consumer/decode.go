package consumer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/kpl"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Errors.
var (
	// ErrMalformedEvent: the invocation payload is not a JSON object; no record can be named.
	ErrMalformedEvent = errors.New("consumer: malformed event")
	// ErrUnreportable: the batch must be retried but no record carries a sequence number Lambda
	// could be given, so the handler fails the invocation instead (Lambda retries it whole).
	ErrUnreportable = errors.New("consumer: no reportable sequence number in a failing batch")
	// ErrMalformedRecord is the DecodeErr of a record whose data could not be decoded.
	ErrMalformedRecord = errors.New("consumer: malformed record")
)

// inRecord is one Kinesis record of the event as delivered, before validation.
type inRecord struct {
	pos              int
	eventID, arn     string
	seq, pk          string
	data             []byte
	arrival          time.Time
	dataErr, formErr error // data not base64; record not decodable at all
}

// fromEvent converts an already decoded event.
func fromEvent(ev events.KinesisEvent) []inRecord {
	out := make([]inRecord, len(ev.Records))
	for i, r := range ev.Records {
		out[i] = inRecord{
			pos: i, eventID: r.EventID, arn: r.EventSourceArn, seq: r.Kinesis.SequenceNumber,
			pk: r.Kinesis.PartitionKey, data: r.Kinesis.Data, arrival: r.Kinesis.ApproximateArrivalTimestamp.Time,
		}
	}
	return out
}

// rawRecord mirrors events.KinesisEventRecord with every field left raw, so one bad field
// spoils only its own record.
type rawRecord struct {
	EventID        json.RawMessage `json:"eventID"`
	EventSourceARN json.RawMessage `json:"eventSourceARN"`
	Kinesis        struct {
		Data           json.RawMessage `json:"data"`
		PartitionKey   json.RawMessage `json:"partitionKey"`
		SequenceNumber json.RawMessage `json:"sequenceNumber"`
		Arrival        json.RawMessage `json:"approximateArrivalTimestamp"`
	} `json:"kinesis"`
}

// decodeEvent decodes a raw invocation payload record by record. Unlike json.Unmarshal into
// events.KinesisEvent, a record with a bad field (data that is not base64, a number where a
// string belongs) does not fail the whole event: that record carries the problem and is
// handled on its own terms. Only a payload that is not a JSON object (or whose Records is not
// an array) is an error.
func decodeEvent(raw []byte) ([]inRecord, error) {
	// Fast path: a well-formed event decodes in one pass.
	var fast struct {
		Records []struct {
			EventID        string `json:"eventID"`
			EventSourceARN string `json:"eventSourceARN"`
			Kinesis        struct {
				// encoding/json decodes a []byte from standard base64 itself, so the event's
				// base64 text is never held as a string beside the decoded data; a record that
				// is not base64 fails the fast path, and the slow path names it.
				Data           []byte  `json:"data"`
				PartitionKey   string  `json:"partitionKey"`
				SequenceNumber string  `json:"sequenceNumber"`
				Arrival        float64 `json:"approximateArrivalTimestamp"`
			} `json:"kinesis"`
		} `json:"Records"`
	}
	if json.Unmarshal(raw, &fast) == nil {
		out := make([]inRecord, len(fast.Records))
		for i, fr := range fast.Records {
			r := inRecord{pos: i, eventID: fr.EventID, arn: fr.EventSourceARN, seq: fr.Kinesis.SequenceNumber,
				pk: fr.Kinesis.PartitionKey, arrival: arrivalTime(fr.Kinesis.Arrival)}
			r.data = fr.Kinesis.Data
			if r.data == nil { // null or absent: empty, as decodeData("") and the slow path
				r.data = []byte{}
			}
			out[i] = r
		}
		return out, nil
	}
	// Slow path: record by record, field by field.
	var ev struct {
		Records []json.RawMessage `json:"Records"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedEvent, err)
	}
	out := make([]inRecord, len(ev.Records))
	for i, rr := range ev.Records {
		out[i] = decodeRecord(i, rr)
	}
	return out, nil
}

func decodeRecord(pos int, raw json.RawMessage) inRecord {
	r := inRecord{pos: pos}
	var rr rawRecord
	if err := json.Unmarshal(raw, &rr); err != nil {
		r.formErr = fmt.Errorf("record is not a Kinesis event record: %v", err)
		return r
	}
	var errs []error
	str := func(name string, v json.RawMessage) string {
		if len(v) == 0 || string(v) == "null" {
			return ""
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			errs = append(errs, fmt.Errorf("%s is not a string", name))
		}
		return s
	}
	r.eventID = str("eventID", rr.EventID)
	r.arn = str("eventSourceARN", rr.EventSourceARN)
	r.seq = str("kinesis.sequenceNumber", rr.Kinesis.SequenceNumber)
	r.pk = str("kinesis.partitionKey", rr.Kinesis.PartitionKey)
	if len(errs) > 0 {
		r.formErr = errors.Join(errs...)
	}
	if len(rr.Kinesis.Arrival) > 0 {
		var secs float64
		if json.Unmarshal(rr.Kinesis.Arrival, &secs) == nil {
			r.arrival = arrivalTime(secs)
		}
	}
	var enc string
	if len(rr.Kinesis.Data) > 0 && string(rr.Kinesis.Data) != "null" {
		if err := json.Unmarshal(rr.Kinesis.Data, &enc); err != nil {
			r.dataErr = fmt.Errorf("%w: kinesis.data is not a string", ErrMalformedRecord)
			r.data = append([]byte(nil), rr.Kinesis.Data...) // keep what arrived, for parking
			return r
		}
	}
	r.data, r.dataErr = decodeData(enc)
	return r
}

// decodeData decodes the base64 data of a record. Undecodable text is returned as is, with
// the error: it is what gets parked.
func decodeData(enc string) ([]byte, error) {
	data, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return []byte(enc), fmt.Errorf("%w: kinesis.data is not base64: %v", ErrMalformedRecord, err)
	}
	return data, nil
}

// arrivalTime converts approximateArrivalTimestamp (epoch seconds with a fraction); out of
// range values are the zero time.
func arrivalTime(secs float64) time.Time {
	if !(secs > 0 && secs < math.MaxInt32*4) {
		return time.Time{}
	}
	whole, frac := math.Modf(secs)
	return time.Unix(int64(whole), int64(frac*1e9))
}

// rejected is a record left out of the batch.
type rejected struct {
	rec    inRecord
	reason string
}

// plan is an event turned into a pipeline batch.
type plan struct {
	batch pipeline.Batch
	// rejected records cannot be put in the batch: invalid sequence number, another shard or
	// stream, or a conflicting duplicate. Their presence fails the batch at firstID.
	rejected []rejected
	// dropped are exact duplicates of a record already in the batch (same sequence number,
	// partition key and data), processed once.
	dropped []inRecord
	// firstID is the identifier reported to fail the whole batch (see firstIdentifier); ""
	// when no record carries any sequence number.
	firstID string
	// unordered: the event's records were not in sequence order (they were sorted).
	unordered bool
	malformed int // records in the batch with a DecodeErr
	// cutAt is the sequence number of the first Kinesis record left out because the batch
	// reached its bound on user records ("" when none was); cut counts the Kinesis records left
	// out. They are not attempted: the handler reports cutAt as failed, and Lambda redelivers
	// them from there in the next batch.
	cutAt string
	cut   int
}

// DefaultMaxBatchUserRecords bounds the user records of one batch (KPL aggregates
// de-aggregated). It keeps the heap of one invocation bounded (each user record costs the
// pipeline several hundred bytes) and the in-flight marker, which names every record id of the
// batch, within the ledger's item budget: the marker of the largest batch Lambda can deliver
// (10,000 Kinesis records) plus 40,000 more user records of aggregates fits in 350 KiB
// (TestLargestBatchMarkerFits), so a crash is counted for every batch the consumer runs.
const DefaultMaxBatchUserRecords = kpl.MaxUserRecords

// names memoizes shardOf and streamOf over one event, whose records repeat the same shard
// and ARN.
type names struct {
	lastEventPrefix, lastShard string
	lastARN, lastStream        string
	// configured is the stream the function is configured with (STREAM_NAME; "" when not). A
	// record whose eventSourceARN names no stream is taken to come from it: Lambda always sends
	// the stream's ARN, but `sam local generate-event kinesis get-records` prints
	// arn:aws:kinesis:EXAMPLE.
	configured string
}

func (n *names) shard(eventID string) (string, bool) {
	if i := strings.IndexByte(eventID, ':'); i > 0 && n.lastShard != "" && eventID[:i] == n.lastEventPrefix {
		return n.lastShard, true
	}
	s, ok := shardOf(eventID)
	if ok {
		n.lastEventPrefix, n.lastShard = s, s
	}
	return s, ok
}

func (n *names) stream(arn string) (string, bool) {
	if n.lastStream != "" && arn == n.lastARN {
		return n.lastStream, true
	}
	s, ok := streamOf(arn)
	if ok {
		n.lastARN, n.lastStream = arn, s
	} else if n.configured != "" {
		return n.configured, true
	}
	return s, ok
}

// shardOf parses "shardId-000000000000:<seq>" into the shard id.
func shardOf(eventID string) (string, bool) {
	i := strings.IndexByte(eventID, ':')
	if i <= 0 {
		return "", false
	}
	id := eventID[:i]
	if !strings.HasPrefix(id, "shardId-") || (recordid.Shard{Group: "g", Stream: "s", ShardID: id}).Validate() != nil {
		return "", false
	}
	return id, true
}

// streamOf returns the stream name of a Kinesis stream ARN
// (arn:aws:kinesis:region:account:stream/name, optionally followed by /consumer/... for an
// enhanced fan-out consumer).
func streamOf(arn string) (string, bool) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "kinesis" {
		return "", false
	}
	name, ok := strings.CutPrefix(parts[5], "stream/")
	if !ok {
		return "", false
	}
	name, _, _ = strings.Cut(name, "/")
	if (recordid.Shard{Group: "g", Stream: name, ShardID: "s"}).Validate() != nil {
		return "", false
	}
	return name, true
}

// streamARNOf returns the stream ARN part of an eventSourceARN: an enhanced fan-out
// consumer's ARN (…:stream/NAME/consumer/C:T) without the consumer.
func streamARNOf(arn string) string {
	if i := strings.Index(arn, ":stream/"); i >= 0 {
		if j := strings.IndexByte(arn[i+len(":stream/"):], '/'); j >= 0 {
			return arn[:i+len(":stream/")+j]
		}
	}
	return arn
}

// buildPlan validates the records and builds the batch for group:
//   - The batch's shard and stream are those of the first record whose eventID and
//     eventSourceARN both parse. Lambda never mixes shards in one batch; a record naming another
//     shard or stream is rejected rather than recorded under the wrong shard.
//   - With a configured stream (STREAM_NAME, "" for none) the batch's stream is that one: a
//     record whose ARN names no stream (SAM's sample events) is taken to come from it, and one
//     whose ARN names another stream is rejected, naming both (a mapping pointed at the wrong
//     stream). Without one, an event whose ARNs name no stream is rejected with a reason that
//     says to set STREAM_NAME.
//   - A record whose sequence number is not a valid Kinesis sequence number cannot be put in
//     the ledger, ordered, or reported: it is rejected.
//   - A rejected record fails the whole batch: the handler reports firstID (the lowest valid
//     sequence number), so Lambda redelivers everything; what was done is skipped next time
//     by the ledger. Nothing is skipped silently, and nothing is recorded under a wrong id.
//   - A record with a valid sequence number but undecodable content (data not base64, an
//     unparsable eventID, a field of the wrong type, a corrupt KPL aggregate) goes into the
//     batch as ONE failed record (DecodeErr, sub 0) carrying the raw bytes: it is retried and
//     parked after MAX_RECORD_ATTEMPTS like any poison record.
//   - KPL aggregates are de-aggregated: user record i gets sub-index i and the aggregate's
//     sequence number.
//   - Records are sorted by sequence number (Lambda delivers them sorted; a shuffled event is
//     logged and sorted, since per-key order must follow the stream).
//   - A batch holds at most maxUsers user records (DefaultMaxBatchUserRecords): the Kinesis record
//     whose user records would pass the bound, and every later one, are left out (plan.cutAt)
//     and redelivered by Lambda from there; the first record of a batch always fits, since an
//     aggregate of more than min(maxUsers, kpl.MaxUserRecords) user records is one failed
//     record (parked with its raw bytes), never de-aggregated.
func buildPlan(group, configuredStream string, recs []inRecord) plan {
	return buildPlanBounded(group, configuredStream, recs, DefaultMaxBatchUserRecords)
}

// buildPlanBounded is buildPlan with another bound on the batch's user records.
func buildPlanBounded(group, configuredStream string, recs []inRecord, maxUsers int) plan {
	maxUsers = max(maxUsers, 1)
	perAggregate := min(maxUsers, kpl.MaxUserRecords)
	var pl plan
	nm := names{configured: configuredStream}
	shardID, stream := "", ""
	for _, r := range recs {
		if r.formErr != nil {
			continue
		}
		s, ok1 := nm.shard(r.eventID)
		n, ok2 := nm.stream(r.arn)
		if ok1 && ok2 {
			shardID, stream = s, n
			break
		}
	}
	if shardID != "" && configuredStream != "" {
		stream = configuredStream
	}
	pl.batch = pipeline.Batch{
		Shard:             recordid.Shard{Group: group, Stream: stream, ShardID: shardID},
		Source:            pipeline.SourceConsumer,
		AdvanceCheckpoint: true,
	}

	// Sized up front: for a 6 MB batch, growing these by append doubled the handler's peak
	// memory (docs/benchmarks.md, memory target). valid points into recs rather than copying
	// them (1.5 MB for 10,000 records).
	valid := make([]*inRecord, 0, len(recs))
	pl.batch.Records = make([]pipeline.Record, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		if seqnum.Validate(r.seq) != nil {
			pl.rejected = append(pl.rejected, rejected{*r, "invalid sequence number " + clip(r.seq)})
			continue
		}
		if shardID == "" {
			pl.rejected = append(pl.rejected, rejected{*r, noShardAndStream(recs)})
			continue
		}
		if s, ok := nm.shard(r.eventID); ok && s != shardID {
			pl.rejected = append(pl.rejected, rejected{*r, "record of shard " + s + " in a batch of " + shardID})
			continue
		}
		if n, ok := nm.stream(r.arn); ok && n != stream {
			reason := "record of stream " + n + " in a batch of " + stream
			if configuredStream != "" {
				reason = "record of stream " + n + " (eventSourceARN " + clip(r.arn) + "), but this function is configured for " +
					config.EnvStreamName + "=" + configuredStream + ": is the event-source mapping pointed at the wrong stream?"
			}
			pl.rejected = append(pl.rejected, rejected{*r, reason})
			continue
		}
		valid = append(valid, r)
	}
	if !slices.IsSortedFunc(valid, func(a, b *inRecord) int { return seqnum.Compare(a.seq, b.seq) }) {
		pl.unordered = true
		slices.SortStableFunc(valid, func(a, b *inRecord) int { return seqnum.Compare(a.seq, b.seq) })
	}

	for i, r := range valid {
		if i > 0 && valid[i-1].seq == r.seq {
			prev := valid[i-1]
			if prev.pk == r.pk && bytes.Equal(prev.data, r.data) && (prev.dataErr == nil) == (r.dataErr == nil) {
				pl.dropped = append(pl.dropped, *r)
			} else {
				pl.rejected = append(pl.rejected, rejected{*r, "sequence number delivered twice with different content"})
			}
			continue
		}
		before, malformed := len(pl.batch.Records), pl.malformed
		pl.batch.Records = expand(pl.batch.Records, &nm, shardID, *r, perAggregate, &pl.malformed)
		if len(pl.batch.Records) > maxUsers && before > 0 {
			clear(pl.batch.Records[before:]) // drop the references to the left-out user records
			pl.batch.Records, pl.malformed = pl.batch.Records[:before], malformed
			pl.cutAt, pl.cut = r.seq, len(valid)-i
			break
		}
	}

	pl.firstID = firstIdentifier(valid, recs)
	if len(pl.rejected) > 0 {
		// The batch is failed at firstID anyway; moving the checkpoint past records of unknown
		// position would claim more than is known.
		pl.batch.AdvanceCheckpoint = false
	}
	return pl
}

// noShardAndStream is the reason a record is rejected when no record of the event names both a
// shard and a stream; when the shard is there but no ARN names a stream (SAM's sample events),
// it says which variable to set.
func noShardAndStream(recs []inRecord) string {
	for _, r := range recs {
		if _, ok := shardOf(r.eventID); ok {
			if _, ok := streamOf(r.arn); !ok {
				return "no record of the event names a valid shard and stream: eventSourceARN " + clip(r.arn) +
					" names no Kinesis stream (sam local generate-event prints such sample events); set " +
					config.EnvStreamName + " to the stream this function's mapping reads"
			}
		}
	}
	return "no record of the event names a valid shard and stream"
}

// firstIdentifier is what to report to fail the whole batch: the batch's lowest sequence
// number; failing that (no record of the batch's shard is valid), the lowest valid sequence
// number of any record; failing that, the first non-empty one as delivered (Lambda will not
// find it and treats the batch as failed, which is the intent); "" when there is none.
func firstIdentifier(valid []*inRecord, all []inRecord) string {
	if len(valid) > 0 {
		return valid[0].seq
	}
	lowest := ""
	for _, r := range all {
		if seqnum.Validate(r.seq) == nil && (lowest == "" || seqnum.Compare(r.seq, lowest) < 0) {
			lowest = r.seq
		}
	}
	if lowest != "" {
		return lowest
	}
	for _, r := range all {
		if r.seq != "" {
			return r.seq
		}
	}
	return ""
}

// expand appends the pipeline records of one valid Kinesis record to dst: an aggregate of more
// than perAggregate user records, or a corrupt one, is one record carrying DecodeErr and the
// aggregate's raw bytes.
func expand(dst []pipeline.Record, nm *names, shardID string, r inRecord, perAggregate int, malformed *int) []pipeline.Record {
	base := pipeline.Record{
		ID: recordid.ID{ShardID: shardID, Seq: r.seq}, PartitionKey: r.pk, Data: r.data, ArrivalTime: r.arrival,
	}
	bad := func(err error) []pipeline.Record {
		*malformed++
		base.DecodeErr = err
		return append(dst, base)
	}
	switch {
	case r.dataErr != nil:
		return bad(r.dataErr)
	case r.formErr != nil:
		return bad(fmt.Errorf("%w: %v", ErrMalformedRecord, r.formErr))
	}
	if _, ok := nm.shard(r.eventID); !ok {
		return bad(fmt.Errorf("%w: eventID %s does not name a shard", ErrMalformedRecord, clip(r.eventID)))
	}
	if _, ok := nm.stream(r.arn); !ok {
		return bad(fmt.Errorf("%w: eventSourceARN %s does not name a stream", ErrMalformedRecord, clip(r.arn)))
	}
	users, err := kpl.DeaggregateMax(r.data, perAggregate)
	switch {
	case errors.Is(err, kpl.ErrNotAggregated):
		return append(dst, base)
	case err != nil:
		return bad(fmt.Errorf("%w: %w", ErrMalformedRecord, err))
	}
	for i, u := range users {
		dst = append(dst, pipeline.Record{
			ID:           recordid.ID{ShardID: shardID, Seq: r.seq, Sub: uint32(i)},
			PartitionKey: u.PartitionKey, Data: u.Data, ArrivalTime: r.arrival,
		})
	}
	return dst
}

func clip(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
