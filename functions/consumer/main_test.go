package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/config"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// setup builds the handler the way main does (its fault options, then the public package) with
// the environment getenv and the output out.
func setup(ctx context.Context, getenv func(string) string, out io.Writer) (*gapless.Consumer, error) {
	faults, err := faultOptions(getenv)
	if err != nil {
		return nil, err
	}
	return gapless.NewConsumer(ctx, nil, append(faults, gapless.WithGetenv(getenv), gapless.WithOutput(out))...)
}

func fullEnv() map[string]string {
	return map[string]string{
		config.EnvGroup: "g", config.EnvCheckpointTable: "cp", config.EnvDedupeTable: "ledger",
		config.EnvParkedQueueURL: "http://127.0.0.1:1/q/parked", config.EnvTargetQueueURL: "http://127.0.0.1:1/q/target",
		config.EnvPayloadBucket: "payloads",
	}
}

func TestSetup(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	if _, err := setup(context.Background(), env(fullEnv()), &bytes.Buffer{}); err != nil {
		t.Fatalf("complete configuration: %v", err)
	}
	held := fullEnv()
	held[config.EnvOnPark] = config.OnParkHoldKey
	if _, err := setup(context.Background(), env(held), &bytes.Buffer{}); err != nil {
		t.Fatalf("ON_PARK=hold-key: %v", err)
	}
	for _, tc := range []struct{ name, key, value string }{
		{"missing group", config.EnvGroup, ""},
		{"bad attempts", config.EnvMaxRecordAttempts, "zero"},
		{"bad dedupe key", config.EnvDedupeKey, "a..b"},
		{"unknown on-park mode", config.EnvOnPark, "hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := fullEnv()
			e[tc.key] = tc.value
			_, err := setup(context.Background(), env(e), &bytes.Buffer{})
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("err = %v, want an ErrInvalid naming %s", err, tc.key)
			}
		})
	}
}

// runMainEnv, set in a test binary's environment, makes that binary run the function's main
// instead of its tests: the cold-start test starts the function as Lambda would without a
// second build of the whole module.
const runMainEnv = "GAPLESS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestColdStartFailsNamingTheVariable starts the function's main in a process of its own with an
// empty environment: it must exit non-zero at once and name what is missing.
func TestColdStartFailsNamingTheVariable(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), runMainEnv + "=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("exit: %v, want a non-zero exit", err)
	}
	for _, name := range config.ConsumerRequired {
		if !strings.Contains(stderr.String(), name) {
			t.Errorf("stderr does not name %s: %s", name, stderr.String())
		}
	}
}
