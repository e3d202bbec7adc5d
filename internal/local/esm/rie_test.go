package esm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/rie"
)

var _ Invoker = (*rie.Instance)(nil)

// buildTestBootstrap builds testdata/consumer and fetches aws-lambda-rie: what a mapping needs
// to drive a real bootstrap under the runtime interface emulator.
func buildTestBootstrap(ctx context.Context, t *testing.T) (bootstrap, rieBinary string) {
	t.Helper()
	bootstrap = filepath.Join(t.TempDir(), "bootstrap")
	if err := rie.Build(ctx, "", "./testdata/consumer", bootstrap); err != nil {
		t.Fatalf("build testdata/consumer: %v", err)
	}
	bin, err := rie.Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bootstrap, bin
}

// The mapping driving a real Lambda bootstrap under the runtime interface emulator, one
// emulator per lane (the emulator cannot take overlapping invocations).
func TestMappingWithRuntimeInterfaceEmulator(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bootstrap, bin := buildTestBootstrap(ctx, t)

	s := newStream(t, 1)
	keys := keysCoveringLanes(2, 3)
	var puts []putResult
	for i := range 24 {
		data := fmt.Sprintf("ok:%d", i)
		switch i {
		case 3, 17:
			data = fmt.Sprintf("fail-once:%d", i)
		case 9:
			data = fmt.Sprintf("error-once:%d", i)
		}
		puts = append(puts, s.put(t, keys[i%len(keys)], []byte(data)))
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
	lanes := func(shardID string, lane int) (Invoker, error) {
		in, err := rie.Start(ctx, rie.Options{Bootstrap: bootstrap, Binary: bin, Timeout: 5 * time.Second, LogWriter: &lockedWriter{mu: &mu, w: &logs}})
		if err != nil {
			return nil, err
		}
		mu.Lock()
		insts = append(insts, in)
		mu.Unlock()
		return in, nil
	}
	cfg := baseConfig(s)
	cfg.ParallelizationFactor = 2
	cfg.BatchSize = 5
	cfg.ReportBatchItemFailures = true
	cfg.MaximumRetryAttempts = 3
	cfg.FunctionTimeout = 5 * time.Second
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

	if n := len(insts); n != 2 {
		t.Fatalf("%d emulators started, want one per lane", n)
	}
	if ex := log.all(EventRetriesExhausted, EventRecordsExpired); len(ex) > 0 {
		t.Fatalf("records given up: %+v", ex)
	}
	// A fail-once record is reported unless the error-once record failed its whole batch first.
	if n := len(log.all(EventPartialFailure)); n < 1 {
		t.Fatalf("no partial failure reported")
	}
	errs := log.all(EventFunctionError)
	if len(errs) != 1 {
		t.Fatalf("%d function errors, want 1 (the error-once record)", len(errs))
	}
	var fe *rie.FunctionError
	if !errors.As(errs[0].Err, &fe) || fe.Message != "injected error for "+puts[9].shard+":"+puts[9].seq {
		t.Fatalf("function error %v does not carry the handler's error", errs[0].Err)
	}
	// Every lane's checkpoint reached its last record.
	last := map[int]string{}
	for _, p := range puts {
		last[LaneOf(p.key, 2)] = p.seq
	}
	cps := m.Checkpoints()[puts[0].shard]
	for l, want := range last {
		if cps[l] != want {
			t.Fatalf("lane %d checkpoint %s, want %s", l, cps[l], want)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
