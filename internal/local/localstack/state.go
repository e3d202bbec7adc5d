package localstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env returns the standard SDK endpoint variables for a set of processes. With moto running,
// DynamoDB, SQS and S3 point at it. S3 is served on the SQS port: fauxqs (SNS/SQS/S3) and
// moto_server both answer S3 requests, path-style (http://127.0.0.1:port/bucket/key), which the
// SDK uses for an IP-address endpoint.
func Env(procs []*Process) map[string]string {
	env := map[string]string{
		"AWS_REGION":            "us-east-1",
		"AWS_DEFAULT_REGION":    "us-east-1", // the aws CLI reads this one, the SDKs AWS_REGION
		"AWS_ACCESS_KEY_ID":     "local",
		"AWS_SECRET_ACCESS_KEY": "local",
	}
	for _, p := range procs {
		switch p.Service {
		case Kinesis:
			env["AWS_ENDPOINT_URL_KINESIS"] = p.Endpoint
		case DynamoDB:
			env["AWS_ENDPOINT_URL_DYNAMODB"] = p.Endpoint
		case SQS:
			env["AWS_ENDPOINT_URL_SQS"] = p.Endpoint
			env["AWS_ENDPOINT_URL_S3"] = p.Endpoint
		case Moto:
			env["AWS_ENDPOINT_URL_DYNAMODB"] = p.Endpoint
			env["AWS_ENDPOINT_URL_SQS"] = p.Endpoint
			env["AWS_ENDPOINT_URL_S3"] = p.Endpoint
		}
	}
	return env
}

// WriteState records PIDs and endpoints of a detached stack in <stateDir>/stack.env, a file
// that shells can source (`. .local/stack.env`) and StopFromState reads.
func WriteState(stateDir string, procs []*Process) error {
	return WriteStateWith(stateDir, procs, nil)
}

// WriteStateWith is WriteState with more variables exported (the functions' variables naming
// the stack's stream, tables and queues: Ready.Vars).
func WriteStateWith(stateDir string, procs []*Process, vars map[string]string) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	var lines, names []string
	for k, v := range Env(procs) {
		lines, names = append(lines, fmt.Sprintf("export %s=%s", k, v)), append(names, k)
	}
	for k, v := range vars {
		lines, names = append(lines, fmt.Sprintf("export %s=%s", k, v)), append(names, k)
	}
	for _, p := range procs {
		lines = append(lines, fmt.Sprintf("# pid %s %d %s", p.Service, p.PID, p.LogPath))
	}
	sort.Strings(lines)
	sort.Strings(names)
	unset := "# `. " + UnsetFile + "` leaves the local stack's environment: it unsets every variable\n" +
		"# stack.env exports (values the shell had before are not restored), so a later aws or sam\n" +
		"# command goes to AWS, not to 127.0.0.1.\n" +
		"unset " + strings.Join(names, " ") + "\n"
	if err := os.WriteFile(filepath.Join(stateDir, UnsetFile), []byte(unset), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, "stack.env"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// UnsetFile is the companion of stack.env that unsets what it exports; it stays after the stack
// is stopped, for the shells that sourced stack.env.
const UnsetFile = "unset.env"

// StopFromState stops the processes recorded by WriteState and removes the state file.
// It returns the services it stopped; a missing state file is not an error.
func StopFromState(stateDir string) ([]string, error) {
	path := filepath.Join(stateDir, "stack.env")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var stopped []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 4 && fields[0] == "#" && fields[1] == "pid" {
			pid, err := strconv.Atoi(fields[3])
			if err != nil {
				continue
			}
			stopPID(pid)
			stopped = append(stopped, fmt.Sprintf("%s (pid %d)", fields[2], pid))
		}
	}
	f.Close()
	if err := sc.Err(); err != nil {
		return stopped, err
	}
	return stopped, os.Remove(path)
}

// Recorded is a stack as stack.env records it.
type Recorded struct {
	Env   map[string]string // the exported variables
	Procs []*Process        // service, PID and log of each process (no Endpoint, no cmd)
}

// ReadState reads <stateDir>/stack.env; ok is false when there is none.
func ReadState(stateDir string) (rec Recorded, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(stateDir, "stack.env"))
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	rec.Env = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if kv, found := strings.CutPrefix(strings.TrimSpace(line), "export "); found {
			if k, v, found := strings.Cut(kv, "="); found {
				rec.Env[k] = v
			}
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 4 && fields[0] == "#" && fields[1] == "pid" {
			pid, err := strconv.Atoi(fields[3])
			if err != nil {
				continue
			}
			p := &Process{Service: Service(fields[2]), PID: pid}
			if len(fields) >= 5 {
				p.LogPath = fields[4]
			}
			rec.Procs = append(rec.Procs, p)
		}
	}
	return rec, true, nil
}

// Running reports whether every recorded process is alive and every recorded endpoint answers
// HTTP; dead lists the services that are not (a PID may have been reused, so both are checked).
func (r Recorded) Running(ctx context.Context) (dead []string) {
	for _, p := range r.Procs {
		if p.PID <= 0 || syscall.Kill(p.PID, 0) != nil {
			dead = append(dead, fmt.Sprintf("%s (pid %d)", p.Service, p.PID))
		}
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for _, k := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"} {
		ep := r.Env[k]
		if ep == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/", nil)
		if err != nil {
			dead = append(dead, ep)
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			dead = append(dead, ep)
			continue
		}
		resp.Body.Close()
	}
	return dead
}

// Services are the recorded services, in order.
func (r Recorded) Services() []Service {
	out := make([]Service, 0, len(r.Procs))
	for _, p := range r.Procs {
		out = append(out, p.Service)
	}
	return out
}
