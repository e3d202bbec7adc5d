package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

// Bootstrap is one function binary to build and start under the emulator.
type Bootstrap struct {
	Handler string            // Bare, Idempotent or Gapless
	Package string            // Go package path relative to the module root, e.g. ./functions/consumer
	Env     map[string]string // the function's environment
}

// BootstrapResult is the size and cold start of one bootstrap.
type BootstrapResult struct {
	Handler string `json:"handler"`
	Package string `json:"package"`
	// Pending explains why nothing was measured (e.g. the package does not exist yet).
	Pending string `json:"pending,omitempty"`
	// Sizes of the stripped binary for the emulator's architecture and for arm64 (the deployed
	// architecture, template.yaml), when built.
	SizeBytes      int64 `json:"size_bytes"`
	SizeBytesArm64 int64 `json:"size_bytes_arm64,omitempty"`
	// Each cold start is a fresh emulator invoked twice with an empty event: ColdInvokeMs is the
	// first invocation as the caller sees it (process start, Go runtime and main's init, the
	// runtime API handshake, the empty event), WarmInvokeMs the second; InitMs is their
	// difference. The emulator's own "Init Duration" is not used: its InitHandler returns as soon
	// as the sandbox is asked to start (internal/lambda/rie/handlers.go), so it prints ~0 ms.
	ColdInvokeMs []float64 `json:"cold_invoke_ms"`
	WarmInvokeMs []float64 `json:"warm_invoke_ms"`
	InitMs       []float64 `json:"init_ms"`
	InitMedianMs float64   `json:"init_median_ms"`
}

// hasGo reports whether dir holds a Go main package (any non-test .go file).
func hasGo(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range m {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}

// build compiles pkg (relative to root) for linux/goarch into out.
func build(ctx context.Context, root, pkg, goarch, out string) (int64, error) {
	if err := rie.BuildFor(ctx, root, pkg, out, goarch); err != nil {
		return 0, fmt.Errorf("bench: %s", clip(err.Error()))
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// ColdStarts builds each bootstrap with rie.BuildFlags into dir, measures its size, and starts it
// under aws-lambda-rie reps times, each a fresh environment invoked twice with an empty event
// (cold, then warm). arm64 also builds the arm64 binary for its size.
func ColdStarts(ctx context.Context, root, dir string, boots []Bootstrap, reps int, arm64 bool) ([]BootstrapResult, error) {
	var out []BootstrapResult
	for _, b := range boots {
		r := BootstrapResult{Handler: b.Handler, Package: b.Package}
		if !hasGo(filepath.Join(root, b.Package)) {
			r.Pending = b.Package + " has no Go files yet"
			out = append(out, r)
			continue
		}
		bin := filepath.Join(dir, b.Handler, "bootstrap")
		size, err := build(ctx, root, b.Package, runtime.GOARCH, bin)
		if err != nil {
			return out, err
		}
		r.SizeBytes = size
		if arm64 {
			if r.SizeBytesArm64, err = build(ctx, root, b.Package, "arm64", bin+"-arm64"); err != nil {
				return out, err
			}
		}
		for range reps {
			cold, warm, err := coldStart(ctx, bin, b.Env)
			if err != nil {
				return out, fmt.Errorf("bench: cold start %s: %w", b.Handler, err)
			}
			r.ColdInvokeMs = append(r.ColdInvokeMs, cold)
			r.WarmInvokeMs = append(r.WarmInvokeMs, warm)
			r.InitMs = append(r.InitMs, cold-warm)
		}
		r.InitMedianMs = median(r.InitMs)
		out = append(out, r)
	}
	return out, nil
}

// emptyEvent is a Kinesis event with no records: every handler answers it without work.
var emptyEvent = []byte(`{"Records":[]}`)

func coldStart(ctx context.Context, bin string, env map[string]string) (coldMs, warmMs float64, err error) {
	logs := &syncbuf.Buffer{} // the emulator's output from its two writers
	inst, err := rie.Start(ctx, rie.Options{Bootstrap: bin, Env: env, Timeout: 60 * time.Second, Memory: 1024, LogWriter: logs})
	if err != nil {
		return 0, 0, err
	}
	defer inst.Close()
	invoke := func() (float64, error) {
		t0 := time.Now()
		body, err := inst.Invoke(ctx, emptyEvent)
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil {
			return ms, fmt.Errorf("%w\n%s", err, clip(logs.String()))
		}
		var resp struct {
			BatchItemFailures []json.RawMessage `json:"batchItemFailures"`
		}
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.BatchItemFailures) > 0 {
			return ms, fmt.Errorf("unexpected response %s (%v)\n%s", clip(string(body)), err, clip(logs.String()))
		}
		return ms, nil
	}
	if coldMs, err = invoke(); err != nil {
		return 0, 0, err
	}
	if warmMs, err = invoke(); err != nil {
		return 0, 0, err
	}
	return coldMs, warmMs, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
