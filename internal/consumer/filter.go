package consumer

import (
	"context"

	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/metrics"
)

// MetricRecordsFiltered counts records the consumer received although the record filter drops
// them (a mapping without the FilterCriteria, or with another one), and so did not process.
const MetricRecordsFiltered = "RecordsFiltered"

// WithFilter sets the record filter (RECORD_FILTER), the pattern template.yaml also puts on the
// mapping's FilterCriteria. Defence in depth: Lambda already drops what the filter drops, but a
// record the filter drops that reaches the function anyway (a mapping created without the
// filter, or with another one) is not processed either, so that the consumer and the
// reconciler (which counts such records as accounted for, never as gaps) agree on every record.
// Such a record is reported successful to Lambda, as Lambda's own filtering would have done.
func WithFilter(f *filter.Filter) Option { return func(h *Handler) { h.filter = f } }

// unfiltered returns the records of an event the filter keeps. It looks at each Kinesis record's
// data as delivered, like Lambda (an aggregate is kept or dropped whole), and always keeps a
// record it cannot read (its data not base64, or not a record at all): those are reported as
// malformed or rejected by the rest of the handler.
func (h *Handler) unfiltered(ctx context.Context, recs []inRecord) []inRecord {
	if !h.filter.Active() {
		return recs
	}
	kept := make([]inRecord, 0, len(recs))
	var dropped []string
	for _, r := range recs {
		if r.dataErr != nil || r.formErr != nil || h.filter.Keep(r.data) {
			kept = append(kept, r)
			continue
		}
		dropped = append(dropped, r.seq)
	}
	if len(dropped) > 0 {
		h.log.WarnContext(ctx, "records the record filter drops reached the function: not processed (is the mapping's FilterCriteria the RECORD_FILTER pattern?)",
			"group", h.group, "filtered", len(dropped), "sequence_number", dropped[0], "last_sequence_number", dropped[len(dropped)-1], "metric", MetricRecordsFiltered)
		if h.metrics != nil {
			if err := h.metrics.Emit(metrics.Metric{Name: MetricRecordsFiltered, Value: float64(len(dropped))}); err != nil {
				h.log.WarnContext(ctx, "metrics not written", "error", err)
			}
		}
	}
	return kept
}
