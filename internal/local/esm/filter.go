package esm

import (
	"fmt"

	"github.com/gapless-dev/gapless/internal/filter"
)

// EventRecordsFiltered: records of a batch that FilterCriteria drops were discarded without an
// invocation (FirstSeq..LastSeq is the batch, Size the number dropped).
const EventRecordsFiltered EventType = "records_filtered"

// filter parses FilterCriteria (package filter: Lambda's pattern syntax on the record's data).
func (c Config) filter() (*filter.Filter, error) {
	f, err := filter.Parse(c.FilterCriteria...)
	if err != nil {
		return nil, fmt.Errorf("%w: FilterCriteria: %v", ErrConfig, err)
	}
	return f, nil
}

// unfiltered returns the records of batch that FilterCriteria keeps.
//
// Lambda: "If a record from your event source satisfies one or more of your filters, Lambda
// includes the record in the next event it sends to your function. If none of your filters are
// satisfied, Lambda discards the record." ("Control which events Lambda sends to your function",
// https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html); for Kinesis only
// the data key is filtered and data that is not valid JSON does not match ("Using event
// filtering with a Kinesis event source",
// https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis-filtering.html). Each record is
// judged once, when it is read (record.filtered).
//
// Where AWS is silent, chosen here: the batch is cut from the records read (BatchSize and the
// payload limit count every record, filtered or not) and then filtered, so an invocation may
// hold fewer than BatchSize records; a batch that filtering empties is not invoked at all; a
// discarded record is done for the lane's checkpoint as soon as the records before it in the
// batch are (lane.process moves the checkpoint to the batch's last record once all its records
// are done), never retried, never sent to the OnFailure destination.
func (l *lane) unfiltered(batch []*record) []*record {
	if !l.s.m.filter.Active() {
		return batch
	}
	kept := make([]*record, 0, len(batch))
	for _, r := range batch {
		if !r.filtered {
			kept = append(kept, r)
		}
	}
	if n := len(batch) - len(kept); n > 0 {
		l.s.m.emit(Event{Type: EventRecordsFiltered, ShardID: l.s.id, Lane: l.idx, FirstSeq: batch[0].seq,
			LastSeq: batch[len(batch)-1].seq, Size: n})
	}
	return kept
}
