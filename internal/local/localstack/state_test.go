package localstack

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvNamesS3OnTheSQSEmulator: fauxqs and moto_server serve S3 on their SQS port, so the
// payload bucket is reachable wherever SQS is.
func TestEnvNamesS3OnTheSQSEmulator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs []*Process
		want  string
	}{
		{"fauxqs", []*Process{{Service: Kinesis, Endpoint: "http://k"}, {Service: DynamoDB, Endpoint: "http://d"}, {Service: SQS, Endpoint: "http://f"}}, "http://f"},
		{"moto", []*Process{{Service: Kinesis, Endpoint: "http://k"}, {Service: Moto, Endpoint: "http://m"}}, "http://m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := Env(tc.procs)
			if env["AWS_ENDPOINT_URL_S3"] != tc.want || env["AWS_ENDPOINT_URL_SQS"] != tc.want {
				t.Errorf("S3 %q SQS %q, want both %q", env["AWS_ENDPOINT_URL_S3"], env["AWS_ENDPOINT_URL_SQS"], tc.want)
			}
		})
	}
}

// TestUnsetLeavesTheStackEnvironment: sourcing unset.env after stack.env leaves none of the
// variables stack.env exported (AWS_ENDPOINT_URL_* left behind would send a later `sam deploy`
// or aws command in that shell to 127.0.0.1), and it is still there once the stack is stopped.
func TestUnsetLeavesTheStackEnvironment(t *testing.T) {
	dir := t.TempDir()
	procs := []*Process{{Service: Kinesis, Endpoint: "http://127.0.0.1:1"}, {Service: DynamoDB, Endpoint: "http://127.0.0.1:2"}, {Service: SQS, Endpoint: "http://127.0.0.1:3"}}
	if err := WriteStateWith(dir, procs, map[string]string{"STREAM_NAME": "s", "GAPLESS_GROUP": "g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := StopFromState(dir); err != nil {
		t.Fatal(err)
	}
	rec := map[string]string{}
	for k, v := range Env(procs) {
		rec[k] = v
	}
	rec["STREAM_NAME"], rec["GAPLESS_GROUP"] = "s", "g"
	// stack.env is gone with the stack: source what it held, then unset.env.
	var exports strings.Builder
	for k, v := range rec {
		fmt.Fprintf(&exports, "export %s=%s\n", k, v)
	}
	script := exports.String() + ". " + filepath.Join(dir, UnsetFile) + "\nenv\n"
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for k := range rec {
		if strings.Contains(string(out), "\n"+k+"=") || strings.HasPrefix(string(out), k+"=") {
			t.Errorf("%s is still set after unset.env", k)
		}
	}
}
