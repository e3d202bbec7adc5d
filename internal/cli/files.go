package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// modulePath is the module of the gapless checkout.
const modulePath = "github.com/gapless-dev/gapless"

// findRoot is the directory of the go.mod of the gapless checkout holding the working directory:
// its template.yaml and .local are the defaults inside the checkout.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module"); ok && strings.Trim(strings.TrimSpace(rest), `"`) == modulePath {
					return dir, nil
				}
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

// readEnvSection reads one function's variables from a `sam local invoke --env-vars` file.
func readEnvSection(file, function string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	var all map[string]map[string]string
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, fmt.Errorf("env file %s: %w", file, err)
	}
	sec, ok := all[function]
	if !ok {
		return nil, fmt.Errorf("env file %s has no %s section", file, function)
	}
	return sec, nil
}

// readStackEnv reads the `export K=V` lines `gapless-dev up` writes to stack.env.
func readStackEnv(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no local stack: %s does not exist (start one with `make up` or `gapless-dev up`, or pass --state)", file)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" || env["AWS_ENDPOINT_URL_SQS"] == "" {
		return nil, fmt.Errorf("%s names no DynamoDB or SQS endpoint", file)
	}
	return env, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// relToWD is path relative to the working directory when it lies under it (as the README
// spells it: .local/unset.env), else path.
func relToWD(path string) string {
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return path
}
