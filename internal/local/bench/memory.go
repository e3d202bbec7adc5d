package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// MemoryMethod says how MemResult is measured.
const MemoryMethod = "child process per handler (re-exec of this binary): the handler is built and " +
	"warmed on a small batch, then runtime.GC + debug.FreeOSMemory, the kernel's peak-RSS mark " +
	"is reset (echo 5 > /proc/self/clear_refs), the payload file is read (the runtime holds it " +
	"too) and the handler invoked once; peak = VmHWM from /proc/self/status, allocations = " +
	"runtime.MemStats deltas around the invocation (payload buffer excluded)"

// MemResult is the memory one invocation of a large batch costs.
type MemResult struct {
	Handler      string `json:"handler"`
	Records      int    `json:"records"`
	PayloadBytes int    `json:"payload_bytes"`
	// RSS before the payload was read (handler built and warmed), and the process's peak RSS
	// during the invocation; BatchPeakBytes is their difference: what the batch cost.
	BaseRSSBytes   int64   `json:"base_rss_bytes"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	BatchPeakBytes int64   `json:"batch_peak_bytes"`
	PeakOverBytes  float64 `json:"batch_peak_over_payload"`
	Allocs         uint64  `json:"allocs"`
	AllocBytes     uint64  `json:"alloc_bytes"`
	GCCycles       uint32  `json:"gc_cycles"`
	Seconds        float64 `json:"seconds"`
	// PeakReset is false where clear_refs was refused: the peak is then the process's
	// lifetime peak, which can only overstate.
	PeakReset bool `json:"peak_reset"`
}

// ChildArgs is what the parent passes to the memory child.
type ChildArgs struct {
	Handler string `json:"handler"`
	Payload string `json:"payload"` // file with the invocation payload
	Records int    `json:"records"`
	Tables  Tables `json:"tables"`
}

// ChildFlag is the hidden flag of `gapless bench` that makes it a memory child; its value is
// ChildArgs as JSON.
const ChildFlag = "memory-child"

// MeasureMemoryChild runs in the child process: see MemoryMethod. It returns the result the
// parent reads back as JSON from stdout.
func MeasureMemoryChild(ctx context.Context, c Clients, a ChildArgs) (MemResult, error) {
	res := MemResult{Handler: a.Handler, Records: a.Records}
	s, err := NewSubject(a.Handler, c, a.Tables)
	if err != nil {
		return res, err
	}
	warm, err := Workload{Stream: "memory-warm", ShardID: "shardId-999999999999", Arrival: time.Now()}.Payload(0, 1, 0, 10)
	if err != nil {
		return res, err
	}
	if _, err := s.Invoke(ctx, warm); err != nil {
		return res, fmt.Errorf("bench: warm %s: %w", a.Handler, err)
	}
	runtime.GC()
	debug.FreeOSMemory()
	res.PeakReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	st, err := procStatus()
	if err != nil {
		return res, err
	}
	res.BaseRSSBytes = st["VmRSS"]

	raw, err := os.ReadFile(a.Payload) // the runtime holds the payload too
	if err != nil {
		return res, fmt.Errorf("bench: read payload: %w", err)
	}
	res.PayloadBytes = len(raw)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	resp, err := s.Invoke(ictx, raw)
	res.Seconds = time.Since(start).Seconds()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		return res, fmt.Errorf("bench: %s: %w", a.Handler, err)
	}
	if len(resp.BatchItemFailures) > 0 {
		return res, fmt.Errorf("bench: %s: batch failed from %s", a.Handler, resp.BatchItemFailures[0].ItemIdentifier)
	}
	st, err = procStatus()
	if err != nil {
		return res, err
	}
	runtime.KeepAlive(raw)
	res.PeakRSSBytes = st["VmHWM"]
	res.BatchPeakBytes = res.PeakRSSBytes - res.BaseRSSBytes
	res.PeakOverBytes = float64(res.BatchPeakBytes) / float64(res.PayloadBytes)
	res.Allocs = ms1.Mallocs - ms0.Mallocs
	res.AllocBytes = ms1.TotalAlloc - ms0.TotalAlloc
	res.GCCycles = ms1.NumGC - ms0.NumGC
	return res, nil
}

// procStatus reads the kB fields of /proc/self/status, in bytes.
func procStatus() (map[string]int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("bench: %w (peak RSS needs Linux /proc)", err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[name] = v * 1024
		}
	}
	if out["VmHWM"] == 0 || out["VmRSS"] == 0 {
		return nil, errors.New("bench: /proc/self/status has no VmHWM/VmRSS")
	}
	return out, nil
}

// MeasureMemory runs one memory child per handler: exe (this binary) with args, then
// "--memory-child <ChildArgs JSON>"; the child prints its MemResult as JSON on stdout. The
// payload is one batch of records of a fresh shard, written to dir.
func MeasureMemory(ctx context.Context, exe string, args []string, dir string, handlers []string, records int, t Tables) ([]MemResult, error) {
	var out []MemResult
	for i, h := range handlers {
		w := Workload{Stream: "memory", ShardID: fmt.Sprintf("shardId-%012d", 900000+i), Arrival: time.Now().Add(-time.Hour)}
		raw, err := w.Payload(0, 1, 0, records)
		if err != nil {
			return out, err
		}
		path := fmt.Sprintf("%s/payload-%s.json", dir, h)
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			return out, fmt.Errorf("bench: write payload: %w", err)
		}
		ca, err := json.Marshal(ChildArgs{Handler: h, Payload: path, Records: records, Tables: t})
		if err != nil {
			return out, err
		}
		cmd := exec.CommandContext(ctx, exe, append(append([]string(nil), args...), "--"+ChildFlag, string(ca))...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return out, fmt.Errorf("bench: memory child %s: %w: %s", h, err, clip(stderr.String()))
		}
		var r MemResult
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			return out, fmt.Errorf("bench: memory child %s: output %q: %w", h, clip(stdout.String()), err)
		}
		out = append(out, r)
		_ = os.Remove(path)
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}
