package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorCommandsGoToAWSUnlessToldLocal: status (as replay, redrive and doctor --live)
// talks to AWS by default and reaches a local stack only with --local or --state. Before, a
// .local/stack.env in the checkout silently sent it to the local stack unless --aws was given,
// and without credentials it printed a raw error of the instance metadata service.
func TestOperatorCommandsGoToAWSUnlessToldLocal(t *testing.T) {
	for _, k := range []string{"AWS_ENDPOINT_URL_KINESIS", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // no instance role: the shell has no credentials
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_REGION", "us-east-1")
	names := []string{"--group", "g", "--stream", "s", "--checkpoint-table", "c", "--dedupe-table", "d"}

	_, stderr, code := gapless(t, append([]string{"status"}, names...)...)
	if code != 1 || !strings.Contains(stderr, "no AWS credentials") || !strings.Contains(stderr, "--local") {
		t.Errorf("status without credentials: exit %d, stderr %q: want what to do, naming --local", code, stderr)
	}

	empty := t.TempDir()
	_, stderr, code = gapless(t, append([]string{"status", "--state", empty}, names...)...)
	if code != 1 || !strings.Contains(stderr, "no local stack recorded") {
		t.Errorf("--state of a directory without stack.env: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = gapless(t, append([]string{"status", "--local", "--aws"}, names...)...)
	if code != 2 || !strings.Contains(stderr, "--local (or --state) and --aws") {
		t.Errorf("--local --aws: exit %d, stderr %q", code, stderr)
	}
}
