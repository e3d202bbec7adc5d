package demo

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A build's status line names what is built; the explanation is on the phase line only.
func TestTickingStatusLineIsShort(t *testing.T) {
	var buf lockedBuffer
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
