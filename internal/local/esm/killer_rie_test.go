package esm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/rie"
)

// TestKillerRecordsUnderRuntimeInterfaceEmulator: a record whose processing exits the runtime
// (the bootstrap dies mid-invocation) and one that hangs past the function timeout, each on
// every attempt, under the real runtime emulator. Every invocation holding one is a function
// error (Runtime.ExitError; a timeout); the mapping bisects down to the killer, retries it
// MaximumRetryAttempts times and gives up on it alone; the lane's emulator survives every
// crash (it starts the bootstrap again on the next invocation), so the records around the
// killers are processed and the lane's checkpoint reaches the end.
func TestKillerRecordsUnderRuntimeInterfaceEmulator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bootstrap, bin := buildTestBootstrap(ctx, t)

	s := newStream(t, 1)
	const crashAt, hangAt, n = 4, 11, 16
	var puts []putResult
	for i := range n {
		data := fmt.Sprintf("ok:%d", i)
		switch i {
		case crashAt:
			data = fmt.Sprintf("crash:%d", i)
		case hangAt:
			data = fmt.Sprintf("hang:%d", i)
		}
		puts = append(puts, s.put(t, "one-key", []byte(data)))
	}

	var (
		mu    sync.Mutex
		insts []*rie.Instance
		logs  bytes.Buffer
	)
	t.Cleanup(func() {
		for _, in := range insts {
			_ = in.Close()
		}
	})
	const timeout = 2 * time.Second
	lanes := func(string, int) (Invoker, error) {
		in, err := rie.Start(ctx, rie.Options{Bootstrap: bootstrap, Binary: bin, Timeout: timeout, LogWriter: &lockedWriter{mu: &mu, w: &logs}})
		if err != nil {
			return nil, err
		}
		mu.Lock()
		insts = append(insts, in)
		mu.Unlock()
		return in, nil
	}
	cfg := baseConfig(s)
	cfg.BatchSize = n
	cfg.BatchingWindow = time.Second
	cfg.ReportBatchItemFailures = true
	cfg.BisectBatchOnFunctionError = true
	cfg.MaximumRetryAttempts = 1
	cfg.FunctionTimeout = timeout
	log := &eventLog{}
	m, err := New(s.kin, nil, lanes, cfg, append(fastOpts, WithStopWhenDrained(), WithObserver(log.observe))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(ctx); err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("Run: %v\nlogs:\n%s", err, logs.String())
	}

	if len(insts) != 1 {
		t.Fatalf("%d emulators started, want the lane's one to survive every crash", len(insts))
	}
	// Given up: each killer alone, after 1 + MaximumRetryAttempts invocations of it alone (counted
	// below). Lambda consolidates what one batch gives up under one condition into one on-failure
	// message (failure.go), so one event names both: the range crash..hang, batchSize 2.
	given := log.all(EventRetriesExhausted, EventRecordsExpired)
	if len(given) != 1 || given[0].Type != EventRetriesExhausted || given[0].Size != 2 ||
		given[0].FirstSeq != puts[crashAt].seq || given[0].LastSeq != puts[hangAt].seq {
		t.Fatalf("given up %+v, want one consolidated message: the crash record and the hang record", given)
	}
	var crashes, hangs int
	for _, e := range log.all(EventFunctionError) {
		var fe *rie.FunctionError
		switch {
		case e.FirstSeq == puts[crashAt].seq && e.LastSeq == puts[crashAt].seq:
			if !errors.As(e.Err, &fe) || fe.Type != "Runtime.ExitError" {
				t.Errorf("crash record's invocation failed with %v, want Runtime.ExitError", e.Err)
			}
			crashes++
		case e.FirstSeq == puts[hangAt].seq && e.LastSeq == puts[hangAt].seq:
			if !errors.Is(e.Err, ErrFunctionTimeout) && !(errors.As(e.Err, &fe) && fe.Type == rie.TimeoutErrorType) {
				t.Errorf("hang record's invocation failed with %v, want a timeout", e.Err)
			}
			hangs++
		}
	}
	if want := 1 + cfg.MaximumRetryAttempts; crashes != want || hangs != want {
		t.Fatalf("invocations of the killers alone: %d crashed, %d hung; want %d each", crashes, hangs, want)
	}
	// Nothing else given up, and the lane went on to the end.
	if cp := m.Checkpoints()[puts[0].shard][0]; cp != puts[n-1].seq {
		t.Fatalf("lane checkpoint %s, want the last record %s", cp, puts[n-1].seq)
	}
}
