package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// dynamoCall matches a DynamoDB client call in Go source (client.Op(ctx, ...)).
var dynamoCall = regexp.MustCompile(`\.(GetItem|PutItem|UpdateItem|DeleteItem|Query|Scan|BatchGetItem|BatchWriteItem|TransactWriteItems|TransactGetItems)\(ctx\b`)

// operatorOnly are calls in packages the functions link that only the operator CLI makes, with
// the operator's credentials: the file they stand in and the function that makes them, which no
// other file the functions link may call.
var operatorOnly = map[string]struct{ file, fn string }{
	// gapless status lists held keys with a bounded Scan (dedupe.ListHolds).
	"dynamodb:Scan": {"github.com/gapless-dev/gapless/internal/dedupe/hold_list.go", "ListHolds("},
}

// TestEveryDynamoDBCallIsGranted reads the source of every gapless package the deployed
// functions link and checks that each DynamoDB operation it calls is in the state grant
// (stateRW, which TestIAMLeastPrivilege ties to template.yaml): a call the role does not allow
// fails with AccessDenied only on AWS, never on the local stack. (It found marker Unmark's
// DeleteItem, which no role granted: on AWS every released marker would have stayed behind.)
func TestEveryDynamoDBCallIsGranted(t *testing.T) {
	used := map[string][]string{} // action -> files
	for _, pkg := range []string{"./functions/consumer", "./functions/reconciler"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", "lambda.norpc",
			"-f", `{{if not .Standard}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`, pkg)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.SplitN(line, "|", 3)
			if len(f) != 3 || !strings.HasPrefix(f[0], "github.com/gapless-dev/gapless") {
				continue
			}
			for _, name := range strings.Split(f[2], ",") {
				src, err := os.ReadFile(filepath.Join(f[1], name))
				if err != nil {
					t.Fatal(err)
				}
				file := f[0] + "/" + name
				for _, m := range dynamoCall.FindAllStringSubmatch(string(src), -1) {
					action := "dynamodb:" + m[1]
					if op, ok := operatorOnly[action]; ok && op.file == file {
						continue
					}
					used[action] = append(used[action], file)
				}
				for action, op := range operatorOnly {
					if file != op.file && strings.Contains(string(src), op.fn) {
						t.Errorf("%s calls %s, whose %s only the operator CLI may make (neither role grants it)", file, op.fn, action)
					}
				}
			}
		}
	}
	if len(used) < 4 {
		t.Fatalf("found only %v DynamoDB operations in the functions' packages", used)
	}
	for action, files := range used {
		if !slices.Contains(stateRW, action) {
			t.Errorf("%s is called (%s) but neither role grants it", action, strings.Join(slices.Compact(slices.Sorted(slices.Values(files))), ", "))
		}
	}
}
