package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/syncbuf"
)

// A build's status line names what is built; the explanation is on the phase line only.
func TestTickingStatusLineIsShort(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	p := &progress{w: &buf, tty: true}
	stop := p.ticking("building functions/consumer (go build; the first build takes a minute or two)")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), "[build") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	out := buf.String()
	if strings.Count(out, "the first build takes a minute or two") != 1 {
		t.Errorf("the explanation is not on the phase line alone:\n%q", out)
	}
	if !strings.Contains(out, "] building functions/consumer") {
		t.Errorf("no status line naming the build:\n%q", out)
	}
}
