package localstack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/schema"
)

// StreamShards is the shard count of a stream the local stack creates for the functions. The
// fixtures in events/ come from shardId-000000000006 (and one malformed record names
// shardId-000000000007), so with 8 shards every shard a fixture names exists on the local
// stream and `gapless status` shows the checkpoint an invoke wrote against a real shard.
const StreamShards = 8

// Resources are the stream, tables and queues the functions' variables name. The definitions
// (keys, TTL, queue retention) come from internal/schema, the one place that defines them.
type Resources struct {
	Group           string // GAPLESS_GROUP: not a resource, but exported with them (Ready.Vars)
	Stream          string // STREAM_NAME; "" for none
	CheckpointTable string // CHECKPOINT_TABLE
	LedgerTable     string // DEDUPE_TABLE
	ParkedQueue     string // the queue named by the last path element of PARKED_QUEUE_URL
	TargetQueue     string // ... of TARGET_QUEUE_URL
	PayloadBucket   string // PAYLOAD_BUCKET: payloads over SQS's limit (served by the SQS emulator)

	// What a service's template declares beyond gapless's own resources, with its definitions.
	Streams []StreamDef
	Tables  []schema.Table
	Queues  []schema.Queue
	Buckets []string
}

// StreamDef is a Kinesis stream to create: its name and shard count.
type StreamDef struct {
	Name   string
	Shards int32
}

// Names are the names of every resource in r, gapless's and the declared ones.
func (r Resources) Names() []string {
	var out []string
	for _, n := range []string{r.Stream, r.CheckpointTable, r.LedgerTable, r.ParkedQueue, r.TargetQueue, r.PayloadBucket} {
		if n != "" {
			out = append(out, n)
		}
	}
	for _, s := range r.Streams {
		out = append(out, s.Name)
	}
	for _, t := range r.Tables {
		out = append(out, t.Name)
	}
	for _, q := range r.Queues {
		out = append(out, q.Name)
	}
	return append(out, r.Buckets...)
}

// ResourcesFromEnv reads the names from one or more sets of function variables (the sections
// of events/env.json); later sets fill what earlier ones leave empty.
func ResourcesFromEnv(envs ...map[string]string) Resources {
	var r Resources
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = strings.TrimSpace(v)
		}
	}
	for _, e := range envs {
		set(&r.Group, e[config.EnvGroup])
		set(&r.Stream, e[config.EnvStreamName])
		set(&r.CheckpointTable, e[config.EnvCheckpointTable])
		set(&r.LedgerTable, e[config.EnvDedupeTable])
		set(&r.ParkedQueue, queueName(e[config.EnvParkedQueueURL]))
		set(&r.TargetQueue, queueName(e[config.EnvTargetQueueURL]))
		set(&r.PayloadBucket, e[config.EnvPayloadBucket])
	}
	return r
}

func queueName(u string) string {
	if u = strings.TrimSpace(u); u == "" {
		return ""
	}
	return path.Base(u)
}

// ReadEnvFile reads a `sam local invoke --env-vars` file (events/env.json): one object of
// variables per function logical id.
func ReadEnvFile(file string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("localstack: env file: %w", err)
	}
	var all map[string]map[string]string
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("localstack: env file %s: %w", file, err)
	}
	return all, nil
}

// ResourcesFromEnvFile is ResourcesFromEnv over every section of an env-vars file, in the
// order of the function names.
func ResourcesFromEnvFile(file string) (Resources, error) {
	all, err := ReadEnvFile(file)
	if err != nil {
		return Resources{}, err
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	envs := make([]map[string]string, 0, len(all))
	for _, n := range names {
		envs = append(envs, all[n])
	}
	return ResourcesFromEnv(envs...), nil
}

// Ready is what Ensure found or created: the queue URLs as this stack spells them (fauxqs and
// moto_server each have their own form), and the stream's ARN.
type Ready struct {
	Resources
	ParkedQueueURL, TargetQueueURL string
	StreamARN                      string
	QueueURLs                      map[string]string // of the declared Queues, by name
}

// Vars are the functions' variables for the resources, as the stack names them: what
// `gapless up` writes into stack.env so that the CLI and the aws CLI find them like the
// functions do.
func (r Ready) Vars() map[string]string {
	v := map[string]string{}
	add := func(k, val string) {
		if val != "" {
			v[k] = val
		}
	}
	add(config.EnvGroup, r.Group)
	add(config.EnvStreamName, r.Stream)
	add(config.EnvCheckpointTable, r.CheckpointTable)
	add(config.EnvDedupeTable, r.LedgerTable)
	add(config.EnvParkedQueueURL, r.ParkedQueueURL)
	add(config.EnvTargetQueueURL, r.TargetQueueURL)
	add(config.EnvPayloadBucket, r.PayloadBucket)
	return v
}

// Ensure creates on the stack whose endpoints env holds (AWS_ENDPOINT_URL_*, as Env returns
// them) whatever of r does not exist yet, with internal/schema's definitions, and waits until
// it is usable. It is idempotent: existing tables, queues and streams are left as they are.
func Ensure(ctx context.Context, env map[string]string, r Resources) (Ready, error) {
	ready := Ready{Resources: r}
	region := env["AWS_REGION"]
	if region == "" {
		region = "us-east-1"
	}
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: orLocal(env["AWS_ACCESS_KEY_ID"]), SecretAccessKey: orLocal(env["AWS_SECRET_ACCESS_KEY"]), Source: "localstack"}, nil
	})
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region), awsconfig.WithCredentialsProvider(creds))
	if err != nil {
		return ready, fmt.Errorf("localstack: %w", err)
	}
	endpoint := func(v, what string) (string, error) {
		if env[v] == "" {
			return "", fmt.Errorf("localstack: %s needs %s, and the stack has none (%s is empty)", what, strings.TrimPrefix(v, "AWS_ENDPOINT_URL_"), v)
		}
		return env[v], nil
	}
	var tables []schema.Table
	if r.CheckpointTable != "" {
		tables = append(tables, schema.CheckpointTable(r.CheckpointTable))
	}
	if r.LedgerTable != "" {
		tables = append(tables, schema.LedgerTable(r.LedgerTable))
	}
	tables = append(tables, r.Tables...)
	if len(tables) > 0 {
		ep, err := endpoint("AWS_ENDPOINT_URL_DYNAMODB", "table "+tables[0].Name)
		if err != nil {
			return ready, err
		}
		ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
		if err := schema.EnsureTables(ctx, ddb, tables...); err != nil {
			return ready, err
		}
	}
	for _, q := range []struct {
		name string
		url  *string
		def  schema.Queue
	}{
		{r.ParkedQueue, &ready.ParkedQueueURL, schema.Queue{Name: r.ParkedQueue, RetentionSeconds: schema.ParkedRetentionSeconds}},
		{r.TargetQueue, &ready.TargetQueueURL, schema.Queue{Name: r.TargetQueue}},
	} {
		if q.name == "" {
			continue
		}
		ep, err := endpoint("AWS_ENDPOINT_URL_SQS", "queue "+q.name)
		if err != nil {
			return ready, err
		}
		q.def.FIFO = strings.HasSuffix(q.name, ".fifo")
		client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep) })
		if *q.url, err = schema.EnsureQueue(ctx, client, q.def); err != nil {
			return ready, err
		}
	}
	for _, q := range r.Queues {
		ep, err := endpoint("AWS_ENDPOINT_URL_SQS", "queue "+q.Name)
		if err != nil {
			return ready, err
		}
		client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(ep) })
		u, err := schema.EnsureQueue(ctx, client, q)
		if err != nil {
			return ready, err
		}
		if ready.QueueURLs == nil {
			ready.QueueURLs = map[string]string{}
		}
		ready.QueueURLs[q.Name] = u
	}
	var buckets []string
	if r.PayloadBucket != "" {
		buckets = append(buckets, r.PayloadBucket)
	}
	for _, b := range append(buckets, r.Buckets...) {
		ep := env["AWS_ENDPOINT_URL_S3"]
		if ep == "" { // fauxqs and moto_server serve S3 on their SQS port
			if ep, err = endpoint("AWS_ENDPOINT_URL_SQS", "bucket "+b); err != nil {
				return ready, err
			}
		}
		client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(ep), true })
		if err := schema.EnsureBucket(ctx, client, b); err != nil {
			return ready, err
		}
	}
	var streams []StreamDef
	if r.Stream != "" {
		streams = append(streams, StreamDef{Name: r.Stream, Shards: StreamShards})
	}
	for i, s := range append(streams, r.Streams...) {
		ep, err := endpoint("AWS_ENDPOINT_URL_KINESIS", "stream "+s.Name)
		if err != nil {
			return ready, err
		}
		kc := kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(ep) })
		arn, err := schema.EnsureStream(ctx, kc, s.Name, s.Shards)
		if err != nil {
			return ready, err
		}
		if i == 0 && r.Stream != "" {
			ready.StreamARN = arn
		}
	}
	return ready, nil
}

func orLocal(s string) string {
	if s == "" {
		return "local"
	}
	return s
}
