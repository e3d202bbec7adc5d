package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gapless-dev/gapless"
	"github.com/gapless-dev/gapless/internal/local/devcli"
)

// scaffoldTemplate names the template of a service `gapless-dev new` writes among the
// repository's (forEachTemplate, serviceGrants): the scaffold is held to every check an example
// is, on its rendered output.
const scaffoldTemplate = "(gapless-dev new)/template.yaml"

// The scaffold is rendered once per test binary, into a directory outside the repository that
// TestMain removes.
var scaffold struct {
	once sync.Once
	base string // the temporary directory holding the service
	dir  string // the service
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if scaffold.base != "" {
		os.RemoveAll(scaffold.base)
	}
	os.Exit(code)
}

// scaffoldDir renders the service `gapless-dev new` writes (built against this checkout, go.sum
// by go mod tidy) and returns its directory.
func scaffoldDir(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	scaffold.once.Do(func() {
		if scaffold.base, scaffold.err = os.MkdirTemp("", "gapless-new-"); scaffold.err != nil {
			return
		}
		scaffold.dir = filepath.Join(scaffold.base, "scaffolded")
		if scaffold.err = devcli.WriteScaffold(scaffold.dir, devcli.ScaffoldOptions{
			Module: "example.com/scaffolded", Name: "scaffolded", GaplessVersion: gapless.Version, GaplessDir: root,
		}); scaffold.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir = scaffold.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			scaffold.err = fmt.Errorf("go mod tidy in %s: %v\n%s", scaffold.dir, err, out)
		}
	})
	if scaffold.err != nil {
		t.Fatalf("render the scaffold: %v", scaffold.err)
	}
	return scaffold.dir
}

// templatePath is the absolute path of a template forEachTemplate names.
func templatePath(t *testing.T, name string) string {
	t.Helper()
	if name == scaffoldTemplate {
		return filepath.Join(scaffoldDir(t), "template.yaml")
	}
	return filepath.Join(repoRoot(t), name)
}

// exampleModules are the examples' directories and the scaffold's, absolute.
func exampleModules(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, ex := range examples {
		dirs = append(dirs, filepath.Join(repoRoot(t), ex))
	}
	return append(dirs, scaffoldDir(t))
}

// TestScaffoldOutputsAndAlarms: the scaffold's template names both functions in its outputs
// (gapless doctor --live and gapless redrive --reconciler-function read them) and alarms on
// the parked queue, as gapless's template does.
func TestScaffoldOutputsAndAlarms(t *testing.T) {
	t.Parallel()
	c := loadCFN(t, templatePath(t, scaffoldTemplate))
	for out, target := range map[string]string{"ConsumerFunctionName": "ConsumerFunction", "ReconcilerFunctionName": "ReconcilerFunction", "ParkedQueueUrl": "ParkedQueue"} {
		v := get(c.root, "Outputs", out, "Value")
		if v == nil {
			t.Errorf("no output %s", out)
			continue
		}
		if got := targets(v); !slices.Equal(got, []string{target}) {
			t.Errorf("output %s: %v, want !Ref %s", out, got, target)
		}
	}
	found := false
	for _, id := range c.resourcesOfType("AWS::CloudWatch::Alarm") {
		dims := c.prop(id, "Dimensions")
		if scalar(c.prop(id, "Namespace")) == "AWS/SQS" && scalar(c.prop(id, "MetricName")) == "ApproximateNumberOfMessagesVisible" &&
			dims != nil && len(dims.Content) == 1 && get(dims.Content[0], "Value") != nil && slices.Equal(targets(get(dims.Content[0], "Value")), []string{"ParkedQueue.QueueName"}) {
			found = true
		}
	}
	if !found {
		t.Error("no alarm on the parked queue's ApproximateNumberOfMessagesVisible")
	}
}
