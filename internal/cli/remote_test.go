package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gapless-dev/gapless/internal/reconcile"
)

// fakeLambda answers Invoke (POST /2015-03-31/functions/<name>/invocations) with answer(n, the
// command) for the n-th call, or a function error when answer returns a string.
func fakeLambda(t *testing.T, answer func(n int, c reconcile.Command) any) (*[]reconcile.Command, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var got []reconcile.Command
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		var ev reconcile.CommandEvent
		if err := json.Unmarshal(body, &ev); err != nil || ev.Gapless == nil {
			t.Errorf("payload %s is not a command event: %v", body, err)
			w.WriteHeader(400)
			return
		}
		got, paths = append(got, *ev.Gapless), append(paths, r.Method+" "+r.URL.Path)
		switch a := answer(len(got), *ev.Gapless).(type) {
		case string:
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
			_ = json.NewEncoder(w).Encode(map[string]string{"errorType": "wrapError", "errorMessage": a})
		default:
			_ = json.NewEncoder(w).Encode(a)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ENDPOINT_URL_LAMBDA", srv.URL)
	t.Setenv("GAPLESS_GROUP", "")
	t.Setenv("STREAM_NAME", "")
	return &got, &paths
}

// On AWS the CLI invokes the named function with the command, once per invocation until one is
// done, and prints each answer; a refusal is a function error whose message is printed, exit 1.
func TestRedriveInvokesTheDeployedFunction(t *testing.T) {
	answer := func(n int, c reconcile.Command) any {
		return reconcile.CommandResponse{Gapless: reconcile.CommandResult{Version: 1, Command: "redrive", Group: "orders", Stream: "orders", OnPark: "hold-key",
			Done: n == 2, Redrive: &reconcile.RedriveResult{Received: 2, Processed: 2, Events: []reconcile.CommandEventLine{
				{MessageID: "m", RecordID: "shardId-000000000000:1:0\x1b[2J", Outcome: "processed", Attempts: 1}}}}}
	}
	got, paths := fakeLambda(t, answer)
	stdout, stderr, code := gapless(t, "redrive", "--aws", "--json", "--reconciler-function", "gapless-Reconciler", "--max-messages", "10", "--group", "orders")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if len(*got) != 2 || (*paths)[0] != "POST /2015-03-31/functions/gapless-Reconciler/invocations" {
		t.Fatalf("invocations %+v at %v, want two", *got, *paths)
	}
	for i, c := range *got {
		if c.Version != 1 || c.Command != "redrive" || c.Group != "orders" || c.Redrive == nil || c.Redrive.VisibilityTimeoutSeconds != 120 {
			t.Errorf("command %d: %+v", i, c)
		}
	}
	if (*got)[0].Redrive.MaxMessages != 10 || (*got)[1].Redrive.MaxMessages != 8 {
		t.Errorf("max messages %d then %d, want 10 then what is left, 8", (*got)[0].Redrive.MaxMessages, (*got)[1].Redrive.MaxMessages)
	}
	if r := decodeJSON[redriveJSON](t, stdout); r.Received != 4 || r.Processed != 4 {
		t.Errorf("summary %+v, want both invocations summed", r)
	}
	if !strings.Contains(stderr, `redrive shardId-000000000000:1:0\x1b[2J: processed after 1 attempt(s)`) || strings.Contains(stderr, "\x1b") {
		t.Errorf("progress lines (message data escaped):\n%q", stderr)
	}
	if !strings.Contains(stderr, "invocation 1 of function gapless-Reconciler (group orders, stream orders, ON_PARK=hold-key): 2 messages, 2 processed, 0 already done, 0 parked again, 0 left; out of time") {
		t.Errorf("no line for the first invocation:\n%s", stderr)
	}

	fakeLambda(t, func(int, reconcile.Command) any {
		return `reconcile: command refused: the command is for group "orders" on stream ""; this function is group "billing" on stream "billing"`
	})
	_, stderr, code = gapless(t, "replay", "--aws", "--reconciler-function", "gapless-Reconciler", "--group", "orders", "--shard", "shardId-000000000000", "--from", "1", "--to", "2")
	if code != 1 || !strings.Contains(stderr, `this function is group "billing"`) || !strings.Contains(stderr, "the reconciler function failed (Unhandled)") {
		t.Errorf("refusal: exit %d\n%s", code, stderr)
	}
}
