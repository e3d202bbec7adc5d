package localstack

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Env returns the standard SDK endpoint variables for a set of processes. With moto running,
// DynamoDB, SQS and S3 point at it. S3 is served on the SQS port: fauxqs (SNS/SQS/S3) and
// moto_server both answer S3 requests, path-style (http://127.0.0.1:port/bucket/key), which the
// SDK uses for an IP-address endpoint.
func Env(procs []*Process) map[string]string {
	env := map[string]string{
		"AWS_REGION":            "us-east-1",
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
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	var lines []string
	for k, v := range Env(procs) {
		lines = append(lines, fmt.Sprintf("export %s=%s", k, v))
	}
	for _, p := range procs {
		lines = append(lines, fmt.Sprintf("# pid %s %d %s", p.Service, p.PID, p.LogPath))
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(stateDir, "stack.env"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

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
