package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/dedupe"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/reconcile"
	"github.com/gapless-dev/gapless/internal/schema"
	"github.com/gapless-dev/gapless/internal/wire"
)

func init() {
	commands["status"] = command{summary: "per shard: checkpoint, verified watermark, lag, gaps pending, parked", run: runStatus}
}

// opsOptions are the flags status, replay and redrive share. Defaults come from the functions'
// environment variables (internal/config), so a shell set up like the function needs no flags.
type opsOptions struct {
	group, stream, checkpointTable, dedupeTable string
	parkedQueue, targetQueue                    string
	payloadBucket                               string
	maxAttempts                                 int
	dedupeKey                                   string
	ledgerTTL                                   time.Duration
	state                                       string
	useAWS, useLocal                            bool
	jsonOut                                     bool
	// env: the defaults taken from the functions' variables; envErr: those of them the
	// functions would refuse (reported unless the flag that overrides each is given).
	env    config.Operator
	envErr error
}

// parse parses the flags of status, replay or redrive. A variable a default comes from that
// the functions would refuse is an error naming it, unless a flag overrides it: a shell set up
// like the function must not run with a value the function would never run with.
func (o *opsOptions) parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if o.envErr == nil {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	overrides := map[string]string{config.EnvMaxRecordAttempts: "max-attempts", config.EnvLedgerTTL: "ledger-ttl",
		config.EnvSettleAfter: "settle", config.EnvOnPark: "on-park"}
	var errs []string
	for _, e := range unwrapJoined(o.envErr) {
		flagName := ""
		for env, f := range overrides {
			if strings.Contains(e.Error(), env+"=") {
				flagName = f
			}
		}
		if flagName != "" && (set[flagName] || fs.Lookup(flagName) == nil) {
			continue // overridden, or a value this command does not use
		}
		errs = append(errs, strings.TrimPrefix(e.Error(), config.ErrInvalid.Error()+": ")+" (as the functions require; or set --"+flagName+")")
	}
	if len(errs) > 0 {
		return usagef("%s", strings.Join(errs, "; "))
	}
	return nil
}

// unwrapJoined returns the errors an errors.Join holds (err itself when it holds none).
func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// opsFlags declares the shared flags on a new FlagSet; queues adds the parked and target queue
// and the attempt budget (replay, redrive).
func opsFlags(name string, stderr io.Writer, queues bool) (*flag.FlagSet, *opsOptions) {
	o := &opsOptions{}
	o.env, o.envErr = config.LoadOperator(os.Getenv)
	fs := flag.NewFlagSet("gapless "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.group, "group", os.Getenv(config.EnvGroup), "consumer group (default $"+config.EnvGroup+")")
	fs.StringVar(&o.stream, "stream", os.Getenv(config.EnvStreamName), "stream name (default $"+config.EnvStreamName+")")
	fs.StringVar(&o.checkpointTable, "checkpoint-table", os.Getenv(config.EnvCheckpointTable), "checkpoint table (default $"+config.EnvCheckpointTable+")")
	fs.StringVar(&o.dedupeTable, "dedupe-table", os.Getenv(config.EnvDedupeTable), "ledger table (default $"+config.EnvDedupeTable+")")
	fs.StringVar(&o.parkedQueue, "parked-queue", os.Getenv(config.EnvParkedQueueURL), "parked queue URL (default $"+config.EnvParkedQueueURL+")")
	if queues {
		fs.StringVar(&o.targetQueue, "target-queue", os.Getenv(config.EnvTargetQueueURL), "target queue URL of the default Process (default $"+config.EnvTargetQueueURL+")")
		intFlag(fs, &o.maxAttempts, "max-attempts", o.env.MaxRecordAttempts, "failures before a record is parked (default $"+config.EnvMaxRecordAttempts+" or 5)", config.MaxRecordAttemptsRule)
		fs.StringVar(&o.payloadBucket, "payload-bucket", os.Getenv(config.EnvPayloadBucket), "S3 bucket for payloads over 1 MiB, parked or forwarded (default $"+config.EnvPayloadBucket+"; on the local stack "+schema.PayloadBucket+")")
		fs.StringVar(&o.dedupeKey, "dedupe-key", os.Getenv(config.EnvDedupeKey), "business-key JSON field, as the consumer's (default $"+config.EnvDedupeKey+", empty = off)")
		durationFlag(fs, &o.ledgerTTL, "ledger-ttl", o.env.LedgerTTL, "lifetime of the ledger entries a replay writes, as the functions' (default $"+config.EnvLedgerTTL+" or 192h)", config.LedgerTTLRule)
	}
	fs.StringVar(&o.state, "state", "", "local stack state directory holding stack.env (implies --local; default <repo>/.local, written by gapless up)")
	fs.BoolVar(&o.useLocal, "local", false, "use the local stack recorded in stack.env by gapless up (default: AWS, or AWS_ENDPOINT_URL_*)")
	fs.BoolVar(&o.useAWS, "aws", false, "use AWS (the default; AWS_ENDPOINT_URL_* honoured)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the result as JSON")
	return fs, o
}

// require fails naming the flag (and its variable) of every empty required value.
func (o *opsOptions) require(fs *flag.FlagSet, names ...string) error {
	vals := map[string]struct{ v, env string }{
		"group": {o.group, config.EnvGroup}, "stream": {o.stream, config.EnvStreamName},
		"checkpoint-table": {o.checkpointTable, config.EnvCheckpointTable}, "dedupe-table": {o.dedupeTable, config.EnvDedupeTable},
		"parked-queue": {o.parkedQueue, config.EnvParkedQueueURL}, "target-queue": {o.targetQueue, config.EnvTargetQueueURL},
	}
	var missing []string
	for _, n := range names {
		if strings.TrimSpace(vals[n].v) == "" {
			missing = append(missing, fmt.Sprintf("--%s (or $%s)", n, vals[n].env))
		}
	}
	if len(missing) > 0 {
		return usagef("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// opsClients are the SDK clients of one command.
type opsClients struct {
	kin   *kinesis.Client
	ddb   *dynamodb.Client
	sqs   *sqs.Client
	s3    *s3.Client // payload bucket: parked and forwarded payloads over 1 MiB
	local bool       // endpoints from a local stack.env
}

// loadClients points the SDK at AWS_ENDPOINT_URL_* when any is set (or --aws), else at the local
// stack recorded in stack.env by `gapless-dev up` when it exists, else at AWS.
// connect checks that the names a subcommand needs are set (require) and builds its clients.
func (o *opsOptions) connect(ctx context.Context, fs *flag.FlagSet, stderr io.Writer, names ...string) (opsClients, error) {
	if err := o.require(fs, names...); err != nil {
		return opsClients{}, err
	}
	return loadClients(ctx, o, stderr)
}

// writeJSON prints v indented: the --json output of status, replay and redrive.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// loadClients points the SDK at AWS (AWS_ENDPOINT_URL_* honoured, as every SDK does) unless
// --local or --state asks for the local stack recorded in stack.env by `gapless-dev up`: an
// operator command never reaches a local stack it was not told to, nor AWS when it was.
func loadClients(ctx context.Context, o *opsOptions, stderr io.Writer) (opsClients, error) {
	envSet := os.Getenv("AWS_ENDPOINT_URL_KINESIS") != "" || os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" || os.Getenv("AWS_ENDPOINT_URL_SQS") != ""
	if (o.useLocal || o.state != "") && o.useAWS {
		return opsClients{}, usagef("--local (or --state) and --aws: give one")
	}
	dir := o.state
	if dir == "" {
		if root, err := findRoot(); err == nil {
			dir = filepath.Join(root, ".local")
		}
	}
	stackFile := ""
	if dir != "" {
		stackFile = filepath.Join(dir, "stack.env")
	}
	if !o.useLocal && o.state == "" {
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return opsClients{}, fmt.Errorf("load AWS configuration: %w", err)
		}
		if !envSet {
			if stackFile != "" && fileExists(stackFile) {
				fmt.Fprintf(stderr, "using AWS; a local stack is recorded in %s: give --local to use it\n", relToWD(stackFile))
			}
			if err := checkCredentials(ctx, cfg); err != nil {
				return opsClients{}, err
			}
		}
		return opsClients{kin: kinesis.NewFromConfig(cfg), ddb: dynamodb.NewFromConfig(cfg), sqs: sqs.NewFromConfig(cfg), s3: wire.NewS3(cfg, os.Getenv)}, nil
	}
	if stackFile == "" || !fileExists(stackFile) {
		return opsClients{}, fmt.Errorf("no local stack recorded (no %s): start one with `make up` (or `gapless-dev up`)", cmp.Or(stackFile, ".local/stack.env"))
	}
	env, err := readStackEnv(stackFile)
	if err != nil {
		return opsClients{}, err
	}
	if env["AWS_ENDPOINT_URL_KINESIS"] == "" {
		return opsClients{}, fmt.Errorf("%s names no Kinesis endpoint", stackFile)
	}
	fmt.Fprintf(stderr, "using the local stack in %s\n", stackFile)
	s3Endpoint := env["AWS_ENDPOINT_URL_S3"]
	if s3Endpoint == "" {
		s3Endpoint = env["AWS_ENDPOINT_URL_SQS"] // fauxqs and moto serve S3 on the SQS port
	}
	region := env["AWS_REGION"]
	if region == "" {
		region = "us-east-1"
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: env["AWS_SECRET_ACCESS_KEY"], Source: "stack.env"}, nil
	})
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region), awsconfig.WithCredentialsProvider(creds))
	if err != nil {
		return opsClients{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	return opsClients{
		kin: kinesis.NewFromConfig(cfg, func(k *kinesis.Options) { k.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_KINESIS"]) }),
		ddb: dynamodb.NewFromConfig(cfg, func(d *dynamodb.Options) { d.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_DYNAMODB"]) }),
		sqs: sqs.NewFromConfig(cfg, func(s *sqs.Options) { s.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_SQS"]) }),
		s3: s3.NewFromConfig(cfg, func(o *s3.Options) {
			o.BaseEndpoint, o.UsePathStyle, o.DisableLogOutputChecksumValidationSkipped = aws.String(s3Endpoint), true, true
		}),
		local: true,
	}, nil
}

// queueURL returns u, or on a local stack the URL the stack gives the queue named like u's last
// path element (env.json's URLs assume the default port).
func (c opsClients) queueURL(ctx context.Context, u string) (string, error) {
	if !c.local || u == "" {
		return u, nil
	}
	out, err := c.sqs.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(path.Base(u))})
	if err != nil {
		return "", fmt.Errorf("queue %s on the local stack: %w", path.Base(u), err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// cliLogger logs warnings and errors of the libraries as text on stderr.
func cliLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// newLedger is the ledger as the functions build it: entries written by the CLI live as long as
// theirs (LEDGER_TTL), so the reconciler does not replay them again after a shorter expiry.
func (o *opsOptions) newLedger(c opsClients, log *slog.Logger) pipeline.DedupeLedger {
	opts := []dedupe.Option{dedupe.WithLogger(log)}
	if o.ledgerTTL > 0 {
		opts = append(opts, dedupe.WithTTL(o.ledgerTTL))
	}
	return pipeline.DedupeLedger{L: dedupe.New(c.ddb, o.dedupeTable, opts...)}
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := opsFlags("status", stderr, false)
	settle, maxRecords := new(time.Duration), new(int)
	durationFlag(fs, settle, "settle", o.env.SettleAfter, "settle window: missing records younger than this are in flight, not gaps; 0 counts every missing record as a gap (default $"+config.EnvSettleAfter+" or 30m)", notNegative)
	intFlag(fs, maxRecords, "max-records", 100000, "records read per shard at most (the lag beyond is shown as >=N)", atLeast(1))
	recordFilter := filterFlag(fs)
	onPark := fs.String("on-park", o.env.OnPark,
		"the functions' ON_PARK: with hold-key, list the held keys (default $"+config.EnvOnPark+" or continue)")
	maxHoldScan := fs.Int("max-hold-scan", 1000000, "ledger items read at most to list the held keys (a Scan of the ledger table; 0 = no limit)")
	setHelp(fs, "status [flags]",
		"Per shard of the stream: the checkpoint, the verified watermark, the lag, and the records\n"+
			"between them that the ledger lacks (gaps), are in flight or parked; and the parked queue's\n"+
			"depth. Reads the stream after each shard's verified watermark up to its checkpoint and looks\n"+
			"those records up in the ledger. With --on-park hold-key (or ON_PARK=hold-key), also the held\n"+
			"keys, from a Scan of the ledger table (--max-hold-scan bounds it). Read-only. With\n"+
			"`. .local/stack.env` (after `make up`) every name comes from the environment and no flag is\n"+
			"needed.")
	if err := o.parse(fs, args, stdout); err != nil {
		return err
	}
	flt, err := recordFilter()
	if err != nil {
		return err
	}
	if *onPark != config.OnParkContinue && *onPark != config.OnParkHoldKey {
		return usagef("--on-park %q: must be %s or %s", *onPark, config.OnParkContinue, config.OnParkHoldKey)
	}
	if *maxHoldScan < 0 {
		return usagef("--max-hold-scan %d: must be 0 or more", *maxHoldScan)
	}
	c, err := o.connect(ctx, fs, stderr, "group", "stream", "checkpoint-table", "dedupe-table")
	if err != nil {
		return err
	}
	if err := checkNames(ctx, c, o); err != nil {
		return err
	}
	ledger := o.newLedger(c, cliLogger(stderr))
	st, err := reconcile.Status(ctx, c.kin, checkpoint.New(c.ddb, o.checkpointTable), ledger,
		reconcile.StatusConfig{Group: o.group, Stream: o.stream, SettleAfter: *settle, MaxRecords: *maxRecords, Filter: flt})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(st.Shards, func(s reconcile.ShardStatus) bool { return s.Checkpoint != "" || s.Watermark != "" }) {
		if err := checkGroup(ctx, c, o, stderr); err != nil {
			return err
		}
	}
	out := statusOutput{StreamStatus: st}
	if o.parkedQueue != "" {
		n, err := queueDepth(ctx, c, o.parkedQueue)
		if err != nil {
			fmt.Fprintf(stderr, "parked queue depth unavailable: %v\n", queueError(err, o.parkedQueue))
		} else {
			out.ParkedQueueMessages = &n
		}
	}
	if *onPark == config.OnParkHoldKey {
		l, err := dedupe.ListHolds(ctx, c.ddb, o.dedupeTable, o.group, *maxHoldScan)
		if err != nil {
			fmt.Fprintf(stderr, "held keys unavailable: %s\n", printable(err.Error(), false))
		} else {
			out.Holds = holdsOf(l)
		}
	}
	if o.jsonOut {
		return writeJSON(stdout, out)
	}
	printStatus(stdout, out)
	var errs []error
	for _, s := range st.Shards {
		if s.Error != "" {
			errs = append(errs, fmt.Errorf("shard %s: %s", s.ShardID, s.Error))
		}
	}
	return errors.Join(errs...)
}

// statusOutput is what `gapless status --json` prints.
type statusOutput struct {
	reconcile.StreamStatus
	// ParkedQueueMessages is the parked queue's approximate depth (visible + in flight), when
	// the queue is known.
	ParkedQueueMessages *int `json:"parked_queue_messages,omitempty"`
	// Holds are the group's held keys (ON_PARK=hold-key only).
	Holds *holdsOutput `json:"holds,omitempty"`
}

// holdsOutput is the held keys of the group, as a Scan of the ledger table found them.
type holdsOutput struct {
	HeldKeys int `json:"held_keys"`
	// Complete is false when the scan stopped at --max-hold-scan: HeldKeys is then a lower bound.
	Complete bool `json:"complete"`
	// LedgerItemsScanned is what the Scan read (and was billed for).
	LedgerItemsScanned int             `json:"ledger_items_scanned"`
	Keys               []heldKeyOutput `json:"keys"`
}

// heldKeyOutput is one held partition key.
type heldKeyOutput struct {
	// Key is the partition key, or "sha256:<hex>" (Hashed) for a key stored hashed.
	Key    string `json:"key"`
	Hashed bool   `json:"hashed,omitempty"`
	// Head is the record parked first, which holds the key.
	Head string `json:"head"`
	// Held counts the records parked on the key, head included; Applied how many of them a
	// redrive applied in order.
	Held    int `json:"held"`
	Applied int `json:"applied"`
}

func holdsOf(l dedupe.HoldListing) *holdsOutput {
	out := &holdsOutput{HeldKeys: len(l.Holds), Complete: l.Complete, LedgerItemsScanned: l.Scanned, Keys: []heldKeyOutput{}}
	for _, h := range l.Holds {
		out.Keys = append(out.Keys, heldKeyOutput{Key: h.Key, Hashed: h.Hashed, Head: h.Head.String(), Held: len(h.Held), Applied: h.Applied})
	}
	slices.SortFunc(out.Keys, func(a, b heldKeyOutput) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func queueDepth(ctx context.Context, c opsClients, u string) (int, error) {
	u, err := c.queueURL(ctx, u)
	if err != nil {
		return 0, err
	}
	out, err := c.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(a)])
		if err != nil {
			return 0, fmt.Errorf("%s = %q", a, out.Attributes[string(a)])
		}
		n += v
	}
	return n, nil
}

func printStatus(w io.Writer, out statusOutput) {
	st := out.StreamStatus
	fmt.Fprintf(w, "group %s  stream %s  at %s\n\n", st.Group, st.Stream, st.At.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSTATE\tCHECKPOINT\tWATERMARK\tLAG_RECORDS\tLAG_SECONDS\tGAPS\tIN_FLIGHT\tPARKED\tLOST\tMARKERS_LIVE\tMARKERS_DEAD\t")
	for _, s := range st.Shards {
		lag := strconv.Itoa(s.LagRecords)
		if s.LagCapped {
			lag = ">=" + lag
		}
		wm := dash(s.Watermark)
		if s.Trimmed {
			wm += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.ShardID, s.State, dash(s.Checkpoint), wm, lag,
			s.LagSeconds, s.Gaps, s.InFlight, s.Parked, s.LostToRetention, s.MarkersLive, s.MarkersDead)
	}
	tw.Flush()
	if out.ParkedQueueMessages != nil {
		fmt.Fprintf(w, "\nparked queue: %d messages (redrive with `gapless redrive`)\n", *out.ParkedQueueMessages)
	}
	if h := out.Holds; h != nil {
		n := strconv.Itoa(h.HeldKeys)
		if !h.Complete {
			n = ">=" + n + " (the scan stopped after " + strconv.Itoa(h.LedgerItemsScanned) + " ledger items: --max-hold-scan)"
		}
		fmt.Fprintf(w, "\nHELD_KEYS %s (ON_PARK=hold-key; keys and heads with --json; `gapless redrive` applies them in order and releases them)\n", n)
	}
	for _, s := range st.Shards {
		if s.Error != "" {
			fmt.Fprintf(w, "shard %s: %s\n", s.ShardID, printable(s.Error, false))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkCredentials resolves the SDK's credentials before any call, bounded in time, so a shell
// without credentials gets what to do instead of a raw error of the instance metadata service
// after its retries.
func checkCredentials(ctx context.Context, cfg aws.Config) error {
	if cfg.Credentials == nil {
		return errNoCredentials
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("%w (%v)", errNoCredentials, err)
	}
	return nil
}

var errNoCredentials = errors.New("no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), " +
	"or, for the local stack, run `make up` and give --local (or source .local/stack.env)")
