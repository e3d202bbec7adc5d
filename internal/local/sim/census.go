package sim

import (
	"context"

	"github.com/gapless-dev/gapless/internal/recordid"
	"github.com/gapless-dev/gapless/internal/seqnum"
)

// Census, when set, gives the reconciler a census of the model's shards (every record ever put,
// trimmed ones included: a reader's census taken while they were held), so that a span that
// expired before it was verified is counted ExpiredUnverified when the ledger shows every
// record of it done. The loss checks then prove that the rule hides no loss: a shard with a
// record trimmed unseen must still have LostToRetention.
var Census = false

// kinCensus is the model's census (reconcile.Census).
type kinCensus struct{ k *Kinesis }

func (c kinCensus) Records(_ context.Context, shard recordid.Shard, after, before string) ([]recordid.ID, bool, error) {
	var out []recordid.ID
	for _, r := range c.k.AllRecords()[shard.ShardID] {
		if (after == "" || seqnum.Compare(r.seq, after) > 0) && seqnum.Compare(r.seq, before) < 0 {
			out = append(out, recordid.ID{ShardID: shard.ShardID, Seq: r.seq})
		}
	}
	return out, true, nil
}
