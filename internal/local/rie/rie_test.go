package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

var (
	bootstrap string // the testdata/fn Lambda, built once
	buildDir  string
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "rie-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		buildDir = dir
		defer os.RemoveAll(dir)
		bootstrap = filepath.Join(dir, "bootstrap")
		if err := Build(context.Background(), "", "./testdata/fn", bootstrap); err != nil {
			fmt.Fprintf(os.Stderr, "build testdata/fn: %v\n", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func startFn(t *testing.T, timeout time.Duration, env map[string]string) (*Instance, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logs := &syncBuffer{}
	inst, err := Start(ctx, Options{Bootstrap: bootstrap, Timeout: timeout, Env: env, LogWriter: logs})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst, logs
}

func invoke(t *testing.T, inst *Instance, payload string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return inst.Invoke(ctx, []byte(payload))
}

func TestInvokeOutcomes(t *testing.T) {
	inst, logs := startFn(t, 2*time.Second, map[string]string{"GREETING": "hello from env"})
	if !strings.HasPrefix(inst.Addr(), "127.0.0.1:") {
		t.Fatalf("emulator address %s is not loopback", inst.Addr())
	}
	if inst.Timeout() != 2*time.Second {
		t.Fatalf("Timeout() = %s, want 2s", inst.Timeout())
	}
	tests := []struct {
		name     string
		payload  string
		want     string // response when no error
		wantType string // FunctionError.Type when a function error is expected
		wantMsg  string
		// wantMsgHas: the message contains it (the emulator puts its request id in front).
		wantMsgHas string
	}{
		{name: "echo", payload: `{"a":1}`, want: `{"a":1}`},
		{name: "handler error", payload: `{"mode":"error"}`, wantType: "errorString", wantMsg: "boom"},
		{name: "echo after error", payload: `{"a":2}`, want: `{"a":2}`},
		{name: "panic", payload: `{"mode":"panic"}`, wantType: "string", wantMsg: "kaboom"},
		{name: "echo after panic (runtime restarted)", payload: `{"a":3}`, want: `{"a":3}`},
		{name: "exit mid-invocation", payload: `{"mode":"exit"}`, wantType: "Runtime.ExitError", wantMsgHas: "Runtime exited with error: exit status 3"},
		{name: "echo after exit (runtime restarted)", payload: `{"a":5}`, want: `{"a":5}`},
		{name: "exit again (the restarted runtime dies too)", payload: `{"mode":"exit"}`, wantType: "Runtime.ExitError", wantMsgHas: "Runtime exited with error: exit status 3"},
		{name: "SIGKILL mid-invocation", payload: `{"mode":"kill"}`, wantType: "Runtime.ExitError", wantMsgHas: "Runtime exited with error: signal: killed"},
		{name: "echo after SIGKILL (runtime restarted)", payload: `{"a":6}`, want: `{"a":6}`},
		{name: "timeout", payload: `{"mode":"sleep","sleepMs":4500}`, wantType: TimeoutErrorType, wantMsg: "Task timed out after 2.00 seconds"},
		{name: "echo after timeout", payload: `{"a":4}`, want: `{"a":4}`},
		{name: "environment reaches the function", payload: `{"mode":"env","env":"GREETING"}`, want: `"hello from env"`},
		{name: "function timeout from Options", payload: `{"mode":"env","env":"AWS_LAMBDA_FUNCTION_TIMEOUT"}`, want: `"2"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := invoke(t, inst, tc.payload)
			if tc.wantType == "" {
				if err != nil {
					t.Fatalf("Invoke: %v\nlogs:\n%s", err, logs.String())
				}
				if string(got) != tc.want {
					t.Fatalf("response %s, want %s", got, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrFunction) || errors.Is(err, ErrRuntime) {
				t.Fatalf("err = %v (response %s), want a function error", err, got)
			}
			var fe *FunctionError
			if !errors.As(err, &fe) {
				t.Fatalf("err %T is not a *FunctionError", err)
			}
			if tc.wantMsgHas != "" {
				if fe.Type != tc.wantType || !strings.Contains(fe.Message, tc.wantMsgHas) {
					t.Fatalf("function error %q %q, want %q containing %q", fe.Type, fe.Message, tc.wantType, tc.wantMsgHas)
				}
				return
			}
			if fe.Type != tc.wantType || fe.Message != tc.wantMsg {
				t.Fatalf("function error %q %q, want %q %q", fe.Type, fe.Message, tc.wantType, tc.wantMsg)
			}
		})
	}
}

// The emulator panics when two invocations overlap; Invoke must make that impossible even when
// many goroutines call it at once.
func TestConcurrentInvokesAreSerialized(t *testing.T) {
	inst, logs := startFn(t, 3*time.Second, nil)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]string, n)
	for k := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := inst.Invoke(ctx, fmt.Appendf(nil, `{"mode":"sleep","sleepMs":50,"n":%d}`, k))
			errs[k], got[k] = err, string(b)
		})
	}
	wg.Wait()
	for k := range n {
		if errs[k] != nil {
			t.Fatalf("invoke %d: %v\nlogs:\n%s", k, errs[k], logs.String())
		}
		if want := fmt.Sprintf(`{"mode":"sleep","sleepMs":50,"n":%d}`, k); got[k] != want {
			t.Fatalf("invoke %d answered %s, want %s", k, got[k], want)
		}
	}
	if strings.Contains(logs.String(), "panic") {
		t.Fatalf("emulator panicked:\n%s", logs.String())
	}
}

// A caller that gives up early must not let the next invocation overlap the one still running.
func TestAbandonedInvokeDoesNotOverlapNext(t *testing.T) {
	inst, logs := startFn(t, 3*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := inst.Invoke(ctx, []byte(`{"mode":"sleep","sleepMs":700}`))
	cancel()
	if !errors.Is(err, ErrRuntime) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrRuntime wrapping DeadlineExceeded", err)
	}
	got, err := invoke(t, inst, `{"after":"abandoned"}`)
	if err != nil {
		t.Fatalf("next invoke: %v\nlogs:\n%s", err, logs.String())
	}
	if string(got) != `{"after":"abandoned"}` {
		t.Fatalf("next invoke answered %s", got)
	}
}

func TestCloseStopsEmulatorAndFunction(t *testing.T) {
	inst, _ := startFn(t, 3*time.Second, nil)
	b, err := invoke(t, inst, `{"mode":"pid"}`)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var fnPID int
	if err := json.Unmarshal(b, &fnPID); err != nil || fnPID <= 0 {
		t.Fatalf("pid response %s: %v", b, err)
	}
	riePID := inst.cmd.Process.Pid
	if err := inst.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range []int{riePID, fnPID} {
		if !waitGone(pid, 5*time.Second) {
			t.Fatalf("process %d still running after Close", pid)
		}
	}
	if _, err := invoke(t, inst, `{}`); !errors.Is(err, ErrRuntime) {
		t.Fatalf("invoke after Close: %v, want ErrRuntime", err)
	}
	if err := inst.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// waitGone reports whether pid has exited (or is a zombie awaiting its reaper) within d.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// Field 3 is the state; Z = zombie (dead, not yet reaped by its parent).
			if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func TestStartRejectsMissingBootstrap(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Options{}); err == nil {
		t.Fatal("Start without Bootstrap succeeded")
	}
	if _, err := Start(ctx, Options{Bootstrap: filepath.Join(buildDir, "nope")}); err == nil {
		t.Fatal("Start with a missing bootstrap succeeded")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		wantErr  error
		wantType string
	}{
		{"success object", 200, `{"batchItemFailures":[]}`, nil, ""},
		{"success null", 200, `null`, nil, ""},
		{"success empty", 200, ``, nil, ""},
		{"success with extra keys next to errorType", 200, `{"errorType":"x","errorMessage":"y","other":1}`, nil, ""},
		{"handler error", 200, `{"errorMessage":"boom","errorType":"errorString"}`, ErrFunction, "errorString"},
		{"handler error with stack", 200, `{"errorMessage":"m","errorType":"t","stackTrace":[]}`, ErrFunction, "t"},
		{"timeout", 200, `Task timed out after 3.00 seconds`, ErrFunction, TimeoutErrorType},
		{"crash", 502, `{"errorMessage":"exit status 2","errorType":"Runtime.ExitError"}`, ErrFunction, "Runtime.ExitError"},
		{"emulator busy", 400, ``, ErrRuntime, ""},
		{"emulator 504", 504, ``, ErrRuntime, ""},
		{"emulator 500 text", 500, `oops`, ErrRuntime, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := classify(tc.status, []byte(tc.body))
			if tc.wantErr == nil {
				if err != nil || !bytes.Equal(got, []byte(tc.body)) {
					t.Fatalf("classify = %q, %v; want the body and no error", got, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("classify err = %v, want %v", err, tc.wantErr)
			}
			var fe *FunctionError
			if tc.wantType != "" && (!errors.As(err, &fe) || fe.Type != tc.wantType) {
				t.Fatalf("classify err = %v, want type %s", err, tc.wantType)
			}
		})
	}
}

// go.mod pins the emulator with a tool directive; Binary builds Version: they must agree.
func TestGoModPinsVersion(t *testing.T) {
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), Module+" "+Version) {
		t.Fatalf("go.mod does not require %s %s", Module, Version)
	}
	if !strings.Contains(string(mod), "tool "+pkg) && !strings.Contains(string(mod), "\t"+pkg+"\n") {
		t.Fatalf("go.mod has no tool directive for %s", pkg)
	}
}

type syncBuffer = syncbuf.Buffer
