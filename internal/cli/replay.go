package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/gapless-dev/gapless/internal/reconcile"
)

func init() {
	commands["replay"] = command{summary: "have the reconciler function re-read a shard range and replay what the ledger lacks", run: runReplay}
}

// replayOutput is what `gapless replay --json` prints.
type replayOutput struct {
	ShardID         string `json:"shard_id"`
	From            string `json:"from"`
	To              string `json:"to"`
	Accounted       bool   `json:"accounted"`
	RecordsVerified int    `json:"records_verified"`
	GapsDetected    int    `json:"gaps_detected"`
	GapsReplayed    int    `json:"gaps_replayed"`
	Parked          int    `json:"parked"`
	StillFailing    int    `json:"still_failing"`
	LostToRetention int    `json:"lost_to_retention"`
	GetRecordsCalls int    `json:"get_records_calls"`
	Filtered        int    `json:"filtered"` // records --filter drops: accounted for, not replayed
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := opsFlags("replay", stderr, true)
	rf := reconcilerFlags(fs)
	shardID := fs.String("shard", "", "shard id, e.g. shardId-000000000000 (required)")
	from := fs.String("from", "", "first sequence number of the range (required)")
	to := fs.String("to", "", "last sequence number of the range, inclusive (required)")
	setHelp(fs, "replay --shard S --from A --to B [flags]",
		"Asks the reconciler function to re-read exactly the records A..B of shard S\n"+
			"(GetShardIterator AT_SEQUENCE_NUMBER A) and run those the ledger lacks through its own\n"+
			"pipeline: its Process, its attempt and parking rules, its ON_PARK (with hold-key no record of\n"+
			"a held key is applied) and its RECORD_FILTER. No settle window applies. Which function runs\n"+
			"it: as for redrive (--reconciler-function on AWS, else the local reconciler). An invocation\n"+
			"that runs out of time is followed by another while the previous one replayed something.\n"+
			"Exits 1 when the function refuses the command or fails, or some record of the range is still\n"+
			"failing (run it again, or let it park).")
	if err := o.parse(fs, args, stdout); err != nil {
		return err
	}
	if *shardID == "" || *from == "" || *to == "" {
		return usagef("--shard, --from and --to are required")
	}
	inv, err := reconcilerInvoker(ctx, o, rf, fs, stderr)
	if err != nil {
		return err
	}
	defer inv.Close()
	var res reconcile.CommandResult
	for n := 1; ; n++ {
		if res, err = sendCommand(ctx, inv, reconcile.Command{Command: reconcile.CommandReplay, Group: o.group, Stream: o.stream,
			Replay: &reconcile.ReplayCommand{ShardID: *shardID, From: *from, To: *to}}); err != nil {
			return err
		}
		if res.Replay == nil {
			return fmt.Errorf("%s answered the replay command without a replay report", inv.Where())
		}
		r := res.Replay
		state := ""
		if !res.Done {
			state = "; out of time"
		}
		fmt.Fprintf(stderr, "replay %s: invocation %d of %s (group %s, stream %s, ON_PARK=%s): %d records verified, %d replayed, %d parked%s\n",
			printable(r.ShardID, false), n, inv.Where(), printable(res.Group, false), printable(res.Stream, false), printable(res.OnPark, false),
			r.RecordsVerified, r.GapsReplayed, r.Parked, state)
		if res.Done || res.Error != "" || r.Accounted || r.GapsReplayed+r.Parked+r.LostToRetention == 0 {
			break
		}
	}
	r := res.Replay
	out := replayOutput{ShardID: r.ShardID, From: r.From, To: r.To, Accounted: r.Accounted,
		RecordsVerified: r.RecordsVerified, GapsDetected: r.GapsDetected, GapsReplayed: r.GapsReplayed,
		Parked: r.Parked, StillFailing: r.StillFailing, LostToRetention: r.LostToRetention, GetRecordsCalls: r.GetRecordsCalls,
		Filtered: r.Filtered}
	if o.jsonOut {
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(stdout, "shard %s %s..%s: %d records verified, %d absent from the ledger, %d replayed, %d parked, %d still failing, %d lost to retention\n",
			printable(out.ShardID, false), printable(out.From, false), printable(out.To, false), out.RecordsVerified, out.GapsDetected, out.GapsReplayed, out.Parked, out.StillFailing, out.LostToRetention)
	}
	if res.Error != "" {
		return fmt.Errorf("the reconciler: %s", printable(res.Error, false))
	}
	if !res.Done && !r.Accounted {
		return fmt.Errorf("the range was not read to its end within the function's time, and the last invocation replayed nothing: run replay again")
	}
	if !r.Accounted {
		return fmt.Errorf("range not fully accounted for: %d records still failing (run replay again; they park after MAX_RECORD_ATTEMPTS failures)", r.StillFailing)
	}
	return nil
}
