package samtemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const tmpl = `
Parameters:
  Group: {Type: String, Default: g}
  FnTimeout: {Type: Number, Default: 42}
Globals:
  Function:
    Timeout: 300
    CodeUri: src/
    Environment:
      Variables:
        LOG_LEVEL: info
        SHARED: from-globals
Resources:
  Orders:
    Type: AWS::Kinesis::Stream
    Properties: {ShardCount: 3}
  Out:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: out-table
      AttributeDefinitions: [{AttributeName: id, AttributeType: S}, {AttributeName: at, AttributeType: N}]
      KeySchema: [{AttributeName: id, KeyType: HASH}, {AttributeName: at, KeyType: RANGE}]
      TimeToLiveSpecification: {AttributeName: exp, Enabled: true}
  Jobs:
    Type: AWS::SQS::Queue
    Properties: {FifoQueue: true}
  Blobs:
    Type: AWS::S3::Bucket
  Writer:
    Type: AWS::Serverless::Function
    Metadata: {BuildMethod: makefile}
    Properties:
      CodeUri: .
      Timeout: !Ref FnTimeout
      Environment:
        Variables:
          SHARED: from-function
          GROUP: !Ref Group
          JOBS_URL: !Ref Jobs
          ORDERS_ARN: !GetAtt Orders.Arn
          NAME: !Sub "${Group}-x"
          STREAM: !If [Cond, !Ref Orders, other]
  Plain:
    Type: AWS::Serverless::Function
    Properties:
      Environment: {Variables: {A: "1"}}
`

func read(t *testing.T, text string) *Template {
	t.Helper()
	file := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	tp, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func TestFunctions(t *testing.T) {
	tp := read(t, tmpl)
	if got := strings.Join(tp.FunctionNames(), ","); got != "Plain,Writer" {
		t.Fatalf("functions %s", got)
	}
	for _, tc := range []struct {
		fn, codeDir, build string
		timeout            time.Duration
	}{
		{"Writer", tp.Dir, "makefile", 42 * time.Second},               // !Ref of a parameter's Default, over Globals
		{"Plain", filepath.Join(tp.Dir, "src"), "", 300 * time.Second}, // Globals' Timeout and CodeUri
	} {
		f := tp.Functions[tc.fn]
		if f.CodeDir != tc.codeDir || f.BuildMethod != tc.build || f.Timeout != tc.timeout {
			t.Errorf("%s: CodeDir %s BuildMethod %q Timeout %v, want %s %q %v", tc.fn, f.CodeDir, f.BuildMethod, f.Timeout, tc.codeDir, tc.build, tc.timeout)
		}
	}
}

func TestEnv(t *testing.T) {
	tp := read(t, tmpl)
	intrinsics := map[string]string{"GROUP": "g1", "JOBS_URL": "http://q/1/jobs.fifo", "ORDERS_ARN": "arn", "NAME": "n", "STREAM": "s"}
	withAll := map[string]string{"EXTRA": "passed"}
	for k, v := range intrinsics {
		withAll[k] = v
	}
	for _, tc := range []struct {
		name     string
		file     EnvFile
		fn       string
		want     map[string]string
		unsetErr []string // variables the error must name
	}{
		{name: "Globals merged, function overrides, literals only", fn: "Plain", file: EnvFile{},
			want: map[string]string{"LOG_LEVEL": "info", "SHARED": "from-globals", "A": "1"}},
		{name: "intrinsics without values", fn: "Writer", file: EnvFile{Path: "events/env.json", Sections: map[string]map[string]string{"Writer": {"GROUP": "g1"}}},
			unsetErr: []string{"JOBS_URL (!Ref)", "ORDERS_ARN (!GetAtt)", "NAME (!Sub)", "STREAM (!If)", `"Writer" section of events/env.json`}},
		{name: "no env file", fn: "Writer", file: EnvFile{},
			unsetErr: []string{"GROUP (!Ref)", "--env file.json) with a \"Writer\" section"}},
		{name: "section sets them, extra passed", fn: "Writer", file: EnvFile{Path: "e.json", Sections: map[string]map[string]string{"Writer": withAll}},
			want: map[string]string{"LOG_LEVEL": "info", "SHARED": "from-function", "EXTRA": "passed", "GROUP": "g1", "JOBS_URL": "http://q/1/jobs.fifo", "ORDERS_ARN": "arn", "NAME": "n", "STREAM": "s"}},
		{name: "Parameters section for all, function section wins", fn: "Writer", file: EnvFile{Path: "e.json", Sections: map[string]map[string]string{
			"Parameters": {"GROUP": "all", "JOBS_URL": "u", "ORDERS_ARN": "a", "NAME": "n", "STREAM": "s", "SHARED": "p"},
			"Writer":     {"GROUP": "mine"},
		}}, want: map[string]string{"LOG_LEVEL": "info", "SHARED": "p", "GROUP": "mine", "JOBS_URL": "u", "ORDERS_ARN": "a", "NAME": "n", "STREAM": "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tp.Functions[tc.fn].Env(tc.file)
			if tc.unsetErr != nil {
				if !errors.Is(err, ErrUnsetVariable) {
					t.Fatalf("err = %v, want ErrUnsetVariable", err)
				}
				for _, s := range tc.unsetErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Errorf("env %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestResources(t *testing.T) {
	tp := read(t, tmpl)
	env := EnvFile{Sections: map[string]map[string]string{"Writer": {"JOBS_URL": "http://127.0.0.1:1/000000000000/jobs-q.fifo", "STREAM": "orders-local"}}}
	want := map[string]struct {
		name   string
		shards int32
	}{
		"Orders": {"orders-local", 3}, // the env file's value of a variable that !Ref's it (in an !If)
		"Out":    {"out-table", 0},    // its literal TableName
		"Jobs":   {"jobs-q.fifo", 0},  // the last path element of a queue URL
		"Blobs":  {"blobs", 0},        // the logical id, lower-cased for S3
	}
	if len(tp.Resources) != len(want) {
		t.Fatalf("resources %+v", tp.Resources)
	}
	for _, r := range tp.Resources {
		w := want[r.LogicalID]
		if got := tp.ResourceName(r, env); got != w.name {
			t.Errorf("%s named %q, want %q", r.LogicalID, got, w.name)
		}
		if r.Kind == Stream && r.Shards != w.shards {
			t.Errorf("%s shards %d, want %d", r.LogicalID, r.Shards, w.shards)
		}
	}
	out := tp.Resources[1]
	if len(out.Keys) != 2 || out.Keys[1].Name != "at" || out.Keys[1].AttributeType != "N" || out.Keys[1].KeyType != "RANGE" || out.TTLAttribute != "exp" {
		t.Errorf("Out: keys %+v ttl %q", out.Keys, out.TTLAttribute)
	}
	// Without an env file: the logical id, with .fifo for a FIFO queue.
	if got := tp.ResourceName(tp.Resources[2], EnvFile{}); got != "Jobs.fifo" || !tp.Resources[2].FIFO {
		t.Errorf("Jobs without env: %q", got)
	}
}
