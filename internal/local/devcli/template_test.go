package devcli

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/localstack"
	"github.com/gapless-dev/gapless/internal/local/samtemplate"
)

// TestRepositoryTemplateWithItsEnvFile: events/env.json sets every variable the root
// template.yaml gives an intrinsic value, so invoke runs both functions in this checkout, with
// the template's timeouts (ConsumerTimeoutSeconds' default and 300 s).
func TestRepositoryTemplateWithItsEnvFile(t *testing.T) {
	root, err := localstack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	tp, err := samtemplate.Read(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := readEnvFile(filepath.Join(root, "events", "env.json"))
	if err != nil {
		t.Fatal(err)
	}
	for id := range chaosFunctions {
		f, err := lookupFunction(tp, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Env(env); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		if f.Timeout < time.Second || f.Timeout > 15*time.Minute {
			t.Errorf("%s: timeout %v", id, f.Timeout)
		}
	}
}
