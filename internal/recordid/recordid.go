// Package recordid names what gapless keeps state about: a shard as seen by one consumer group
// (Shard) and one user record inside it (ID: shard, sequence number, KPL sub-index).
package recordid

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gapless-dev/gapless/internal/seqnum"
)

// ErrInvalid is returned (wrapped) for malformed groups, stream or shard names and record ids.
var ErrInvalid = errors.New("invalid identifier")

// Separator joins the parts of state keys; it cannot occur in any part (see Shard.Validate).
const Separator = "|"

// namePattern is what a group, stream or shard name must match. validName checks it with a
// loop: compiled, the regexp of a {1,256} repetition is ~240 KB of heap (3,400 allocations at
// init) held for the life of the function, which the collector's heap goal then doubles.
const namePattern = `^[A-Za-z0-9_.:\-]{1,256}$`

func validName(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false // (a byte of a multi-byte character too: the class is ASCII)
		}
	}
	return true
}

// Shard is one shard of one stream as consumed by one consumer group (GAPLESS_GROUP). Two
// applications reading one stream are two groups with separate state, like the field report's
// "Group:Stream:shardId" keys.
type Shard struct {
	Group   string
	Stream  string // stream name (not ARN)
	ShardID string // e.g. shardId-000000000000
}

// Validate checks that every part is non-empty and free of the key separator.
func (s Shard) Validate() error {
	for _, p := range []struct{ name, v string }{{"group", s.Group}, {"stream", s.Stream}, {"shard id", s.ShardID}} {
		if !validName(p.v) {
			return fmt.Errorf("%w: %s %q must match %s", ErrInvalid, p.name, p.v, namePattern)
		}
	}
	return nil
}

// String is "group|stream|shardId", the form used in state keys and logs.
func (s Shard) String() string {
	return s.Group + Separator + s.Stream + Separator + s.ShardID
}

// ID identifies one user record: the Kinesis record's shard and sequence number and, for a KPL
// aggregated record, the position of the user record inside it (0 otherwise).
type ID struct {
	ShardID string
	Seq     string
	Sub     uint32
}

// Validate checks the sequence number and shard id.
func (id ID) Validate() error {
	if !validName(id.ShardID) {
		return fmt.Errorf("%w: shard id %q", ErrInvalid, id.ShardID)
	}
	if err := seqnum.Validate(id.Seq); err != nil {
		return fmt.Errorf("%w: record %s: %v", ErrInvalid, id.ShardID, err)
	}
	return nil
}

// String is "shardId:seq:sub", parsed back by Parse.
func (id ID) String() string {
	return id.ShardID + ":" + id.Seq + ":" + strconv.FormatUint(uint64(id.Sub), 10)
}

// Parse reverses String.
func Parse(s string) (ID, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return ID{}, fmt.Errorf("%w: record id %q", ErrInvalid, s)
	}
	j := strings.LastIndexByte(s[:i], ':')
	if j < 0 {
		return ID{}, fmt.Errorf("%w: record id %q", ErrInvalid, s)
	}
	sub, err := strconv.ParseUint(s[i+1:], 10, 32)
	if err != nil {
		return ID{}, fmt.Errorf("%w: record id %q: sub-index: %v", ErrInvalid, s, err)
	}
	id := ID{ShardID: s[:j], Seq: s[j+1 : i], Sub: uint32(sub)}
	if err := id.Validate(); err != nil {
		return ID{}, err
	}
	return id, nil
}

// Compare orders ids of one shard by sequence number, then sub-index. Both must be valid.
func Compare(a, b ID) int {
	if c := seqnum.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	switch {
	case a.Sub < b.Sub:
		return -1
	case a.Sub > b.Sub:
		return 1
	}
	return 0
}
