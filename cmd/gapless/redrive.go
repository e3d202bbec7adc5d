package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/reconcile"
)

func init() {
	commands["redrive"] = command{summary: "run parked records back through the pipeline after a fix", run: runRedrive}
}

// redriveOutput is what `gapless redrive --json` prints.
type redriveOutput struct {
	Received       int `json:"received"`
	Processed      int `json:"processed"`
	Duplicates     int `json:"duplicates"`
	ParkedAgain    int `json:"parked_again"`
	Left           int `json:"left"`
	Skipped        int `json:"skipped"`
	Invalid        int `json:"invalid"`
	DeleteFailures int `json:"delete_failures"`
	Held           int `json:"held"`     // left behind a held key's head not applied yet (ON_PARK=hold-key)
	Released       int `json:"released"` // held keys released: every held record applied in order
	Refused        int `json:"refused"`  // not confirmed by the ledger's park records: never applied, left in the queue
}

func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := opsFlags("redrive", stderr, true)
	maxMessages := fs.Int("max-messages", 0, "stop after this many parked messages (0: until none is left)")
	visibility := fs.Duration("visibility", 2*time.Minute, "how long a received message stays hidden; messages left in the queue reappear after it")
	setHelp(fs, "redrive [flags]",
		"Receives parked records (the parked queue) of the group and stream and runs each through the\n"+
			"pipeline again with a fresh budget of --max-attempts (a payload parked in the payload bucket is\n"+
			"read back from S3 and checked; one parked by reference by an older release is re-read from the\n"+
			"stream). A record that succeeds is forwarded by the default Process and its message\n"+
			"deleted; one that fails its whole budget is parked again (a new message) and the old one\n"+
			"deleted; anything else stays in the queue. Records of a held key (ON_PARK=hold-key) are\n"+
			"redriven in the order they were parked, head first; the key is released once all are\n"+
			"applied, and nothing behind a head that fails again is applied. Progress on stderr,\n"+
			"summary on stdout.\n"+
			"Exits 1 when some message was left in the queue.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	c, err := o.connect(ctx, fs, stderr, "group", "stream", "checkpoint-table", "dedupe-table", "parked-queue", "target-queue")
	if err != nil {
		return err
	}
	log := cliLogger(stderr)
	dl := o.newLedger(c, log)
	p, err := buildPipeline(ctx, c, o, reconcile.NewRedriveLedger(dl), dl, log)
	if err != nil {
		return err
	}
	d, err := reconcile.NewRedriver(c.sqs, o.parkedQueue, c.kin, p,
		reconcile.RedriveConfig{Group: o.group, Stream: o.stream, MaxRecordAttempts: o.maxAttempts, MaxMessages: *maxMessages, VisibilityTimeout: *visibility},
		// Held keys (ON_PARK=hold-key) are redriven in order and released; without holds in the
		// table this costs one GetItem per partition key seen.
		reconcile.WithRedriveHolds(dedupe.NewHolds(c.ddb, o.dedupeTable)),
		reconcile.WithRedrivePayloadBucket(o.payloadBucket),
		reconcile.WithRedriveLogger(log), reconcile.WithRedrivePayloads(c.s3), reconcile.WithRedriveProgress(func(ev reconcile.RedriveEvent) {
			why := ""
			if ev.Err != nil {
				why = ev.Err.Error()
			}
			fmt.Fprintln(stderr, redriveLine(ev.RecordID, ev.MessageID, string(ev.Outcome), ev.Attempts, why))
		}))
	if err != nil {
		return err
	}
	rep, err := d.Run(ctx)
	out := redriveOutput{Received: rep.Received, Processed: rep.Processed, Duplicates: rep.Duplicates, ParkedAgain: rep.ParkedAgain,
		Left: rep.Left, Skipped: rep.Skipped, Invalid: rep.Invalid, DeleteFailures: rep.DeleteFailures,
		Held: rep.Held, Released: rep.Released, Refused: rep.Refused}
	if o.jsonOut {
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(stdout, "%d parked messages: %d processed, %d already done, %d parked again, %d left in the queue, %d skipped, %d invalid\n",
			out.Received, out.Processed, out.Duplicates, out.ParkedAgain, out.Left, out.Skipped, out.Invalid)
		if out.Refused > 0 {
			fmt.Fprintf(stdout, "%d refused: the ledger records no such park (forged, altered, or sent before a crash); left in the queue for an operator\n", out.Refused)
		}
		if out.Held+out.Released > 0 {
			fmt.Fprintf(stdout, "held keys: %d released, %d records still held behind a head not applied\n", out.Released, out.Held)
		}
	}
	if err != nil {
		return err
	}
	if n := rep.Left + rep.Invalid + rep.Held + rep.Refused; n > 0 {
		return fmt.Errorf("%d messages left in the parked queue (see the lines above)", n)
	}
	return nil
}

// redriveLine is the progress line of one parked message. Record ids and error texts come from
// message data: the line is escaped (printable) so a message cannot drive the terminal.
func redriveLine(recordID, messageID, outcome string, attempts int, why string) string {
	line := fmt.Sprintf("redrive %s: %s", orDash(recordID, messageID), outcome)
	if attempts > 0 {
		line += fmt.Sprintf(" after %d attempt(s)", attempts)
	}
	if why != "" {
		line += ": " + why
	}
	return printable(line)
}

func orDash(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
