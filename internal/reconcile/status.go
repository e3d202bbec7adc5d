package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/filter"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// LedgerReader is the read side of the ledger (pipeline.DedupeLedger). Views that also answer
// Parked(id) (dedupe's do) let Status count parked records.
type LedgerReader interface {
	Lookup(ctx context.Context, shard recordid.Shard, first, last string) (pipeline.View, error)
}

var _ LedgerReader = pipeline.DedupeLedger{}

// CheckpointLister lists the checkpoint mirror of a stream (*checkpoint.Store).
type CheckpointLister interface {
	List(ctx context.Context, group, stream string) ([]checkpoint.State, error)
}

// parkedView is implemented by ledger views that know which records were parked.
type parkedView interface {
	Parked(id recordid.ID) bool
}

// StatusConfig says what Status inspects.
type StatusConfig struct {
	Group, Stream string
	// SettleAfter splits missing records into gaps (older) and in flight (younger).
	SettleAfter time.Duration
	// MaxRecords caps the records read per shard (default 100,000); beyond it the lag in
	// records is reported as at least MaxRecords (LagCapped).
	MaxRecords int
	// ReadInterval paces GetRecords per shard (default 200ms: an operator's occasional read).
	ReadInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Filter is the record filter (RECORD_FILTER): records it drops are counted Filtered, not
	// taken for gaps. nil: no filter.
	Filter *filter.Filter
}

// ShardStatus is the verification state of one shard. Sequence numbers are strings.
type ShardStatus struct {
	ShardID    string    `json:"shard_id"`
	Parents    []string  `json:"parents,omitempty"`
	State      string    `json:"state"` // open, closed, closed-verified, expired (only in the mirror)
	Checkpoint string    `json:"checkpoint"`
	Watermark  string    `json:"watermark"`
	LagRecords int       `json:"lag_records"`          // user records after the watermark up to the checkpoint
	LagCapped  bool      `json:"lag_capped,omitempty"` // LagRecords stopped at MaxRecords
	LagSeconds float64   `json:"lag_seconds"`          // age of the oldest record after the watermark
	Gaps       int       `json:"gaps_pending"`         // of those, absent from the ledger and older than the settle window
	InFlight   int       `json:"in_flight"`            // absent from the ledger, younger than the settle window
	Parked     int       `json:"parked"`               // of those, parked (awaiting redrive)
	Filtered   int       `json:"filtered"`             // of those, dropped by the record filter (accounted for)
	Trimmed    bool      `json:"watermark_trimmed"`    // the watermark's record has expired from the stream
	At         time.Time `json:"checkpoint_at,omitzero"`
	VerifiedAt time.Time `json:"watermark_at,omitzero"`
	// Lifetime counters kept on the checkpoint item.
	GapsDetected    int64 `json:"gaps_detected_total"`
	GapsReplayed    int64 `json:"gaps_replayed_total"`
	ParkedTotal     int64 `json:"parked_total"`
	LostToRetention int64 `json:"lost_to_retention_total"`
	// ExpiredUnverified: spans expired before they were verified, proven done (not a loss).
	ExpiredUnverified int64  `json:"expired_unverified_total,omitempty"`
	FilteredTotal     int64  `json:"filtered_total"` // records the reconciler found dropped by the record filter
	Error             string `json:"error,omitempty"`

	// In-flight markers at or after the checkpoint without an outcome: live (an invocation is
	// working on those records) and dead (an invocation died on them; counted as attempts and
	// isolated by the next one). See docs/consumer.md.
	MarkersLive int `json:"markers_live"`
	MarkersDead int `json:"markers_dead"`
}

// StreamStatus is Status' answer.
type StreamStatus struct {
	Group  string        `json:"group"`
	Stream string        `json:"stream"`
	At     time.Time     `json:"at"`
	Shards []ShardStatus `json:"shards"`
}

// Status reports, per shard of the stream (and per shard the mirror knows that has left the
// stream), the checkpoint, the verified watermark, the records between them (lag), and which of
// those the ledger lacks (gaps pending) or holds as parked. It only reads: GetRecords after the
// watermark up to the checkpoint, and one ledger Lookup per page. A shard that cannot be read
// carries Error; the call fails only when the stream or the mirror cannot be listed.
func Status(ctx context.Context, kin kinesisAPI, cps CheckpointLister, ledger LedgerReader, cfg StatusConfig) (StreamStatus, error) {
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = 100000
	}
	if cfg.ReadInterval <= 0 {
		cfg.ReadInterval = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := (recordid.Shard{Group: cfg.Group, Stream: cfg.Stream, ShardID: "s"}).Validate(); err != nil {
		return StreamStatus{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	shards, err := listShards(ctx, kin, cfg.Stream, "")
	if err != nil {
		return StreamStatus{}, err
	}
	states, err := cps.List(ctx, cfg.Group, cfg.Stream)
	if err != nil {
		return StreamStatus{}, fmt.Errorf("reconcile: list checkpoints: %w", err)
	}
	byShard := make(map[string]checkpoint.State, len(states))
	for _, s := range states {
		byShard[s.Shard.ShardID] = s
	}
	out := StreamStatus{Group: cfg.Group, Stream: cfg.Stream, At: cfg.Now().UTC()}
	seen := map[string]bool{}
	for _, sh := range lineageOrder(shards) {
		seen[sh.id] = true
		st := byShard[sh.id]
		ss := newShardStatus(sh.id, sh.parents, st)
		switch {
		case sh.endingSeq != "" && st.Closed:
			ss.State = "closed-verified"
		case sh.endingSeq != "":
			ss.State = "closed"
		default:
			ss.State = "open"
		}
		if ss.State != "closed-verified" {
			if err := inspectShard(ctx, kin, ledger, cfg, sh, st, &ss); err != nil {
				ss.Error = err.Error()
			}
			if err := countMarkers(ctx, ledger, cfg, st, &ss); err != nil && ss.Error == "" {
				ss.Error = err.Error()
			}
		}
		out.Shards = append(out.Shards, ss)
	}
	for _, st := range states {
		if !seen[st.Shard.ShardID] {
			ss := newShardStatus(st.Shard.ShardID, st.Parents, st)
			ss.State = "expired"
			out.Shards = append(out.Shards, ss)
		}
	}
	return out, nil
}

func newShardStatus(id string, parents []string, st checkpoint.State) ShardStatus {
	return ShardStatus{
		ShardID: id, Parents: parents, Checkpoint: st.Checkpoint, Watermark: st.Watermark,
		At: st.CheckpointAt, VerifiedAt: st.WatermarkAt,
		GapsDetected: st.GapsDetected, GapsReplayed: st.GapsReplayed, ParkedTotal: st.Parked,
		LostToRetention: st.LostToRetention, ExpiredUnverified: st.ExpiredUnverified, FilteredTotal: st.Filtered,
	}
}

// inspectShard reads (watermark, checkpoint] of one shard (to its end for a closed shard) and
// looks every page up in the ledger.
func inspectShard(ctx context.Context, kin kinesisAPI, ledger LedgerReader, cfg StatusConfig, sh shardInfo, st checkpoint.State, ss *ShardStatus) error {
	upper := st.Checkpoint // "" for a closed shard: read to its end
	switch {
	case sh.endingSeq != "":
		upper = ""
	case upper == "", st.Watermark != "" && seqnum.Compare(st.Watermark, upper) >= 0:
		return nil
	}
	rd := &shardReader{kin: kin, stream: cfg.Stream, shardID: sh.id, interval: cfg.ReadInterval, limit: 10000, closed: sh.endingSeq != ""}
	err := rd.open(ctx, types.ShardIteratorTypeAfterSequenceNumber, st.Watermark)
	if errors.Is(err, errTrimmed) || errors.Is(err, errNoRecord) {
		ss.Trimmed = errors.Is(err, errTrimmed)
		err = rd.open(ctx, "", "")
	}
	if err != nil {
		return err
	}
	now := cfg.Now()
	shard := recordid.Shard{Group: cfg.Group, Stream: cfg.Stream, ShardID: sh.id}
	for ss.LagRecords < cfg.MaxRecords {
		recs, caughtUp, err := rd.next(ctx)
		if err != nil {
			return err
		}
		recs = after(recs, st.Watermark) // read from the trim horizon: skip what the watermark covers
		stop := false
		for i, rec := range recs {
			if upper != "" && seqnum.Compare(aws.ToString(rec.SequenceNumber), upper) > 0 {
				recs, stop = recs[:i], true
				break
			}
		}
		if len(recs) > 0 {
			if ss.LagSeconds == 0 && recs[0].ApproximateArrivalTimestamp != nil {
				ss.LagSeconds = now.Sub(*recs[0].ApproximateArrivalTimestamp).Seconds()
			}
			users, dropped := keepRecords(cfg.Filter, UserRecords(sh.id, recs))
			ss.LagRecords += dropped
			ss.Filtered += dropped
			if len(users) == 0 {
				if stop || caughtUp || rd.ended {
					return nil
				}
				continue
			}
			view, err := ledger.Lookup(ctx, shard, users[0].ID.Seq, users[len(users)-1].ID.Seq)
			if err != nil {
				return fmt.Errorf("reconcile: ledger lookup %s: %w", shard, err)
			}
			pv, _ := view.(parkedView)
			for _, u := range users {
				ss.LagRecords++
				switch {
				case pv != nil && pv.Parked(u.ID):
					ss.Parked++
				case view.Done(u.ID):
				case now.Sub(u.ArrivalTime) >= cfg.SettleAfter:
					ss.Gaps++
				default:
					ss.InFlight++
				}
			}
		}
		if stop || caughtUp || rd.ended {
			return nil
		}
	}
	ss.LagCapped = true
	return nil
}

// lastSeq is the highest sequence number Kinesis can issue (129 digits), the open end of the
// marker lookup.
var lastSeq = strings.Repeat("9", seqnum.MaxDigits)

// countMarkers counts the in-flight markers of a shard from its checkpoint on (one Lookup):
// live ones, and dead ones that still name a record not done.
func countMarkers(ctx context.Context, ledger LedgerReader, cfg StatusConfig, st checkpoint.State, ss *ShardStatus) error {
	from := st.Checkpoint
	if from == "" {
		from = "0"
	}
	shard := recordid.Shard{Group: cfg.Group, Stream: cfg.Stream, ShardID: ss.ShardID}
	view, err := ledger.Lookup(ctx, shard, from, lastSeq)
	if err != nil {
		return fmt.Errorf("reconcile: ledger markers %s: %w", shard, err)
	}
	now := cfg.Now()
	for _, m := range view.Markers() {
		switch {
		case m.Completed:
		case now.Before(m.Deadline.Add(pipeline.DeadGrace)):
			ss.MarkersLive++
		case slices.ContainsFunc(m.IDs, func(id recordid.ID) bool { return !view.Done(id) }):
			ss.MarkersDead++
		}
	}
	return nil
}
