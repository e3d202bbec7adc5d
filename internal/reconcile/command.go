package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Operator commands: the reconciler function redrives parked records and replays ranges with
// its own Process and its own configuration (ON_PARK, queues, payload bucket, record filter),
// when it is invoked with a command event instead of a schedule or an SQS event:
//
//	{"gapless": {"version": 1, "command": "redrive", "group": "orders", "stream": "orders",
//	             "redrive": {"maxMessages": 0, "visibilityTimeoutSeconds": 120}}}
//	{"gapless": {"version": 1, "command": "replay", "group": "orders", "stream": "orders",
//	             "replay": {"shardId": "shardId-000000000000", "from": "4959...", "to": "4959..."}}}
//	{"gapless": {"version": 1, "command": "verify", "group": "orders", "stream": "orders",
//	             "verify": {"shardId": "shardId-000000000000"}}}
//
// verify walks one shard now, as one invocation of the fan-out does (RunShard); the same
// object is the body of every verify-queue message (work.go), where group and stream are
// required.
//
// group and stream are optional; when given they must be the function's own, so a command meant
// for another deployment is refused instead of run against this one. Unknown members, versions
// and commands are refused. The answer is {"gapless": CommandResult}; a refusal is a function
// error (ErrCommand) whose message says why. One invocation runs until the command is done or
// until CommandReserve before the invocation's deadline; CommandResult.Done says which, and an
// operator (gapless redrive, gapless replay) invokes again until it is done.

// CommandVersion is the version of the command event and of its answer.
const CommandVersion = 1

// Command names.
const (
	CommandRedrive = "redrive"
	CommandReplay  = "replay"
	CommandVerify  = "verify"
)

// ErrCommand is wrapped by the error of a refused command event.
var ErrCommand = errors.New("reconcile: command refused")

// CommandEvent is the invocation payload of a command.
type CommandEvent struct {
	Gapless *Command `json:"gapless"`
}

// Command is an operator's request.
type Command struct {
	Version int    `json:"version"`
	Command string `json:"command"`
	Group   string `json:"group,omitempty"`
	Stream  string `json:"stream,omitempty"`
	// Exactly the member named by Command is set.
	Redrive *RedriveCommand `json:"redrive,omitempty"`
	Replay  *ReplayCommand  `json:"replay,omitempty"`
	Verify  *VerifyCommand  `json:"verify,omitempty"`
}

// VerifyCommand names the shard to walk.
type VerifyCommand struct {
	ShardID string `json:"shardId"`
}

// RedriveCommand are the options of a redrive.
type RedriveCommand struct {
	// MaxMessages stops after this many parked messages (0: until the queue has none left that
	// this invocation has not seen).
	MaxMessages int `json:"maxMessages,omitempty"`
	// VisibilityTimeoutSeconds hides a received message while it is redriven (0: 120).
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds,omitempty"`
}

// ReplayCommand names the range to replay, inclusive.
type ReplayCommand struct {
	ShardID string `json:"shardId"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// CommandResponse is the answer to a command event.
type CommandResponse struct {
	Gapless CommandResult `json:"gapless"`
}

// CommandResult reports one invocation of a command.
type CommandResult struct {
	Version int    `json:"version"`
	Command string `json:"command"`
	Group   string `json:"group"`
	Stream  string `json:"stream"`
	OnPark  string `json:"onPark,omitempty"`
	// Done: the command ran to its end in this invocation. False: it stopped because the
	// invocation's time ran out; invoke again to go on.
	Done bool `json:"done"`
	// Error is the run's error (the parked queue could not be read, a replay failed); the
	// counts are valid either way.
	Error   string         `json:"error,omitempty"`
	Redrive *RedriveResult `json:"redrive,omitempty"`
	Replay  *ReplayResult  `json:"replay,omitempty"`
	Verify  *VerifyResult  `json:"verify,omitempty"`
}

// VerifyResult reports one shard's walk.
type VerifyResult struct {
	ShardID string `json:"shardId"`
	// Waiting: a parent is not verified to its end yet; nothing was walked.
	Waiting bool `json:"waiting,omitempty"`
	// Complete: the walk reached the shard's bound; End: the shard is closed and verified to
	// its last record.
	Complete bool     `json:"complete"`
	End      bool     `json:"end,omitempty"`
	Children []string `json:"children,omitempty"`
	WalkCounts
}

// RedriveResult is a redrive invocation's report.
type RedriveResult struct {
	Received       int `json:"received"`
	Processed      int `json:"processed"`
	Duplicates     int `json:"duplicates"`
	ParkedAgain    int `json:"parkedAgain"`
	Left           int `json:"left"`
	Skipped        int `json:"skipped"`
	Invalid        int `json:"invalid"`
	DeleteFailures int `json:"deleteFailures"`
	Held           int `json:"held"`
	Released       int `json:"released"`
	// Refused: messages the ledger's park records do not confirm, left in the queue.
	Refused int `json:"refused"`
	// Events are the messages handled, in order (at most MaxCommandEvents; EventsOmitted
	// counts the rest).
	Events        []CommandEventLine `json:"events,omitempty"`
	EventsOmitted int                `json:"eventsOmitted,omitempty"`
}

// CommandEventLine is one parked message's outcome.
type CommandEventLine struct {
	MessageID string `json:"messageId"`
	RecordID  string `json:"recordId,omitempty"`
	Outcome   string `json:"outcome"`
	Attempts  int    `json:"attempts,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ReplayResult is a replay invocation's report.
type ReplayResult struct {
	ShardID   string `json:"shardId"`
	From      string `json:"from"`
	To        string `json:"to"`
	Accounted bool   `json:"accounted"`
	WalkCounts
}

// WalkCounts are what a replay or a shard's walk did, as the answers of replay and verify
// carry them.
type WalkCounts struct {
	RecordsVerified   int `json:"recordsVerified"`
	GapsDetected      int `json:"gapsDetected"`
	GapsReplayed      int `json:"gapsReplayed"`
	Parked            int `json:"parked"`
	StillFailing      int `json:"stillFailing"`
	LostToRetention   int `json:"lostToRetention"`
	ExpiredUnverified int `json:"expiredUnverified,omitempty"`
	GetRecordsCalls   int `json:"getRecordsCalls"`
	Filtered          int `json:"filtered,omitempty"`
}

func walkCounts(s ShardReport) WalkCounts {
	return WalkCounts{RecordsVerified: s.RecordsVerified, GapsDetected: s.GapsDetected, GapsReplayed: s.GapsReplayed,
		Parked: s.Parked, StillFailing: s.StillFailing, LostToRetention: s.LostSpans, ExpiredUnverified: s.ExpiredUnverified,
		GetRecordsCalls: s.GetRecordsCalls, Filtered: s.Filtered}
}

// MaxCommandEvents bounds the events one answer lists (a Lambda response is at most 6 MB).
const MaxCommandEvents = 1000

// CommandReserve is the time a command leaves before the invocation's deadline: the redrive
// makes the messages it left visible again and the answer is written.
const CommandReserve = 10 * time.Second

// NewRedriverFunc builds one redrive session's Redriver with the function's own pipeline (a
// fresh NewRedriveLedger each time), parked queue, payload bucket and holds. cfg has Group,
// Stream, MaxMessages and VisibilityTimeout set; the function sets MaxRecordAttempts.
type NewRedriverFunc func(ctx context.Context, cfg RedriveConfig, progress func(RedriveEvent)) (*Redriver, error)

// WithCommands lets Handle run operator commands (redrive through newRedriver; replay through
// the handler's Reconciler). onPark is the function's ON_PARK, reported in every answer.
// Without it a command event is refused.
func WithCommands(newRedriver NewRedriverFunc, onPark string) HandlerOption {
	return func(h *Handler) { h.cmds = commands{newRedriver: newRedriver, onPark: onPark} }
}

// commands is what WithCommands gives the Handler.
type commands struct {
	newRedriver NewRedriverFunc
	onPark      string
}

// parseCommand decodes and validates raw, the "gapless" member of the event.
func parseCommand(raw json.RawMessage) (Command, error) {
	var c Command
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: the \"gapless\" member is not a command object: %v", ErrCommand, err)
	}
	if dec.More() {
		return c, fmt.Errorf("%w: data after the command object", ErrCommand)
	}
	if c.Version != CommandVersion {
		return c, fmt.Errorf("%w: version %d, this function reads version %d", ErrCommand, c.Version, CommandVersion)
	}
	members := map[string]bool{CommandRedrive: c.Redrive != nil, CommandReplay: c.Replay != nil, CommandVerify: c.Verify != nil}
	for name, set := range members {
		if set && name != c.Command {
			return c, fmt.Errorf("%w: command %q with a %s member", ErrCommand, c.Command, name)
		}
	}
	switch c.Command {
	case CommandRedrive:
		if c.Redrive == nil {
			c.Redrive = &RedriveCommand{}
		}
		if c.Redrive.MaxMessages < 0 || c.Redrive.VisibilityTimeoutSeconds < 0 || c.Redrive.VisibilityTimeoutSeconds > 12*3600 {
			return c, fmt.Errorf("%w: redrive maxMessages %d, visibilityTimeoutSeconds %d: want >= 0 and a visibility of at most 12 hours (SQS's maximum)",
				ErrCommand, c.Redrive.MaxMessages, c.Redrive.VisibilityTimeoutSeconds)
		}
	case CommandReplay:
		if c.Replay == nil || c.Replay.ShardID == "" || c.Replay.From == "" || c.Replay.To == "" {
			return c, fmt.Errorf("%w: replay needs shardId, from and to", ErrCommand)
		}
	case CommandVerify:
		if c.Verify == nil || c.Verify.ShardID == "" {
			return c, fmt.Errorf("%w: verify needs shardId", ErrCommand)
		}
	case "":
		return c, fmt.Errorf("%w: no command (want %s, %s or %s)", ErrCommand, CommandRedrive, CommandReplay, CommandVerify)
	default:
		return c, fmt.Errorf("%w: unknown command %q (want %s, %s or %s)", ErrCommand, c.Command, CommandRedrive, CommandReplay, CommandVerify)
	}
	return c, nil
}

// HandleCommand runs the command in raw (the event's "gapless" member). A command that is
// malformed, unknown, meant for another group or stream, or that this function cannot run is
// refused with an error wrapping ErrCommand.
func (h *Handler) HandleCommand(ctx context.Context, raw json.RawMessage) (CommandResponse, error) {
	c, err := parseCommand(raw)
	if err != nil {
		h.log.ErrorContext(ctx, "operator command refused", "group", h.r.cfg.Group, "error", err)
		return CommandResponse{}, err
	}
	if (c.Group != "" && c.Group != h.r.cfg.Group) || (c.Stream != "" && c.Stream != h.r.cfg.Stream) {
		err := fmt.Errorf("%w: the command is for group %q on stream %q; this function is group %q on stream %q",
			ErrCommand, c.Group, c.Stream, h.r.cfg.Group, h.r.cfg.Stream)
		h.log.ErrorContext(ctx, "operator command refused", "group", h.r.cfg.Group, "error", err)
		return CommandResponse{}, err
	}
	if h.cmds.newRedriver == nil {
		err := fmt.Errorf("%w: this reconciler was built without operator commands", ErrCommand)
		h.log.ErrorContext(ctx, "operator command refused", "group", h.r.cfg.Group, "error", err)
		return CommandResponse{}, err
	}
	res := CommandResult{Version: CommandVersion, Command: c.Command, Group: h.r.cfg.Group, Stream: h.r.cfg.Stream, OnPark: h.cmds.onPark}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if deadline, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(ctx, deadline.Add(-CommandReserve))
	}
	defer cancel()
	switch c.Command {
	case CommandRedrive:
		err = h.redriveCommand(rctx, *c.Redrive, &res)
	case CommandReplay:
		err = h.replayCommand(rctx, *c.Replay, &res)
	case CommandVerify:
		err = h.verifyCommand(rctx, *c.Verify, &res)
	}
	if err != nil {
		var refused errRefused
		if errors.As(err, &refused) {
			h.log.ErrorContext(ctx, "operator command refused", "group", h.r.cfg.Group, "error", err)
			return CommandResponse{}, err
		}
		res.Error = err.Error()
	}
	// Done unless the invocation's time ran out first (the caller invokes again).
	res.Done = rctx.Err() == nil
	h.log.InfoContext(ctx, "operator command", "group", h.r.cfg.Group, "stream", h.r.cfg.Stream, "command", c.Command,
		"done", res.Done, "redrive", res.Redrive, "replay", res.Replay, "verify", res.Verify, "error", res.Error)
	return CommandResponse{Gapless: res}, nil
}

// errRefused marks an error that refuses the command (a function error) rather than one the
// run met (reported in CommandResult.Error).
type errRefused struct{ error }

func (e errRefused) Unwrap() error { return e.error }

func (h *Handler) redriveCommand(ctx context.Context, c RedriveCommand, res *CommandResult) error {
	out := &RedriveResult{}
	res.Redrive = out
	cfg := RedriveConfig{Group: h.r.cfg.Group, Stream: h.r.cfg.Stream, MaxMessages: c.MaxMessages,
		VisibilityTimeout: time.Duration(c.VisibilityTimeoutSeconds) * time.Second}
	d, err := h.cmds.newRedriver(ctx, cfg, func(ev RedriveEvent) {
		if len(out.Events) >= MaxCommandEvents {
			out.EventsOmitted++
			return
		}
		line := CommandEventLine{MessageID: ev.MessageID, RecordID: ev.RecordID, Outcome: string(ev.Outcome), Attempts: ev.Attempts}
		if ev.Err != nil {
			line.Error = ev.Err.Error()
		}
		out.Events = append(out.Events, line)
	})
	if err != nil {
		return errRefused{fmt.Errorf("%w: redrive: %v", ErrCommand, err)}
	}
	rep, err := d.Run(ctx)
	out.Received, out.Processed, out.Duplicates, out.ParkedAgain = rep.Received, rep.Processed, rep.Duplicates, rep.ParkedAgain
	out.Left, out.Skipped, out.Invalid, out.DeleteFailures = rep.Left, rep.Skipped, rep.Invalid, rep.DeleteFailures
	out.Held, out.Released, out.Refused = rep.Held, rep.Released, rep.Refused
	return err
}

func (h *Handler) replayCommand(ctx context.Context, c ReplayCommand, res *CommandResult) error {
	rep, err := h.r.ReplayRange(ctx, c.ShardID, c.From, c.To)
	res.Replay = &ReplayResult{ShardID: c.ShardID, From: c.From, To: c.To, Accounted: rep.Accounted, WalkCounts: walkCounts(rep.ShardReport)}
	h.emitReport(rep.ShardReport, -1)
	return err
}

func (h *Handler) verifyCommand(ctx context.Context, c VerifyCommand, res *CommandResult) error {
	run, err := h.r.RunShard(ctx, c.ShardID)
	if errors.Is(err, ErrShardNotInStream) {
		return errRefused{fmt.Errorf("%w: verify: %v", ErrCommand, err)}
	}
	res.Verify = verifyResult(c.ShardID, run)
	h.emitShardRun(run)
	return err
}

func verifyResult(shardID string, run ShardRun) *VerifyResult {
	return &VerifyResult{ShardID: shardID, Waiting: run.Waiting, Complete: run.Report.Complete, End: run.Report.End,
		Children: run.Children, WalkCounts: walkCounts(run.Report)}
}
