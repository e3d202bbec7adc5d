package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

func init() {
	commands["replay"] = command{summary: "re-read a shard range and replay what the ledger lacks through the pipeline", run: runReplay}
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
	shardID := fs.String("shard", "", "shard id, e.g. shardId-000000000000 (required)")
	from := fs.String("from", "", "first sequence number of the range (required)")
	to := fs.String("to", "", "last sequence number of the range, inclusive (required)")
	recordFilter := filterFlag(fs)
	onPark := fs.String("on-park", envOrDefault(os.Getenv(config.EnvOnPark), config.OnParkContinue),
		"what a parked record means for later records of its key, as the functions' ON_PARK: continue or hold-key (default $"+config.EnvOnPark+" or continue)")
	setHelp(fs, "replay --shard S --from A --to B [flags]",
		"Re-reads exactly the records A..B of shard S (GetShardIterator AT_SEQUENCE_NUMBER A) and runs\n"+
			"those the ledger lacks through the same pipeline as the consumer: the default Process\n"+
			"(forward to the target queue), the same attempt and parking rules. No settle window applies.\n"+
			"Exits 1 when some record of the range is still failing (run it again, or let it park).")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *shardID == "" || *from == "" || *to == "" {
		return usagef("--shard, --from and --to are required")
	}
	if *onPark != config.OnParkContinue && *onPark != config.OnParkHoldKey {
		return usagef("--on-park %q: must be %s or %s", *onPark, config.OnParkContinue, config.OnParkHoldKey)
	}
	flt, err := recordFilter()
	if err != nil {
		return err
	}
	c, err := o.connect(ctx, fs, stderr, "group", "stream", "checkpoint-table", "dedupe-table", "parked-queue", "target-queue")
	if err != nil {
		return err
	}
	log := cliLogger(stderr)
	ledger := o.newLedger(c, log)
	var extra []pipeline.Option
	if *onPark == config.OnParkHoldKey { // a replay must not apply a record of a held key
		extra = append(extra, pipeline.WithHoldKey(pipeline.HoldStore{H: dedupe.NewHolds(c.ddb, o.dedupeTable)}))
	}
	p, err := buildPipeline(ctx, c, o, ledger, ledger, log, extra...)
	if err != nil {
		return err
	}
	r, err := reconcile.New(c.kin, checkpoint.New(c.ddb, o.checkpointTable), p,
		reconcile.Config{Group: o.group, Stream: o.stream, ReadInterval: reconcileCLIReadInterval, Filter: flt},
		reconcile.WithLogger(log), reconcile.WithProgress(func(pr reconcile.Progress) {
			fmt.Fprintf(stderr, "replay %s: through %s, %d records verified, %d replayed\n", pr.ShardID, pr.LastSeq, pr.RecordsVerified, pr.GapsReplayed)
		}))
	if err != nil {
		return err
	}
	rep, err := r.ReplayRange(ctx, *shardID, *from, *to)
	out := replayOutput{ShardID: *shardID, From: *from, To: *to, Accounted: rep.Accounted,
		RecordsVerified: rep.RecordsVerified, GapsDetected: rep.GapsDetected, GapsReplayed: rep.GapsReplayed,
		Parked: rep.Parked, StillFailing: rep.StillFailing, LostToRetention: rep.LostSpans, GetRecordsCalls: rep.GetRecordsCalls,
		Filtered: rep.Filtered}
	if o.jsonOut {
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(stdout, "shard %s %s..%s: %d records verified, %d absent from the ledger, %d replayed, %d parked, %d still failing, %d lost to retention\n",
			out.ShardID, out.From, out.To, out.RecordsVerified, out.GapsDetected, out.GapsReplayed, out.Parked, out.StillFailing, out.LostToRetention)
	}
	if err != nil {
		return err
	}
	if !rep.Accounted {
		return fmt.Errorf("range not fully accounted for: %d records still failing (run replay again; they park after --max-attempts failures)", rep.StillFailing)
	}
	return nil
}

// reconcileCLIReadInterval paces the CLI's GetRecords calls on a shard (the reconciler's
// default, 1s, is for unattended runs; an operator waiting takes two of the shard's five reads
// per second).
const reconcileCLIReadInterval = 400 * time.Millisecond

func envOrDefault(v, def string) string {
	if v = strings.TrimSpace(v); v != "" {
		return v
	}
	return def
}
