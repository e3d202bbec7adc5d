package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gapless-dev/gapless/internal/metrics"
	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// Redrive acts only on parked messages the ledger confirms.
//
// Anyone allowed to send to the parked queue can write a message that looks parked, with a
// valid SHA-256 of whatever payload it carries. So before a message is rebuilt, held or run,
// the Redriver checks it against the ledger's record of the park (dedupe's park records,
// written in the entry that counted the record done): the record must have a recorded park
// whose park id, payload length and SHA-256, partition key and payload object all equal the
// message's. A payload object must also be in the payload bucket (WithRedrivePayloadBucket)
// under the key parking derives (park.ObjectKey), and no payload may claim more bytes than the
// largest Kinesis record (park.MaxRecordBytes). Only then is the object read, bounded by the
// recorded length.
//
// A message that fails any check is refused (OutcomeRefused, reported by id and reason,
// counted in ParkedRefused): never applied, never deleted, made visible again for an operator.
// Under ON_PARK=hold-key a refused message is never taken into a key's walk, so it can neither
// release the key nor have the real record's message deleted as a duplicate of it.
//
// A ledger that cannot be read is not a refusal: the message is left (OutcomeLeft) and tried
// again by a later session.

// ErrRefused wraps the reason a parked message was refused.
var ErrRefused = errors.New("reconcile: parked message refused: the ledger does not confirm it")

// WithRedriveLedger confirms messages against l (pipeline.DedupeLedger, or the RedriveLedger
// the redrive pipeline runs over). Without it the Redriver uses the ledger of its pipeline
// (pipeline.Pipeline.Ledger); with neither, every message is refused.
func WithRedriveLedger(l pipeline.Ledger) RedriveOption { return func(d *Redriver) { d.ledger = l } }

// WithRedrivePayloadBucket is the payload bucket (PAYLOAD_BUCKET): a message naming a payload
// object elsewhere is refused. Without it every message with a payload object is refused.
func WithRedrivePayloadBucket(bucket string) RedriveOption {
	return func(d *Redriver) { d.bucket = bucket }
}

// WithRedriveMetrics emits ParkedRefused (messages refused by the session) through e when Run
// returns.
func WithRedriveMetrics(e Emitter) RedriveOption { return func(d *Redriver) { d.metrics = e } }

// MetricParkedRefused counts parked messages a redrive refused (template.yaml alarms on it).
const MetricParkedRefused = "ParkedRefused"

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// confirm checks pm against the ledger (see the comment above): nil when a recorded park
// confirms it, an error wrapping ErrRefused when it must be refused, any other error when the
// ledger could not be read.
func (d *Redriver) confirm(ctx context.Context, pm park.Message) error {
	switch {
	case pm.DataBytes < 0 || pm.DataBytes > park.MaxRecordBytes:
		return refused("a payload of %d bytes is above the largest Kinesis record (%d)", pm.DataBytes, park.MaxRecordBytes)
	case !pm.ByRef && pm.ParkID == "":
		return refused("no park id: parked by a release that did not record parks, or not parked at all")
	case pm.PayloadS3 != nil && (d.bucket == "" || pm.PayloadS3.Bucket != d.bucket):
		return refused("its payload object is outside the payload bucket %q", d.bucket)
	case pm.PayloadS3 != nil && pm.PayloadS3.Key != park.ObjectKey(pm):
		return refused("its payload object key is not the one parking derives for this record and park")
	case d.ledger == nil:
		return refused("no ledger to confirm parks against")
	}
	id, err := pm.ID()
	if err != nil {
		return refused("%v", err)
	}
	v, err := d.ledger.Lookup(ctx, recordid.Shard{Group: pm.Group, Stream: pm.Stream, ShardID: pm.ShardID}, pm.Seq, pm.Seq)
	if err != nil {
		return fmt.Errorf("reconcile: read the ledger to confirm parked record %s: %w", pm.RecordID, err)
	}
	if pm.ByRef {
		// A version-1 message parked by reference carries no payload and no key: both are
		// re-read from the stream and checked against its SHA-256, so it can only bring back
		// the record the stream holds. It is still acted on only when the ledger parked that
		// record by reference.
		if bv, ok := v.(interface{ ParkedByRef(recordid.ID) bool }); ok && bv.ParkedByRef(id) {
			return nil
		}
		return refused("the ledger records no park by reference of record %s", pm.RecordID)
	}
	pv, ok := v.(pipeline.ParkView)
	if !ok {
		return refused("the ledger (%T) records no parks", v)
	}
	rs := pv.ParkReceipts(id)
	if len(rs) == 0 {
		return refused("the ledger records no park of record %s", pm.RecordID)
	}
	var same []string // recorded parks of the same payload and key under another park id
	for _, r := range rs {
		cerr := r.Confirms(pm)
		if cerr == nil {
			return nil
		}
		if r.Bytes == pm.DataBytes && r.SHA256 == pm.DataSHA256 && r.KeySHA256 == park.KeyDigest(pm.PartitionKey) && r.ParkID != pm.ParkID {
			same = append(same, r.ParkID)
		}
	}
	if len(same) > 0 {
		return refused("park %s of record %s is not recorded; the ledger records park(s) %s of the same payload: a copy sent before a crash, to delete once one of those is redriven",
			pm.ParkID, pm.RecordID, strings.Join(same, ", "))
	}
	return refused("no recorded park of record %s matches it (%v)", pm.RecordID, rs[0].Confirms(pm))
}

func (d *Redriver) emitRefused(rep RedriveReport) {
	if d.metrics == nil {
		return
	}
	if err := d.metrics.Emit(metrics.Metric{Name: MetricParkedRefused, Value: float64(rep.Refused), Unit: metrics.Count}); err != nil {
		d.log.Warn("emitting ParkedRefused failed", "error", err)
	}
}
