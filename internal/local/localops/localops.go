// Package localops is the local stack's side of the operator commands, for the developer tool:
// a reconciler built from its main package and run under the Lambda runtime interface emulator
// (redrive and replay without a deployed function), and the control plane of the emulated
// mapping configured from a template (doctor --live on the local stack).
package localops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/doctor"
	"github.com/gapless-dev/gapless/internal/local/chaos"
	"github.com/gapless-dev/gapless/internal/local/esm"
	"github.com/gapless-dev/gapless/internal/local/localdoctor"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

// Harness implements the command line's local harness.
type Harness struct{}

// StartReconciler builds the reconciler's main in dir (as `gapless-dev invoke` builds it) and
// starts it under the emulator with env.
func (Harness) StartReconciler(ctx context.Context, dir string, env map[string]string, timeout time.Duration, stderr io.Writer) (*Function, error) {
	tmp, err := os.MkdirTemp("", "gapless-reconciler-")
	if err != nil {
		return nil, err
	}
	bootstrap := filepath.Join(tmp, "bootstrap")
	fmt.Fprintf(stderr, "building the local reconciler (%s)\n", dir)
	goBin, err := exec.LookPath("go")
	if err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("the go tool is needed to build %s: %w", dir, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-tags", "lambda.norpc,"+chaos.BuildTag, "-trimpath", "-o", bootstrap, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("build %s: %w", dir, err)
	}
	logs := &syncbuf.Buffer{}
	inst, err := rie.Start(ctx, rie.Options{Bootstrap: bootstrap, Env: env, Timeout: timeout, Memory: 512, LogWriter: logs})
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return &Function{inst: inst, dir: dir, logs: logs, tmp: tmp}, nil
}

// Function is a function under the runtime interface emulator.
type Function struct {
	inst *rie.Instance
	dir  string
	logs *syncbuf.Buffer
	tmp  string
}

func (l *Function) Where() string { return "the local reconciler built from " + l.dir }

func (l *Function) Close() {
	_ = l.inst.Close()
	_ = os.RemoveAll(l.tmp)
}

func (l *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	resp, err := l.inst.Invoke(ctx, payload)
	var fe *rie.FunctionError
	if errors.As(err, &fe) {
		return nil, &Failure{Type: fe.Type, Body: fe.Body, Log: l.logs.String()}
	}
	return resp, err
}

// Failure is the error of an invocation the function answered with a function error: its
// type, its answer and the function's log so far (unescaped: the caller prints them safely).
type Failure struct {
	Type string
	Body []byte
	Log  string
}

func (f *Failure) Error() string { return "function error " + f.Type + ": " + string(f.Body) }

// FailureType, FailureBody and FunctionLog let a caller read the failure without importing
// this package.
func (f *Failure) FailureType() string { return f.Type }
func (f *Failure) FailureBody() []byte { return f.Body }
func (f *Failure) FunctionLog() string { return f.Log }

// ControlPlane is what the harness says for Lambda, EventBridge and CloudWatch on the local
// stack: the emulated mapping configured from the template (as gapless demo runs it, with a
// failure queue it feeds to the reconciler), the functions' variables of the template's
// defaults, and the template's reconciler schedule. Alarms are not checked locally.
func (Harness) ControlPlane(tmplPath string) (doctor.ControlPlane, error) {
	cfg, err := esm.ConfigFromTemplate(tmplPath)
	if err != nil {
		return nil, err
	}
	t, err := doctor.LoadTemplate(tmplPath)
	if err != nil {
		return nil, err
	}
	d := doctor.FromTemplate(t, tmplPath, 0)
	const failure = "the harness's failure queue"
	cfg.OnFailureQueueURL = failure
	consumerEnv := map[string]string{config.EnvLedgerTTL: d.LedgerTTL.String(), config.EnvMaxRecordAttempts: fmt.Sprint(d.MaxRecordAttempts)}
	reconcilerEnv := map[string]string{config.EnvLedgerTTL: d.LedgerTTL.String(), config.EnvSettleAfter: d.SettleAfter.String()}
	if d.ConsumerTimeout > 0 {
		cfg.FunctionTimeout = d.ConsumerTimeout
	}
	var metrics []string // the template's MetricsConfig: the emulated mapping emits no metrics
	if d.Mapping != nil {
		metrics = d.Mapping.Metrics
	}
	return &localdoctor.ControlPlane{
		Mapping: cfg, State: "Enabled",
		Metrics:     metrics,
		ConsumerEnv: consumerEnv, ReconcilerEnv: reconcilerEnv,
		ReconcilerQueues: []string{failure},
		Schedule:         d.Schedule,
		Notes:            []string{"local: alarms are not checked (no CloudWatch); the schedule is template.yaml's"},
	}, nil
}
