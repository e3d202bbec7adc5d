package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/events/fixtures"
	"github.com/gapless-dev/gapless/internal/config"
	"github.com/gapless-dev/gapless/internal/local/localstack/stacktest"
	"github.com/gapless-dev/gapless/internal/local/rie"
	"github.com/gapless-dev/gapless/internal/pipeline"
	"github.com/gapless-dev/gapless/internal/recordid"
)

// TestBootstrapKilledMidRecord runs the consumer function (testdata/killfn: functions/consumer's
// wiring with a Process that blocks on {"kill":true} records) under aws-lambda-rie and SIGKILLs
// the runtime process while it is inside the killer record, then invokes again the way the
// mapping retries: nothing after the in-flight marker was written by the killed invocation, yet
// the next invocation past its deadline counts the death, isolates the killer by halving, and
// after MAX_RECORD_ATTEMPTS deaths of the killer alone parks it with its payload and
// "invocation died: timeout/crash". The innocent records of the batch are processed, none is
// parked, and the lane is through within the documented bound. On the code before in-flight
// markers every invocation died on the killer and nothing was ever counted.
func TestBootstrapKilledMidRecord(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a bootstrap and kills it several times (~40 s)")
	}
	s := newStack(t)
	dir := t.TempDir()
	boot := filepath.Join(dir, "bootstrap")
	if err := rie.Build(context.Background(), "", "./testdata/killfn", boot); err != nil {
		t.Fatalf("build killfn: %v", err)
	}
	const (
		group       = "killed"
		maxAttempts = 2
		n           = 4
		killer      = 2
	)
	timeout := 4 * time.Second
	pidFile := filepath.Join(dir, "pid")
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inst, err := rie.Start(ctx, rie.Options{Bootstrap: boot, Timeout: timeout, LogWriter: logs, Env: map[string]string{
		config.EnvGroup: group, config.EnvCheckpointTable: s.cpTable, config.EnvDedupeTable: s.ledgerTable,
		config.EnvParkedQueueURL: s.parkedURL, config.EnvTargetQueueURL: stacktest.Queue(t, "target", false),
		config.EnvPayloadBucket: stacktest.Bucket(t), config.EnvMaxRecordAttempts: strconv.Itoa(maxAttempts), config.EnvDeadlineMargin: "1s",
		"KILL_PID_FILE": pidFile,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = inst.Close()
		if t.Failed() {
			t.Logf("runtime output:\n%s", logs.String())
		}
	})

	seq := func(i int) string { return fixtures.Seq(200 + i) }
	var recs []rec
	for i := 1; i <= n; i++ {
		data := fmt.Sprintf(`{"id":%d}`, i)
		if i == killer {
			data = fmt.Sprintf(`{"id":%d,"kill":true}`, i)
		}
		recs = append(recs, rec{seq: seq(i), pk: fmt.Sprint("key-", i), data: []byte(data)})
	}

	bound := maxAttempts * (int(math.Ceil(math.Log2(n))) + 1)
	kills, from := 0, 0
	for run := 0; from < n; run++ {
		if run > 3*bound {
			t.Fatalf("lane still blocked at record %d after %d invocations (%d killed)", from+1, run, kills)
		}
		_ = os.Remove(pidFile)
		type result struct {
			body []byte
			err  error
		}
		done := make(chan result, 1)
		raw := mkEvent(t, recs[from:]...)
		go func() {
			body, err := inst.Invoke(ctx, raw)
			done <- result{body, err}
		}()
		var res result
		killed := false
	wait:
		for {
			select {
			case res = <-done:
				break wait
			case <-time.After(20 * time.Millisecond):
			}
			b, err := os.ReadFile(pidFile)
			if err != nil || killed {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				continue // written but not yet complete
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: %v", pid, err)
			}
			killed = true
		}
		if killed {
			kills++
			if !errors.Is(res.err, rie.ErrFunction) {
				t.Fatalf("invocation %d: killed runtime answered %s, %v", run, res.body, res.err)
			}
			// Lambda retries the batch; the killed invocation's marker is dead once its
			// deadline (invocation start + timeout) plus the clock-skew grace has passed.
			time.Sleep(timeout + pipeline.DeadGrace + 500*time.Millisecond)
			continue
		}
		if res.err != nil {
			t.Fatalf("invocation %d: %v", run, res.err)
		}
		failed := failureOfBody(t, res.body)
		if failed == "" {
			break
		}
		from = slices.IndexFunc(recs, func(r rec) bool { return r.seq == failed })
		if from < 0 {
			t.Fatalf("failure %q is not a record of the batch", failed)
		}
	}

	tight := int(math.Ceil(math.Log2(n))) + maxAttempts
	if kills > bound || kills > tight || kills < maxAttempts {
		t.Errorf("%d kills, want between %d and %d (bound %d)", kills, maxAttempts, tight, bound)
	}
	parked := s.receiveParked(t, 1)
	if len(parked) != 1 || parked[0].Seq != seq(killer) || string(parked[0].Data) != string(recs[killer-1].data) ||
		parked[0].LastError != pipeline.ErrDied.Error() || parked[0].Attempts < maxAttempts {
		t.Fatalf("parked = %+v, want the killer with its payload and %q", parked, pipeline.ErrDied)
	}
	v, err := s.ledger().Lookup(context.Background(), shardFor(group), seq(1), seq(n))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		id := recordid.ID{ShardID: fixtures.Shard, Seq: seq(i)}
		if !v.Done(id) || (i != killer && v.Parked(id)) {
			t.Errorf("record %d: done %v parked %v", i, v.Done(id), v.Parked(id))
		}
	}
	t.Logf("%d kills (tight bound %d, issue bound %d)", kills, tight, bound)
}

// failureOfBody decodes a KinesisEventResponse body and returns its one failure ("" if none).
func failureOfBody(t *testing.T, body []byte) string {
	t.Helper()
	var resp struct {
		BatchItemFailures []struct {
			ItemIdentifier string `json:"itemIdentifier"`
		} `json:"batchItemFailures"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	if len(resp.BatchItemFailures) == 0 {
		return ""
	}
	return resp.BatchItemFailures[0].ItemIdentifier
}
