package deploy

import (
	"context"
	"maps"
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

// dynamoCalls lists the DynamoDB operations the packages of the functions built from dir
// (./functions/consumer and ./functions/reconciler, -tags lambda.norpc, linux/arm64) call:
// gapless's own packages (state, the calls on the checkpoint and ledger tables) apart from the
// service's (the main module of dir, when it is not gapless: its Process). Action -> files.
func dynamoCalls(t *testing.T, dir string) (state, service map[string][]string) {
	t.Helper()
	state, service = map[string][]string{}, map[string][]string{}
	for _, pkg := range []string{"./functions/consumer", "./functions/reconciler"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-tags", "lambda.norpc",
			"-f", `{{if not .Standard}}{{.ImportPath}}|{{with .Module}}{{.Path}}|{{.Main}}{{else}}|{{end}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}`, pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("go list -deps %s in %s: %v", pkg, dir, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.SplitN(line, "|", 5)
			if len(f) != 5 {
				continue
			}
			var used map[string][]string
			switch {
			case f[1] == "github.com/gapless-dev/gapless":
				used = state
			case f[2] == "true":
				used = service
			default:
				continue // the SDK and other dependencies
			}
			for _, name := range strings.Split(f[4], ",") {
				src, err := os.ReadFile(filepath.Join(f[3], name))
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
	return state, service
}

// TestEveryDynamoDBCallIsGranted, for every SAM template of the repository, reads the source
// of every package the template's functions link and checks that each DynamoDB operation
// gapless calls is granted to both functions on both state tables, and each one the service's
// own code calls is granted to both on a table other than gapless's: a call the role does not allow fails
// with AccessDenied only on AWS, never on the local stack, whose emulators enforce no IAM. (It
// found marker Unmark's DeleteItem, which no role granted: on AWS every released marker would
// have stayed behind.)
func TestEveryDynamoDBCallIsGranted(t *testing.T) {
	t.Parallel()
	forEachTemplate(t, func(t *testing.T, path string, c *cfn) {
		state, service := dynamoCalls(t, filepath.Dir(templatePath(t, path)))
		if len(state) < 4 {
			t.Fatalf("found only %v DynamoDB operations in the functions' packages", state)
		}
		for _, fn := range lambdaFunctions {
			got := granted(c.functionStatements(fn))
			for _, action := range slices.Sorted(maps.Keys(state)) {
				for _, table := range []string{"CheckpointTable.Arn", "LedgerTable.Arn"} {
					if !slices.Contains(got[action], table) {
						t.Errorf("%s: %s is called (%s) but not granted on %s", fn, action,
							strings.Join(slices.Compact(slices.Sorted(slices.Values(state[action]))), ", "), table)
					}
				}
			}
			for _, action := range slices.Sorted(maps.Keys(service)) {
				others := slices.DeleteFunc(slices.Clone(got[action]), func(r string) bool { return r == "CheckpointTable.Arn" || r == "LedgerTable.Arn" })
				if len(others) == 0 {
					t.Errorf("%s: %s is called by the service (%s) but not granted on a table of its own", fn, action,
						strings.Join(slices.Compact(slices.Sorted(slices.Values(service[action]))), ", "))
				}
			}
		}
	})
}
