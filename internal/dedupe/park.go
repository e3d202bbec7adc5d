package dedupe

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gapless-dev/gapless/internal/park"
	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Park records: the ledger is the authority for what was parked.
//
// An entry that counts a record done because it was parked also holds the park itself (Park):
// the park's id, the payload's length and SHA-256, the SHA-256 of its partition key, and the
// S3 object holding the payload when it is not in the message. Redrive acts only on a parked
// message that one of these records confirms exactly, so a message the pipeline did not send
// (or one altered in the queue) is refused instead of applied.
//
// The park record is written in the same item as the record's id in Done (attribute parks, a
// JSON array in a binary attribute), after the parked message was accepted by SQS: a record
// never reads as done without its message. A crash between the two leaves a message whose
// park the ledger never recorded; the record is not done, runs again and is parked again with
// a new park id, which the ledger then records. Every park the ledger recorded stays valid
// (a record parked by the consumer, then again by redrive, has two): a message is confirmed
// when ANY recorded park of its record matches it. The unrecorded copy is refused.
//
// An item holding park records lives at least ParkTTL (WithParkTTL), longer than the parked
// queue keeps a message, so the record confirming a message exists as long as the message.

// Park is one recorded park of a record: the record and its park's receipt (the receipt the
// parker returned, park.Result.Receipt; PayloadS3 nil when the message carries the payload).
type Park struct {
	ID      recordid.ID
	Receipt park.Receipt
}

// DefaultParkTTL is the least lifetime of an item holding park records: the payload bucket's
// 15-day lifecycle (schema.PayloadRetentionDays), past the parked queue's 14-day retention.
const DefaultParkTTL = 15 * 24 * time.Hour

// WithParkTTL sets the least lifetime of an entry item holding park records (default
// DefaultParkTTL). It must exceed the parked queue's message retention.
func WithParkTTL(d time.Duration) Option { return func(l *Ledger) { l.parkTTL = d } }

const attrParks = "parks"

// parkJSON is the stored form of a Park (the shard is the item's).
type parkJSON struct {
	Seq    string `json:"s"`
	Sub    uint32 `json:"u,omitempty"`
	ParkID string `json:"p"`
	Bytes  int    `json:"n"`
	SHA256 string `json:"h"`
	KeySHA string `json:"k"`
	Bucket string `json:"b,omitempty"`
	Key    string `json:"o,omitempty"`
}

func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// validatePark checks what redrive will compare against.
func validatePark(pk Park) error {
	p, ptr := pk.Receipt, pk.Receipt.PayloadS3
	switch {
	case p.ParkID == "" || len(p.ParkID) > 64:
		return fmt.Errorf("%w: park of %s: park id %q", ErrInvalid, pk.ID, p.ParkID)
	case p.Bytes < 0:
		return fmt.Errorf("%w: park of %s: %d bytes", ErrInvalid, pk.ID, p.Bytes)
	case !validHex(p.SHA256, 64) || !validHex(p.KeySHA256, 64):
		return fmt.Errorf("%w: park of %s: digests %q %q", ErrInvalid, pk.ID, p.SHA256, p.KeySHA256)
	case ptr != nil && (ptr.Bucket == "" || ptr.Key == ""):
		return fmt.Errorf("%w: park of %s: payload object s3://%s/%s", ErrInvalid, pk.ID, ptr.Bucket, ptr.Key)
	}
	return nil
}

// sortedParks validates parks, which must all be in parked, and sorts them by record id.
func sortedParks(parks []Park, shard recordid.Shard, parked []recordid.ID) ([]Park, error) {
	if len(parks) == 0 {
		return nil, nil
	}
	out := slices.Clone(parks)
	for _, p := range out {
		if p.ID.ShardID != shard.ShardID {
			return nil, fmt.Errorf("%w: park of %s is not of shard %s", ErrInvalid, p.ID, shard.ShardID)
		}
		if _, ok := binarySearchID(parked, p.ID); !ok {
			return nil, fmt.Errorf("%w: park of %s, which is not in Parked", ErrInvalid, p.ID)
		}
		if err := validatePark(p); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b Park) int { return recordid.Compare(a.ID, b.ID) })
	return out, nil
}

// parksWithin returns the parks (sorted) of ids between lo and hi inclusive.
func parksWithin(parks []Park, lo, hi recordid.ID) []Park {
	var out []Park
	for _, p := range parks {
		if recordid.Compare(p.ID, lo) >= 0 && recordid.Compare(p.ID, hi) <= 0 {
			out = append(out, p)
		}
	}
	return out
}

// parksWithinSeq returns the parks whose sequence number lies in lo..hi.
func parksWithinSeq(parks []Park, lo, hi string) []Park {
	var out []Park
	for _, p := range parks {
		if seqnum.Compare(p.ID.Seq, lo) >= 0 && seqnum.Compare(p.ID.Seq, hi) <= 0 {
			out = append(out, p)
		}
	}
	return out
}

func encodeParks(parks []Park) []byte {
	js := make([]parkJSON, len(parks))
	for i, p := range parks {
		r := p.Receipt
		js[i] = parkJSON{Seq: p.ID.Seq, Sub: p.ID.Sub, ParkID: r.ParkID, Bytes: r.Bytes, SHA256: r.SHA256, KeySHA: r.KeySHA256}
		if r.PayloadS3 != nil {
			js[i].Bucket, js[i].Key = r.PayloadS3.Bucket, r.PayloadS3.Key
		}
	}
	b, _ := json.Marshal(js) // strings and numbers only: cannot fail
	return b
}

// decodeParks decodes a parks attribute of shardID, keeping those with a sequence number in
// lo..hi (all when first is empty).
func decodeParks(b []byte, shardID, first, last string) ([]Park, error) {
	var js []parkJSON
	if err := json.Unmarshal(b, &js); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, attrParks, err)
	}
	var out []Park
	for _, j := range js {
		if err := seqnum.Validate(j.Seq); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, attrParks, err)
		}
		p := Park{ID: recordid.ID{ShardID: shardID, Seq: j.Seq, Sub: j.Sub},
			Receipt: park.Receipt{ParkID: j.ParkID, Bytes: j.Bytes, SHA256: j.SHA256, KeySHA256: j.KeySHA}}
		if j.Bucket != "" || j.Key != "" {
			p.Receipt.PayloadS3 = &park.Pointer{Bucket: j.Bucket, Key: j.Key}
		}
		if err := validatePark(p); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, attrParks, err)
		}
		if first != "" && (seqnum.Compare(j.Seq, first) < 0 || seqnum.Compare(j.Seq, last) > 0) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// Parks returns every recorded park of id (several when it was parked more than once), in the
// order the entries were read.
func (r *Range) Parks(id recordid.ID) []Park {
	if id.ShardID != r.shardID {
		return nil
	}
	var out []Park
	for _, p := range r.parks {
		if p.ID == id {
			out = append(out, p)
		}
	}
	return out
}
