package consumer

import (
	"context"
	"log/slog"

	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/pipeline"
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

// unfiltered returns the user records of a batch the filter keeps. Like the reconciler it judges
// user records, after KPL de-aggregation (see reconcile's unfiltered for why), and keeps every
// record it could not decode (DecodeErr): those fail and are parked as usual.
func (h *Handler) unfiltered(ctx context.Context, log *slog.Logger, recs []pipeline.Record) []pipeline.Record {
	if !h.filter.Active() {
		return recs
	}
	kept := make([]pipeline.Record, 0, len(recs))
	var dropped []pipeline.Record
	for _, r := range recs {
		if r.DecodeErr != nil || h.filter.Keep(r.Data) {
			kept = append(kept, r)
			continue
		}
		dropped = append(dropped, r)
	}
	if len(dropped) > 0 {
		log.WarnContext(ctx, "records the record filter drops reached the function: not processed (is the mapping's FilterCriteria the RECORD_FILTER pattern?)",
			"filtered", len(dropped), "sequence_number", dropped[0].ID.Seq, "last_sequence_number", dropped[len(dropped)-1].ID.Seq, "metric", MetricRecordsFiltered)
		if h.metrics != nil {
			if err := h.metrics.Emit(metrics.Metric{Name: MetricRecordsFiltered, Value: float64(len(dropped))}); err != nil {
				log.WarnContext(ctx, "metrics not written", "error", err)
			}
		}
	}
	return kept
}
