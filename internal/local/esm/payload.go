package esm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// record is one Kinesis record as the mapping holds it: the event record Lambda would send and
// its JSON encoding, computed once so that batches can be cut to the payload limit exactly.
type record struct {
	seq     string
	key     string
	arrival time.Time
	json    []byte // json.Marshal(events.KinesisEventRecord)
	// filtered: FilterCriteria drops the record (see filter.go).
	filtered bool
}

// eventRecord builds the record exactly as Lambda puts it in a Kinesis event
// (https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html, "Example event"; the
// aws-lambda-go events/testdata/kinesis-event.json fixture has the same shape): eventID is
// "<shardId>:<sequenceNumber>", data is base64 (aws-lambda-go marshals []byte so), and
// approximateArrivalTimestamp is epoch seconds with millisecond precision.
func (m *Mapping) eventRecord(shardID string, r kintypes.Record) events.KinesisEventRecord {
	var arrival time.Time
	if r.ApproximateArrivalTimestamp != nil {
		arrival = r.ApproximateArrivalTimestamp.Truncate(time.Millisecond)
	}
	seq := deref(r.SequenceNumber)
	kr := events.KinesisRecord{
		ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: arrival},
		Data:                        r.Data,
		PartitionKey:                deref(r.PartitionKey),
		SequenceNumber:              seq,
		KinesisSchemaVersion:        "1.0",
	}
	if r.EncryptionType == kintypes.EncryptionTypeKms {
		kr.EncryptionType = string(r.EncryptionType)
	}
	if kr.Data == nil {
		kr.Data = []byte{}
	}
	return events.KinesisEventRecord{
		AwsRegion:         m.region,
		EventID:           shardID + ":" + seq,
		EventName:         "aws:kinesis:record",
		EventSource:       "aws:kinesis",
		EventSourceArn:    m.streamARN,
		EventVersion:      "1.0",
		InvokeIdentityArn: m.identityARN,
		Kinesis:           kr,
	}
}

func (m *Mapping) newRecord(shardID string, r kintypes.Record) (*record, error) {
	ev := m.eventRecord(shardID, r)
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("esm: encode record %s: %w", ev.EventID, err)
	}
	return &record{seq: ev.Kinesis.SequenceNumber, key: ev.Kinesis.PartitionKey, arrival: ev.Kinesis.ApproximateArrivalTimestamp.Time, json: b,
		filtered: !m.filter.Keep(r.Data)}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var (
	payloadHead = []byte(`{"Records":[`)
	payloadTail = []byte(`]}`)
)

// envelopeBytes is the size of an event without records.
var envelopeBytes = len(payloadHead) + len(payloadTail)

// payload returns the invocation payload of recs: byte for byte json.Marshal(events.KinesisEvent).
func payload(recs []*record) []byte {
	n := envelopeBytes
	for _, r := range recs {
		n += len(r.json) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, payloadHead...)
	for i, r := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r.json...)
	}
	return append(b, payloadTail...)
}

// cut returns how many records from the head of queue form the next batch: at most batchSize,
// and never a payload above maxBytes, except that a single record larger than maxBytes on its
// own is returned alone (its invocation then fails with ErrPayloadTooLarge; a real Kinesis
// record, at most 1 MiB, always fits 6 MB). full reports that the batch cannot grow: it has
// batchSize records or the next record would not fit.
func cut(queue []*record, batchSize, maxBytes int) (n int, full bool) {
	size := envelopeBytes
	for i, r := range queue {
		if i == batchSize {
			return i, true
		}
		add := len(r.json)
		if i > 0 {
			add++
		}
		if size+add > maxBytes {
			if i == 0 {
				return 1, true
			}
			return i, true
		}
		size += add
	}
	return len(queue), len(queue) == batchSize
}

// ErrBadResponse marks a function response that Lambda treats as a complete batch failure.
var ErrBadResponse = errors.New("esm: batch item failure response is a complete failure")

// parseResponse applies Lambda's rules for ReportBatchItemFailures
// (https://docs.aws.amazon.com/lambda/latest/dg/services-kinesis-batchfailurereporting.html):
//   - complete success: an empty or null response, or an empty or null batchItemFailures list
//     (a response object without the key has a null list); also a response that is an empty
//     JSON array: AWS recorded it as success (one invocation, no retry) in LocalStack's
//     snapshot test test_kinesis_report_batch_item_success_scenarios[empty_list_success]
//     (tests/aws/services/lambda_/event_source_mapping/test_lambda_integration_kinesis.snapshot.json,
//     recorded against AWS on 2025-11-25);
//   - complete failure: an itemIdentifier that is an empty string, null, or under a wrong key
//     name; here also an identifier that is not a sequence number of the batch, and a response
//     that is not a JSON object (unparseable);
//   - otherwise Lambda checkpoints at the lowest failed sequence number and retries every
//     record from there on.
//
// It returns the index in recs of the lowest failed record, or -1 for complete success.
func parseResponse(resp []byte, recs []*record) (int, error) {
	resp = bytes.TrimSpace(resp)
	if len(resp) == 0 || bytes.Equal(resp, []byte("null")) {
		return -1, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(resp, &list) == nil && len(list) == 0 {
		return -1, nil // `[]`: success on AWS (see above)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(resp, &body); err != nil {
		return 0, fmt.Errorf("%w: response is not a JSON object: %v", ErrBadResponse, err)
	}
	raw, ok := body["batchItemFailures"]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return -1, nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return 0, fmt.Errorf("%w: batchItemFailures is not a list of objects: %v", ErrBadResponse, err)
	}
	if len(items) == 0 {
		return -1, nil
	}
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[r.seq] = i
	}
	lowest := -1
	for _, item := range items {
		rawID, ok := item["itemIdentifier"]
		if !ok {
			return 0, fmt.Errorf("%w: an item has no itemIdentifier key", ErrBadResponse)
		}
		var id *string
		if err := json.Unmarshal(rawID, &id); err != nil {
			return 0, fmt.Errorf("%w: itemIdentifier %s is not a string", ErrBadResponse, rawID)
		}
		if id == nil || *id == "" {
			return 0, fmt.Errorf("%w: itemIdentifier is null or empty", ErrBadResponse)
		}
		i, ok := index[*id]
		if !ok {
			return 0, fmt.Errorf("%w: itemIdentifier %q is not in the batch", ErrBadResponse, *id)
		}
		if lowest < 0 || i < lowest {
			lowest = i
		}
	}
	return lowest, nil
}
