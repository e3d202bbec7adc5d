package devcli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/gapless-dev/gapless/events/fixtures"
)

func init() {
	register("generate-event", "print a Kinesis event whose records carry your payloads (local `sam local generate-event kinesis get-records`)", runGenerateEvent)
}

// maxRecordData is the largest data blob of one Kinesis record (1 MiB).
const maxRecordData = 1 << 20

// generateShard is the shard the generated records come from (SAM's sample event's).
const generateShard = fixtures.SAMShard

// sequenceEpoch makes generated sequence numbers grow with the time they are generated:
// record i of an event generated at t gets fixtures.Seq(ms since sequenceEpoch + i).
var sequenceEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func runGenerateEvent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gapless-dev generate-event", flag.ContinueOnError)
	stream := fs.String("stream", "", "the stream the records come from, in their eventSourceARN (default $STREAM_NAME, set by . .local/stack.env, else "+fixtures.Stream+")")
	pk := fs.String("partition-key", fixtures.SAMPartitionKey, "every record's partition key")
	count := fs.Int("count", 0, "number of records, using the payload lines in turn (default one per line; 1 without a payload file)")
	setHelp(fs, "generate-event kinesis [flags] [payload-file|-]",
		"Prints on stdout a Kinesis event shaped like `sam local generate-event kinesis get-records`,\n"+
			"for `gapless-dev invoke <LogicalId> -e <file>`: each line of the payload file (or of stdin\n"+
			"for - ) is one record's data, base64-encoded in the event. Without a payload file the\n"+
			"records carry SAM's sample data. The records come from "+generateShard+" of the stream\n"+
			"arn:aws:kinesis:<$AWS_REGION or us-east-1>:"+fixtures.Account+":stream/<--stream>, with\n"+
			"increasing sequence numbers that start from the current time (an event generated later\n"+
			"is not a redelivery of an earlier one) and approximateArrivalTimestamp now. A consumer\n"+
			"refuses records of another stream than its STREAM_NAME: --stream must be that name.\n"+
			"\n"+
			"  gapless-dev generate-event kinesis --stream orders payloads.jsonl > event.json\n"+
			"  echo '{\"id\":\"a-1\"}' | gapless-dev generate-event kinesis --stream orders - > event.json")
	if len(args) == 0 || args[0] != "kinesis" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return parseFlags(fs, args, stdout)
		}
		what := "nothing"
		if len(args) > 0 {
			what = strconv.Quote(args[0])
		}
		return usagef("generate-event: want kinesis as the event source, got %s", what)
	}
	if err := parseArgs(fs, args[1:], stdout); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("unexpected argument %q: one payload file at most", fs.Arg(1))
	}
	if *count < 0 || (*count == 0 && isFlagSet(fs, "count")) {
		return usagef("--count %d: want 1 or more records", *count)
	}
	if *pk == "" || len(*pk) > 256 {
		return usagef("--partition-key: want 1 to 256 characters, got %d", len(*pk))
	}
	if *stream == "" {
		*stream = os.Getenv("STREAM_NAME")
	}
	if *stream == "" {
		*stream = fixtures.Stream
	}
	payloads := [][]byte{[]byte(fixtures.SAMData)}
	if fs.NArg() == 1 {
		var err error
		if payloads, err = readPayloads(fs.Arg(0)); err != nil {
			return err
		}
	}
	n := *count
	if n == 0 {
		n = len(payloads)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = fixtures.Region
	}
	now := time.Now()
	first := int(now.Sub(sequenceEpoch).Milliseconds())
	rs := make([]fixtures.Record, n)
	for i := range rs {
		rs[i] = fixtures.Record{PartitionKey: *pk, SequenceNumber: fixtures.Seq(first + i), Data: payloads[i%len(payloads)], Arrival: now}
	}
	b, err := fixtures.KinesisEvent(fixtures.Source{
		StreamARN: "arn:aws:kinesis:" + region + ":" + fixtures.Account + ":stream/" + *stream,
		Shard:     generateShard,
		Region:    region,
		RoleARN:   fixtures.RoleARN,
	}, rs)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

// readPayloads reads one record's data per line of file ("-": stdin).
func readPayloads(file string) ([][]byte, error) {
	var r io.Reader = os.Stdin
	name := "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("payload file: %w", err)
		}
		defer f.Close()
		r, name = f, file
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxRecordData+1)
	var out [][]byte
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(b) == 0 {
			return nil, fmt.Errorf("%s line %d is empty: each line is one record's data", name, line)
		}
		out = append(out, bytes.Clone(b))
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s line %d is longer than a Kinesis record's 1 MiB of data", name, len(out)+1)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no lines: each line is one record's data", name)
	}
	return out, nil
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
