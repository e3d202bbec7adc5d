package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/gapless-dev/gapless/internal/checkpoint"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/doctor"
)

func init() {
	commands["doctor"] = command{summary: "check template.yaml (offline) or a deployed stack (--live) against what gapless needs", run: runDoctor}
}

// errFindings is returned when the report has error-level findings: exit status 1.
var errFindings = errors.New("error-level findings")

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := &opsOptions{}
	fs := flag.NewFlagSet("gapless doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	template := fs.String("template", "", "SAM template to check offline (default template.yaml in the current directory, else in the checkout)")
	samconfig := fs.String("samconfig", "", "samconfig.toml whose parameter_overrides apply (default the one next to the template; none if absent)")
	configEnv := fs.String("config-env", "default", "samconfig.toml environment, as sam deploy --config-env")
	overrides := fs.String("parameter-overrides", "", "more parameter values, as sam deploy --parameter-overrides (Key=Value ...)")
	retention := fs.Duration("retention", 0, "offline: retention of a stream the template does not create (StreamArn set); default 24h, Kinesis's default")
	kpl := fs.String("kpl", "", "do producers write KPL aggregated records? yes or no (unknown: a warning when ParallelizationFactor > 1)")
	live := fs.Bool("live", false, "check the deployed stack (or, with --local, the local stack and the emulated mapping) instead of the template")
	fs.StringVar(&o.group, "group", os.Getenv(config.EnvGroup), "--live: consumer group (default $"+config.EnvGroup+")")
	fs.StringVar(&o.stream, "stream", os.Getenv(config.EnvStreamName), "--live: stream name (default $"+config.EnvStreamName+")")
	streamARN := fs.String("stream-arn", os.Getenv(config.EnvStreamARN), "--live: stream ARN, for a stream in another account (default $"+config.EnvStreamARN+")")
	fs.StringVar(&o.checkpointTable, "checkpoint-table", os.Getenv(config.EnvCheckpointTable), "--live: checkpoint table (default $"+config.EnvCheckpointTable+")")
	fs.StringVar(&o.dedupeTable, "dedupe-table", os.Getenv(config.EnvDedupeTable), "--live: ledger table (default $"+config.EnvDedupeTable+")")
	consumerFn := fs.String("consumer-function", "", "--live on AWS: the consumer function (stack output ConsumerFunctionName)")
	reconcilerFn := fs.String("reconciler-function", "", "--live on AWS: the reconciler function (stack output ReconcilerFunctionName)")
	alarmPrefix := fs.String("alarm-prefix", "", "--live on AWS: list only alarms named with this prefix (the stack name and a dash, e.g. gapless-); the stack's alarms are those watching its functions or its group")
	fs.StringVar(&o.state, "state", "", "--live: local stack state directory holding stack.env (implies --local; default <repo>/.local, written by gapless up)")
	fs.BoolVar(&o.useLocal, "local", false, "--live: the local stack recorded in stack.env by gapless up (default: AWS, or AWS_ENDPOINT_URL_*)")
	fs.BoolVar(&o.useAWS, "aws", false, "--live: use AWS (the default; AWS_ENDPOINT_URL_* honoured)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	setHelp(fs, "doctor [flags]",
		"Checks a gapless deployment against what gapless needs and prints one line per finding:\n"+
			"its level (ERROR: records can be lost, blocked or left unverified; WARNING: not, but\n"+
			"something you rely on is missing), what is wrong, and how to fix it; then notes and a\n"+
			"summary. Exit status 1 when any finding is an error.\n\n"+
			"Offline (the default) it reads template.yaml with the parameter overrides of a\n"+
			"samconfig.toml environment. With --live it reads the deployed stack (read-only: the IAM\n"+
			"actions are listed in docs/deploy.md); with --local (or a sourced stack.env) it reads the local stack,\n"+
			"and the mapping, schedule and alarms are those of the emulated mapping (template.yaml).")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *kpl != "" && *kpl != "yes" && *kpl != "no" {
		return usagef("--kpl %q: want yes or no", *kpl)
	}
	tmplPath, err := findTemplate(*template)
	if err != nil {
		return err
	}
	var d doctor.Deployment
	if *live {
		if err := o.require(fs, "group", "stream", "checkpoint-table", "dedupe-table"); err != nil {
			return err
		}
		d, err = doctorLive(ctx, o, liveNames{streamARN: *streamARN, consumer: *consumerFn, reconciler: *reconcilerFn, alarmPrefix: *alarmPrefix, template: tmplPath, kpl: *kpl}, stderr)
		if err != nil {
			return err
		}
	} else {
		d, err = doctorOffline(tmplPath, *samconfig, *configEnv, *overrides, *retention)
		if err != nil {
			return err
		}
		d.KPLAggregation = *kpl
	}
	rep := doctor.Run(d)
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doctorJSON(rep)); err != nil {
			return err
		}
	} else if err := doctor.Write(stdout, rep); err != nil {
		return err
	}
	if rep.Errors() > 0 {
		return fmt.Errorf("%w: %d", errFindings, rep.Errors())
	}
	return nil
}

// findTemplate is path, or template.yaml in the current directory, else in the checkout.
func findTemplate(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if _, err := os.Stat("template.yaml"); err == nil {
		return "template.yaml", nil
	}
	root, err := findRoot()
	if err != nil {
		return "", usagef("no template.yaml here: give --template")
	}
	return filepath.Join(root, "template.yaml"), nil
}

func doctorOffline(tmplPath, samPath, env, overrides string, retention time.Duration) (doctor.Deployment, error) {
	t, err := doctor.LoadTemplate(tmplPath)
	if err != nil {
		return doctor.Deployment{}, err
	}
	source := tmplPath
	explicit := samPath != ""
	if !explicit {
		samPath = filepath.Join(filepath.Dir(tmplPath), "samconfig.toml")
	}
	if _, statErr := os.Stat(samPath); statErr == nil || explicit {
		sc, err := doctor.LoadSamconfig(samPath)
		if err != nil {
			return doctor.Deployment{}, err
		}
		over, err := sc.Overrides(env)
		if err != nil {
			return doctor.Deployment{}, err
		}
		if err := t.Override(over); err != nil {
			return doctor.Deployment{}, fmt.Errorf("%s [%s]: %w", samPath, env, err)
		}
		source += ", " + samPath + " [" + env + "]"
	}
	if overrides != "" {
		over, err := doctor.ParseOverrides(overrides)
		if err != nil {
			return doctor.Deployment{}, usagef("--parameter-overrides: %v", err)
		}
		if err := t.Override(over); err != nil {
			return doctor.Deployment{}, usagef("--parameter-overrides: %v", err)
		}
		source += ", --parameter-overrides"
	}
	return doctor.FromTemplate(t, source, retention), nil
}

type liveNames struct {
	streamARN, consumer, reconciler, alarmPrefix, template, kpl string
}

func doctorLive(ctx context.Context, o *opsOptions, n liveNames, stderr io.Writer) (doctor.Deployment, error) {
	c, err := loadClients(ctx, o, stderr)
	if err != nil {
		return doctor.Deployment{}, err
	}
	l := doctor.Live{
		Group: o.group, Stream: o.stream, StreamARN: n.streamARN, LedgerTable: o.dedupeTable,
		Streams: c.kin, TTL: c.ddb, Checkpoints: checkpoint.New(c.ddb, o.checkpointTable), KPLAggregation: n.kpl,
	}
	// The local stack: from stack.env, or endpoints in the environment (`. .local/stack.env`)
	// with no function named, since no emulator serves Lambda.
	if c.local || (os.Getenv("AWS_ENDPOINT_URL_KINESIS") != "" && n.consumer == "") {
		if Local == nil {
			return doctor.Deployment{}, usagef("--live on the local stack checks the emulated mapping: run %s-dev doctor --live (or name the deployed functions for AWS)", Program)
		}
		cp, err := Local.ControlPlane(n.template)
		if err != nil {
			return doctor.Deployment{}, err
		}
		l.Source, l.Control = "local stack "+o.stream+" (emulated mapping from "+n.template+")", cp
	} else {
		var missing []string
		if n.consumer == "" {
			missing = append(missing, "--consumer-function")
		}
		if n.reconciler == "" {
			missing = append(missing, "--reconciler-function")
		}
		if len(missing) > 0 {
			return doctor.Deployment{}, usagef("--live on AWS needs %s (stack outputs; see docs/deploy.md)", strings.Join(missing, ", "))
		}
		cfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return doctor.Deployment{}, fmt.Errorf("load AWS configuration: %w", err)
		}
		l.Source = "stack of " + n.consumer
		l.Control = &doctor.AWSControlPlane{
			Lambda: lambda.NewFromConfig(cfg), EventBridge: eventbridge.NewFromConfig(cfg), CloudWatch: cloudwatch.NewFromConfig(cfg),
			ConsumerFunction: n.consumer, ReconcilerFunction: n.reconciler, Group: o.group, AlarmPrefix: n.alarmPrefix,
		}
	}
	return doctor.Collect(ctx, l)
}

// doctorJSON is the report as printed by --json.
func doctorJSON(rep doctor.Report) any {
	type finding struct {
		ID      string `json:"id"`
		Level   string `json:"level"`
		Message string `json:"message"`
		Fix     string `json:"fix"`
	}
	out := struct {
		Source   string    `json:"source"`
		Findings []finding `json:"findings"`
		Notes    []string  `json:"notes"`
		Checks   int       `json:"checks"`
		Errors   int       `json:"errors"`
		Warnings int       `json:"warnings"`
	}{Source: rep.Source, Findings: []finding{}, Notes: rep.Notes, Checks: rep.Checked, Errors: rep.Errors(), Warnings: rep.Warnings()}
	for _, f := range rep.Findings {
		out.Findings = append(out.Findings, finding{f.ID, string(f.Level), f.Message, f.Fix})
	}
	return out
}
