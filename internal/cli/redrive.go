package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gapless-dev/gapless/internal/reconcile"
)

func init() {
	commands["redrive"] = command{summary: "have the reconciler function run parked records back through its Process after a fix", run: runRedrive}
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
	rf := reconcilerFlags(fs)
	maxMessages := fs.Int("max-messages", 0, "stop after this many parked messages (0: until none is left)")
	visibility := fs.Duration("visibility", 2*time.Minute, "how long a received message stays hidden; messages left in the queue reappear after it")
	setHelp(fs, "redrive [flags]",
		"Asks the reconciler function to redrive the parked records (the parked queue) of its group and\n"+
			"stream: it runs each through its own Process again with a fresh budget of MAX_RECORD_ATTEMPTS\n"+
			"(a payload parked in the payload bucket is read back from S3 and checked; one parked by\n"+
			"reference by an older release is re-read from the stream), with its own configuration\n"+
			"(ON_PARK, queues, payload bucket). A record that succeeds has its message deleted; one that\n"+
			"fails its whole budget is parked again (a new message) and the old one deleted; anything else\n"+
			"stays in the queue. A message the ledger's park records do not confirm (forged, altered, or\n"+
			"a copy sent before a crash) is refused: never applied, left in the queue, counted\n"+
			"(ParkedRefused) and listed with its reason. Records of a held key (ON_PARK=hold-key) are\n"+
			"redriven in the order they were parked, head first; the key is released once all are\n"+
			"applied, and nothing behind a head that fails again is applied.\n\n"+
			"On AWS, --reconciler-function names the deployed function (lambda:InvokeFunction is the only\n"+
			"right the CLI needs). Without it, the local reconciler runs: functions/reconciler of the Go\n"+
			"module holding the current directory (--function-dir), built and run under the Lambda runtime\n"+
			"emulator with the env file's ReconcilerFunction variables, the flags given, --set, and the\n"+
			"local stack's endpoints (the shell's, after `. .local/stack.env`, or with --local the ones\n"+
			"stack.env records). Each invocation stops before the function's timeout and the next one\n"+
			"goes on. Progress per message and per invocation on stderr, summary on stdout (left,\n"+
			"skipped, invalid and held are the last invocation's: what is still in the queue).\n"+
			"Exits 1 when the function refuses the command or fails, or some message was left in the queue.")
	if err := o.parse(fs, args, stdout); err != nil {
		return err
	}
	if *maxMessages < 0 {
		return usagef("--max-messages %d: want 0 or more", *maxMessages)
	}
	inv, err := reconcilerInvoker(ctx, o, rf, fs, stderr)
	if err != nil {
		return err
	}
	defer inv.Close()
	var out redriveOutput
	var last *reconcile.RedriveResult
	var runErr error
	for n := 1; ; n++ {
		limit := 0
		if *maxMessages > 0 {
			if limit = *maxMessages - out.Received; limit <= 0 {
				break
			}
		}
		res, err := sendCommand(ctx, inv, reconcile.Command{Command: reconcile.CommandRedrive, Group: o.group, Stream: o.stream,
			Redrive: &reconcile.RedriveCommand{MaxMessages: limit, VisibilityTimeoutSeconds: int((*visibility + time.Second - 1) / time.Second)}})
		if err != nil {
			return err
		}
		r := res.Redrive
		if r == nil {
			return fmt.Errorf("%s answered the redrive command without a redrive report", inv.Where())
		}
		printRedriveEvents(stderr, r)
		state := ""
		if !res.Done {
			state = "; out of time"
		}
		fmt.Fprintf(stderr, "redrive: invocation %d of %s (group %s, stream %s, ON_PARK=%s): %d messages, %d processed, %d already done, %d parked again, %d left%s\n",
			n, inv.Where(), printable(res.Group, false), printable(res.Stream, false), printable(res.OnPark, false),
			r.Received, r.Processed, r.Duplicates, r.ParkedAgain, r.Left, state)
		out.Received += r.Received
		out.Processed += r.Processed
		out.Duplicates += r.Duplicates
		out.ParkedAgain += r.ParkedAgain
		out.DeleteFailures += r.DeleteFailures
		out.Released += r.Released
		out.Refused += r.Refused
		out.Left, out.Skipped, out.Invalid, out.Held = r.Left, r.Skipped, r.Invalid, r.Held
		last = r
		if res.Error != "" {
			runErr = fmt.Errorf("the reconciler: %s", printable(res.Error, false))
			break
		}
		if res.Done {
			break
		}
		if r.Processed+r.Duplicates+r.Released == 0 {
			runErr = fmt.Errorf("invocation %d ran out of time without redriving any record (%d parked again, %d left): run redrive again, or with --max-messages", n, r.ParkedAgain, r.Left)
			break
		}
	}
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
	if runErr != nil {
		return runErr
	}
	// Refused messages stay in the queue for an operator; the count is the session's, not the
	// last invocation's (a later invocation receives them again and refuses them again).
	if last != nil && last.Left+last.Invalid+last.Held+out.Refused > 0 {
		return fmt.Errorf("%d messages left in the parked queue (see the lines above)", last.Left+last.Invalid+last.Held+out.Refused)
	}
	return nil
}

// printRedriveEvents prints one line per parked message the function handled.
func printRedriveEvents(w io.Writer, r *reconcile.RedriveResult) {
	for _, ev := range r.Events {
		fmt.Fprintln(w, redriveLine(ev.RecordID, ev.MessageID, ev.Outcome, ev.Attempts, ev.Error))
	}
	if r.EventsOmitted > 0 {
		fmt.Fprintf(w, "redrive: %d more messages handled (not listed)\n", r.EventsOmitted)
	}
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
	return printable(line, false)
}

func orDash(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
