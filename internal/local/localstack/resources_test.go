package localstack

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestResourcesFromEnv(t *testing.T) {
	consumer := map[string]string{"GAPLESS_GROUP": "local", "CHECKPOINT_TABLE": "cp", "DEDUPE_TABLE": "ledger",
		"PARKED_QUEUE_URL": "http://sqs.us-east-1.localhost:4566/000000000000/parked", "TARGET_QUEUE_URL": "http://x/1/target.fifo"}
	reconciler := map[string]string{"STREAM_NAME": "orders", "CHECKPOINT_TABLE": "other"}
	got := ResourcesFromEnv(consumer, reconciler)
	want := Resources{Group: "local", Stream: "orders", CheckpointTable: "cp", LedgerTable: "ledger", ParkedQueue: "parked", TargetQueue: "target.fifo"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ResourcesFromEnv = %+v, want %+v (the first set wins, later ones fill gaps)", got, want)
	}
	vars := Ready{Resources: want, ParkedQueueURL: "p-url", TargetQueueURL: "t-url"}.Vars()
	wantVars := map[string]string{"GAPLESS_GROUP": "local", "STREAM_NAME": "orders", "CHECKPOINT_TABLE": "cp",
		"DEDUPE_TABLE": "ledger", "PARKED_QUEUE_URL": "p-url", "TARGET_QUEUE_URL": "t-url"}
	if !maps.Equal(vars, wantVars) {
		t.Errorf("Vars = %v, want %v", vars, wantVars)
	}
	if v := (Ready{}).Vars(); len(v) != 0 {
		t.Errorf("no resources, vars %v", v)
	}
}

// TestStateRoundTrip: what WriteStateWith writes, ReadState reads; a recorded process that is
// not running is reported dead.
func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	procs := []*Process{{Service: Kinesis, Endpoint: "http://127.0.0.1:1", PID: 999999999, LogPath: filepath.Join(dir, "k.log")}}
	if err := WriteStateWith(dir, procs, map[string]string{"STREAM_NAME": "orders"}); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := ReadState(dir)
	if err != nil || !ok {
		t.Fatalf("ReadState: %v %v", ok, err)
	}
	if rec.Env["STREAM_NAME"] != "orders" || rec.Env["AWS_ENDPOINT_URL_KINESIS"] != "http://127.0.0.1:1" || rec.Env["AWS_DEFAULT_REGION"] != "us-east-1" {
		t.Errorf("env %v", rec.Env)
	}
	if len(rec.Procs) != 1 || rec.Procs[0].Service != Kinesis || rec.Procs[0].PID != 999999999 || rec.Procs[0].LogPath != procs[0].LogPath {
		t.Errorf("procs %+v", rec.Procs)
	}
	if dead := rec.Running(context.Background()); len(dead) != 2 { // the PID and the endpoint
		t.Errorf("dead = %v, want the process and its endpoint", dead)
	}
	if err := os.Remove(filepath.Join(dir, "stack.env")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadState(dir); ok || err != nil {
		t.Errorf("no stack.env: ok %v err %v", ok, err)
	}
}
