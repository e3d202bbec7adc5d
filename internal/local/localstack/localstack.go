// Package localstack installs, starts, probes and stops the local AWS stack that gapless runs
// against during development, tests and the demo: kinesis-local (Kinesis), dynalite (DynamoDB),
// fauxqs (SQS, and S3 on the same port) and, as a second DynamoDB/SQS/S3 target, moto_server.
// Everything listens on 127.0.0.1 only; kinesis-local and fauxqs bind 0.0.0.0 by code, so they are started with
// tools/loopback.cjs preloaded, which rewrites every listen to loopback.
//
// It is a development tool, not part of the deployed product.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Service names one emulator process.
type Service string

// The emulators the stack knows.
const (
	Kinesis  Service = "kinesis"  // npm kinesis-local (kinesis-mock)
	DynamoDB Service = "dynamodb" // npm dynalite
	SQS      Service = "sqs"      // npm fauxqs (also serves S3 on its port)
	Moto     Service = "moto"     // moto_server, serving DynamoDB, SQS and S3
)

// DefaultPorts are the fixed ports of a stack started by `gapless up`; each can be overridden
// with GAPLESS_PORT_<SERVICE> (e.g. GAPLESS_PORT_KINESIS=14567).
var DefaultPorts = map[Service]int{
	SQS:      4566,
	Kinesis:  4567,
	DynamoDB: 4569,
	Moto:     4570,
}

// ErrNotInstalled is returned when the emulators are missing and installing them failed.
var ErrNotInstalled = errors.New("local stack tools not installed")

// Process is one running emulator.
type Process struct {
	Service  Service
	Endpoint string // http://127.0.0.1:port
	PID      int
	LogPath  string
	cmd      *exec.Cmd
}

// Options control Start.
type Options struct {
	Root     string          // repository root (holds tools/); FindRoot when empty
	StateDir string          // logs and PID files; <Root>/.local when empty
	Ports    map[Service]int // port per service; 0 or absent picks a free port
	Detach   bool            // survive the calling process (gapless up); stop with StopFromState
	Timeout  time.Duration   // readiness timeout per service; 60s when zero
}

// RootEnvVar names a gapless checkout (the directory holding tools/) for a developer tool run
// outside one, e.g. in a service's own repository.
const RootEnvVar = "GAPLESS_ROOT"

// FindRoot is the repository root: the directory whose go.mod declares gapless's module
// (ModulePath), found walking up from the working directory (the example modules under
// examples/ have go.mod files of their own, which it passes by); outside a checkout, the
// directory $GAPLESS_ROOT names, else the checkout the running executable lives in
// (<checkout>/bin/gapless-dev).
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if root, ok := rootAbove(dir); ok {
		return root, nil
	}
	if env := os.Getenv(RootEnvVar); env != "" {
		if !isRoot(env) {
			return "", fmt.Errorf("localstack: %s=%s holds no go.mod of %s", RootEnvVar, env, ModulePath)
		}
		return filepath.Abs(env)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if root, ok := rootAbove(filepath.Dir(exe)); ok {
				return root, nil
			}
		}
	}
	return "", fmt.Errorf("localstack: no go.mod of %s above the working directory or the executable; outside a gapless checkout set %s to one", ModulePath, RootEnvVar)
}

// IsRoot reports whether dir is the root of a gapless checkout.
func IsRoot(dir string) bool { return isRoot(dir) }

func rootAbove(dir string) (string, bool) {
	for {
		if isRoot(dir) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// PortsFromEnv returns DefaultPorts with GAPLESS_PORT_<SERVICE> overrides applied.
func PortsFromEnv() (map[Service]int, error) {
	ports := make(map[Service]int, len(DefaultPorts))
	for svc, p := range DefaultPorts {
		ports[svc] = p
		name := "GAPLESS_PORT_" + strings.ToUpper(string(svc))
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("localstack: %s=%q is not a TCP port", name, v)
			}
			ports[svc] = n
		}
	}
	return ports, nil
}

// Install runs `npm ci` in tools/ when its node_modules is missing. It holds a file lock so
// that test binaries started in parallel install once.
func Install(ctx context.Context, root string) error {
	tools := filepath.Join(root, "tools")
	lock, err := os.OpenFile(filepath.Join(tools, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("%w: lock: %v", ErrNotInstalled, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway
	if installed(tools) {
		return nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = tools
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: npm ci in %s: %v\n%s", ErrNotInstalled, tools, err, out)
	}
	if !installed(tools) {
		return fmt.Errorf("%w: npm ci finished but emulators are missing in %s", ErrNotInstalled, tools)
	}
	return nil
}

func installed(tools string) bool {
	for _, p := range []string{"kinesis-local/main.js", "dynalite/cli.js", "fauxqs/dist/cli.js"} {
		if _, err := os.Stat(filepath.Join(tools, "node_modules", p)); err != nil {
			return false
		}
	}
	return true
}

// Start starts the given services and waits until each answers HTTP on its port.
// On error, whatever was started is stopped again.
func Start(ctx context.Context, opts Options, services ...Service) ([]*Process, error) {
	if opts.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return nil, err
		}
		opts.Root = root
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(opts.Root, ".local")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	needNode := false
	for _, s := range services {
		needNode = needNode || s != Moto
	}
	if needNode {
		if err := Install(ctx, opts.Root); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	var procs []*Process
	for _, svc := range services {
		p, err := start(ctx, opts, svc)
		if err != nil {
			Stop(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

func start(ctx context.Context, opts Options, svc Service) (*Process, error) {
	port := opts.Ports[svc]
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if err := portFree(port); err != nil {
		return nil, fmt.Errorf("localstack: %s: %w (is a stack already up? `make down`, or set GAPLESS_PORT_%s)", svc, err, strings.ToUpper(string(svc)))
	}
	tools := filepath.Join(opts.Root, "tools")
	nm := filepath.Join(tools, "node_modules")
	loopback := filepath.Join(tools, "loopback.cjs")
	env := os.Environ()
	var cmd *exec.Cmd
	switch svc {
	case Kinesis:
		tls, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command("node", "--require", loopback, filepath.Join(nm, "kinesis-local", "main.js"))
		env = append(env,
			"KINESIS_MOCK_PLAIN_PORT="+strconv.Itoa(port),
			"KINESIS_MOCK_TLS_PORT="+strconv.Itoa(tls),
			"KINESIS_MOCK_CERT_PATH="+filepath.Join(nm, "kinesis-local", "server.json"),
			"AWS_REGION=us-east-1",
			// Streams become ACTIVE after these delays; the defaults of 500ms slow every test.
			"CREATE_STREAM_DURATION=50ms", "DELETE_STREAM_DURATION=50ms",
			"SPLIT_SHARD_DURATION=50ms", "MERGE_SHARDS_DURATION=50ms", "UPDATE_SHARD_COUNT_DURATION=50ms",
			"LOG_LEVEL=WARN",
			// One shared stack serves every test package at once (make test): the default limit
			// of 50 open shards across streams is reached within seconds.
			"SHARD_LIMIT=100000", "ON_DEMAND_STREAM_COUNT_LIMIT=1000",
		)
	case DynamoDB:
		cmd = exec.Command("node", filepath.Join(nm, "dynalite", "cli.js"), "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	case SQS:
		cmd = exec.Command("node", "--require", loopback, filepath.Join(nm, "fauxqs", "dist", "cli.js"))
		env = append(env, "FAUXQS_PORT="+strconv.Itoa(port), "FAUXQS_HOST=localhost")
	case Moto:
		cmd = exec.Command("moto_server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	default:
		return nil, fmt.Errorf("localstack: unknown service %q", svc)
	}
	cmd.Env = env
	cmd.Dir = opts.StateDir
	// Own process group: Stop signals the group, so children of npm/node wrappers die too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logPath := filepath.Join(opts.StateDir, "logs", fmt.Sprintf("%s-%d.log", svc, port))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("localstack: start %s: %w", svc, err)
	}
	logf.Close() // the child holds its own descriptor
	p := &Process{Service: svc, Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), PID: cmd.Process.Pid, LogPath: logPath, cmd: cmd}
	exited := make(chan error, 1)
	if !opts.Detach {
		// Reap the child; a detached one outlives us and is reaped by init.
		go func() { exited <- cmd.Wait() }()
	}
	if err := waitReady(ctx, p, opts.Timeout, exited); err != nil {
		Stop([]*Process{p})
		return nil, err
	}
	return p, nil
}

// waitReady polls the endpoint until it answers HTTP (any status: the emulators reject an
// unsigned GET, which is proof enough that the server loop runs).
func waitReady(ctx context.Context, p *Process, timeout time.Duration, exited <-chan error) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Endpoint+"/", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("localstack: %s exited before it was ready (%v); log: %s\n%s", p.Service, err, p.LogPath, tail(p.LogPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localstack: %s not ready on %s after %s; log: %s\n%s", p.Service, p.Endpoint, timeout, p.LogPath, tail(p.LogPath))
		}
	}
}

// Stop terminates the processes (SIGTERM to the group, SIGKILL after 3s).
func Stop(procs []*Process) {
	for _, p := range procs {
		stopPID(p.PID)
	}
}

func stopPID(pid int) {
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for i := 0; i < 30; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// FreePort asks the kernel for an unused loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localstack: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("port %d is in use", port)
	}
	return l.Close()
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
