// Command fn is a tiny Lambda used by the rie tests: it echoes its payload, or fails in the
// way the payload's "mode" asks for.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

type request struct {
	Mode    string `json:"mode"`
	SleepMS int    `json:"sleepMs"`
	Env     string `json:"env"`
}

func handle(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var req request
	_ = json.Unmarshal(raw, &req) // non-object payloads are echoed
	switch req.Mode {
	case "error":
		return nil, errors.New("boom")
	case "panic":
		panic("kaboom")
	case "sleep":
		time.Sleep(time.Duration(req.SleepMS) * time.Millisecond)
	case "env":
		return json.Marshal(os.Getenv(req.Env))
	case "exit":
		os.Exit(3) // the runtime process dies mid-invocation
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "pid":
		return json.Marshal(os.Getpid())
	case "deadline":
		dl, _ := ctx.Deadline()
		return json.Marshal(time.Until(dl).Milliseconds())
	}
	return raw, nil
}

func main() { lambda.Start(handle) }
