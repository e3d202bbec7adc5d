package wire

import "github.com/gapless-dev/gapless/internal/pipeline"

// ForRedrive builds the pipeline of a redrive session: the ledger is read through wrap
// (reconcile.NewRedriveLedger: parked records run again with a fresh attempt budget) while
// claims still go to the ledger itself, and the hold-key rule is left out whatever ON_PARK
// says, because the Redriver walks a held key's records itself and releases the key.
func ForRedrive(wrap func(pipeline.Ledger) pipeline.Ledger) Option {
	return func(o *options) { o.redriveLedger = wrap }
}
