// Package rie runs a Lambda bootstrap (a provided.al2023 custom-runtime binary) under the AWS
// Lambda Runtime Interface Emulator, the local equivalent of one Lambda execution environment.
//
// One Instance is one environment: it handles one invocation at a time, as Lambda does. The
// emulator itself panics when two invocations overlap, so Invoke serializes per Instance; run
// one Instance per concurrent lane. It is a development tool, not part of the deployed product.
//
// Emulator facts this package relies on (module
// github.com/aws/aws-lambda-runtime-interface-emulator, internal/lambda/rie, at Version):
//   - flags --runtime-interface-emulator-address (default 0.0.0.0:8080) and
//     --runtime-api-address (default 127.0.0.1:9001); both are set to free loopback ports so
//     several emulators can run side by side;
//   - the function timeout is AWS_LAMBDA_FUNCTION_TIMEOUT in whole seconds (default 300) and the
//     memory size AWS_LAMBDA_FUNCTION_MEMORY_SIZE; the emulator passes its own environment on to
//     the bootstrap;
//   - invocations are POSTed to /2015-03-31/functions/function/invocations;
//   - the emulator drops the X-Amz-Function-Error header: a handler error comes back as 200 with
//     an {"errorMessage","errorType"} body, a crash (panic, exit) as 502 with that body, and a
//     timeout as 200 with the text "Task timed out after N.00 seconds". Invoke tells these apart
//     from a successful response (see Invoke);
//   - a runtime process that dies in the middle of an invocation (os.Exit, SIGKILL, the Go
//     runtime aborting after a panic in a goroutine the handler started) is answered with 502
//     and {"errorType":"Runtime.ExitError","errorMessage":"RequestId: … Error: Runtime exited
//     with error: exit status N"} (or "signal: killed"); the emulator itself keeps running and
//     starts the bootstrap afresh (a cold start) on the next invocation, so an Instance outlives
//     any number of runtime deaths (TestInvokeOutcomes checks this for exit and SIGKILL);
//   - the runtime is started in its own process group and is SIGKILLed by the emulator when the
//     emulator receives SIGTERM.
package rie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
)

// Module and Version name the emulator build. Version must equal the version go.mod pins with
// its `tool` directive (a test checks this).
const (
	Module  = "github.com/aws/aws-lambda-runtime-interface-emulator"
	Version = "v0.0.0-20261030222936-bef5c4ba774d"
	pkg     = Module + "/cmd/aws-lambda-rie"
)

const invokePath = "/2015-03-31/functions/function/invocations"

// Sentinel errors; match with errors.Is.
var (
	// ErrFunction marks a function error: the handler returned an error, panicked, exited, or
	// ran past its timeout. The error is a *FunctionError carrying errorType and errorMessage.
	ErrFunction = errors.New("rie: function error")
	// ErrRuntime marks a failure of the emulator or of the transport to it (the function's
	// outcome is unknown).
	ErrRuntime = errors.New("rie: runtime error")
)

// FunctionError is the error of a failed invocation. errors.Is(err, ErrFunction) holds.
type FunctionError struct {
	Type       string // errorType, e.g. "errorString", "Runtime.ExitError", "Sandbox.Timedout"
	Message    string // errorMessage
	StatusCode int    // HTTP status the emulator answered with
	Body       []byte // the raw response body
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("rie: function error %s: %s", e.Type, e.Message)
}

// Unwrap makes errors.Is(err, ErrFunction) true.
func (e *FunctionError) Unwrap() error { return ErrFunction }

// TimeoutErrorType is the errorType Invoke reports for an invocation that ran past the
// function timeout (the name Lambda uses for timeouts).
const TimeoutErrorType = "Sandbox.Timedout"

var timedOut = regexp.MustCompile(`^Task timed out after [0-9]+(\.[0-9]+)? seconds$`)

// Binary returns the path of the emulator binary, building it on first use with `go build` of
// the version pinned in go.mod into <repo>/.local/bin. A file lock makes test binaries running
// in parallel build it once.
func Binary(ctx context.Context) (string, error) {
	root, err := localstack.FindRoot()
	if err != nil {
		return "", fmt.Errorf("rie: binary: %w", err)
	}
	dir := filepath.Join(root, ".local", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("rie: binary: %w", err)
	}
	bin := filepath.Join(dir, "aws-lambda-rie-"+Version)
	if isExecutable(bin) {
		return bin, nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".aws-lambda-rie.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("rie: binary: lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("rie: binary: lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway
	if isExecutable(bin) {
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("rie: binary: the go tool is needed to build the emulator: %w", err)
	}
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", tmp, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("rie: binary: go build %s: %w\n%s", pkg, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("rie: binary: %w", err)
	}
	return bin, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Options configure one emulated execution environment.
type Options struct {
	// Bootstrap is the path of the function's bootstrap executable. Required.
	Bootstrap string
	// Env is added to the bootstrap's environment (which otherwise inherits this process's).
	Env map[string]string
	// Timeout is the function timeout. The emulator counts whole seconds: it is rounded up, and
	// defaults to 3s (Lambda's default).
	Timeout time.Duration
	// Memory is the memory size in MB the function sees (default 128).
	Memory int
	// LogWriter receives the emulator's and the function's output (discarded when nil).
	LogWriter io.Writer
	// Binary is the emulator executable; empty means Binary(ctx).
	Binary string
	// ReadyTimeout bounds the wait for the emulator to listen (default 30s).
	ReadyTimeout time.Duration
}

// Instance is one running emulator with one function. Invoke may be called from several
// goroutines; invocations run one at a time.
type Instance struct {
	addr    string // host:port of the invoke endpoint
	timeout time.Duration
	client  *http.Client
	sem     chan struct{} // one invocation at a time: the emulator panics on overlap
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error

	closeOnce sync.Once
}

// Start launches the emulator with the bootstrap on free loopback ports and waits until it
// accepts connections. The function itself starts (cold start) on the first Invoke, as in Lambda.
func Start(ctx context.Context, opts Options) (*Instance, error) {
	if opts.Bootstrap == "" {
		return nil, errors.New("rie: start: Bootstrap is required")
	}
	boot, err := filepath.Abs(opts.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("rie: start: %w", err)
	}
	if !isExecutable(boot) {
		return nil, fmt.Errorf("rie: start: bootstrap %s is not an executable file", boot)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Memory <= 0 {
		opts.Memory = 128
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	if opts.Binary == "" {
		if opts.Binary, err = Binary(ctx); err != nil {
			return nil, err
		}
	}
	// A free port can be taken between choosing it and the emulator binding it: try again.
	var lastErr error
	for range 3 {
		inst, err := start(ctx, opts, boot)
		if err == nil {
			return inst, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, opts Options, boot string) (*Instance, error) {
	rieAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	secs := int(math.Ceil(opts.Timeout.Seconds()))
	cmd := exec.Command(opts.Binary,
		"--runtime-interface-emulator-address", rieAddr,
		"--runtime-api-address", apiAddr,
		boot)
	cmd.Dir = filepath.Dir(boot)
	env := make([]string, 0, len(os.Environ())+len(opts.Env)+2)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// AWS_LAMBDA_MAX_CONCURRENCY switches the emulator to its managed-instances mode.
		if k == "AWS_LAMBDA_MAX_CONCURRENCY" || k == "AWS_LAMBDA_FUNCTION_TIMEOUT" || k == "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" {
			continue
		}
		if _, override := opts.Env[k]; override {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range opts.Env {
		env = append(env, k+"="+v)
	}
	env = append(env,
		"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(secs),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(opts.Memory))
	cmd.Env = env
	if opts.LogWriter != nil {
		cmd.Stdout, cmd.Stderr = opts.LogWriter, opts.LogWriter
	}
	// Own process group so Close can signal everything it started; SIGTERM if we die first,
	// which makes the emulator kill the runtime too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The runtime inherits the output pipes; don't let a straggler hold Wait forever.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start emulator: %v", ErrRuntime, err)
	}
	inst := &Instance{
		addr:    rieAddr,
		timeout: time.Duration(secs) * time.Second,
		client:  &http.Client{},
		sem:     make(chan struct{}, 1),
		cmd:     cmd,
		exited:  make(chan struct{}),
	}
	go func() {
		inst.waitErr = cmd.Wait()
		close(inst.exited)
	}()
	if err := inst.waitReady(ctx, opts.ReadyTimeout); err != nil {
		_ = inst.Close()
		return nil, err
	}
	return inst, nil
}

func freeAddr() (string, error) {
	port, err := localstack.FreePort()
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrRuntime, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// waitReady dials the invoke endpoint until it accepts a connection. The emulator has no health
// endpoint, and an invocation would run the user's function, so a TCP connect is the check.
func (i *Instance) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Timeout: time.Second}
	for {
		conn, err := d.DialContext(ctx, "tcp", i.addr)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-i.exited:
			return fmt.Errorf("%w: emulator exited before listening on %s: %v", ErrRuntime, i.addr, i.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for emulator: %v", ErrRuntime, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: emulator not listening on %s after %s", ErrRuntime, i.addr, timeout)
		}
	}
}

// Addr is the emulator's invoke endpoint, host:port on 127.0.0.1.
func (i *Instance) Addr() string { return i.addr }

// Timeout is the function timeout the emulator enforces (whole seconds).
func (i *Instance) Timeout() time.Duration { return i.timeout }

// Invoke runs the function once with payload and returns its response. Invocations on one
// Instance never overlap: a call waits until the previous one has finished in the emulator,
// even when the previous caller gave up (its ctx ended) early.
//
// A function error — an error returned by the handler, a panic or exit, a timeout — is a
// *FunctionError wrapping ErrFunction. Because the emulator drops the X-Amz-Function-Error
// header, a 200 response whose body is a JSON object holding only errorMessage, errorType and
// optionally stackTrace is taken to be a handler error; a handler that returns such an object as
// its result is misread (no real handler does). Anything else going wrong wraps ErrRuntime.
func (i *Instance) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	select {
	case i.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: invoke: %w", ErrRuntime, ctx.Err())
	case <-i.exited:
		return nil, fmt.Errorf("%w: invoke: emulator has exited: %v", ErrRuntime, i.waitErr)
	}
	type result struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// Release the slot only when the emulator has answered, so that no second invocation
		// can reach it while this one still runs. The emulator enforces the function timeout;
		// the grace period only guards against a wedged emulator.
		defer func() { <-i.sem }()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.timeout+30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+i.addr+invokePath, bytes.NewReader(payload))
		if err != nil {
			done <- result{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := i.client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{status: resp.StatusCode, body: body, err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: invoke %s: %v", ErrRuntime, i.addr, r.err)
		}
		return classify(r.status, r.body)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: invoke %s: %w", ErrRuntime, i.addr, ctx.Err())
	}
}

// classify turns the emulator's answer into a response or an error (see Invoke).
func classify(status int, body []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if status == http.StatusOK {
		if timedOut.Match(trimmed) {
			return nil, &FunctionError{Type: TimeoutErrorType, Message: string(trimmed), StatusCode: status, Body: body}
		}
		if fe, ok := errorBody(trimmed); ok {
			fe.StatusCode, fe.Body = status, body
			return nil, fe
		}
		return body, nil
	}
	if fe, ok := errorBody(trimmed); ok {
		// 502 with an error document: the runtime crashed (panic, exit) or failed to start.
		fe.StatusCode, fe.Body = status, body
		return nil, fe
	}
	return nil, fmt.Errorf("%w: emulator answered %d: %s", ErrRuntime, status, clip(trimmed))
}

// errorBody reports whether b is a Lambda error document: a JSON object whose keys are
// errorMessage and errorType (both strings) and optionally stackTrace, nothing else.
func errorBody(b []byte) (*FunctionError, bool) {
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false
	}
	var typ, msg string
	rawType, okType := m["errorType"]
	rawMsg, okMsg := m["errorMessage"]
	if !okType || !okMsg || json.Unmarshal(rawType, &typ) != nil || json.Unmarshal(rawMsg, &msg) != nil {
		return nil, false
	}
	for k := range m {
		if k != "errorType" && k != "errorMessage" && k != "stackTrace" {
			return nil, false
		}
	}
	return &FunctionError{Type: typ, Message: msg}, true
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// Close stops the emulator and the function: SIGTERM to the emulator's process group (the
// emulator then kills the runtime), SIGKILL after two seconds. It is safe to call twice.
func (i *Instance) Close() error {
	i.closeOnce.Do(func() {
		pid := i.cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-i.exited:
		case <-time.After(2 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-i.exited
		}
	})
	return nil
}
