package demo

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// progress is the display on stderr: phase lines, and a status line rewritten in place on a
// terminal (printed every 5 seconds otherwise, so logs of CI runs stay readable).
type progress struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	width     func() int // the terminal's columns, read at every status line (it may be resized)
	pending   bool       // a status line is on screen without its newline
	lastPrint time.Time
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	// Off a terminal a status line is a log line of its own: no width to fit.
	p := &progress{w: w, tty: tty, width: func() int { return 1 << 20 }}
	if f, ok := w.(*os.File); ok && tty {
		p.width = func() int { return columns(os.Getenv("COLUMNS"), ttyColumns(f)) }
	}
	return p
}

// columns is the width status lines must fit.
func (p *progress) columns() int {
	if p.width == nil {
		return defaultColumns
	}
	return p.width()
}

// defaultColumns is the width assumed when neither $COLUMNS nor the terminal tell.
const defaultColumns = 80

// columns is the status line's width: $COLUMNS when it is a number, else the terminal's, else
// defaultColumns.
func columns(env string, tty int) int {
	if n, err := strconv.Atoi(strings.TrimSpace(env)); err == nil && n > 0 {
		return n
	}
	if tty > 0 {
		return tty
	}
	return defaultColumns
}

// fit shortens line to at most width-1 columns (the last column would wrap on some terminals).
func fit(line string, width int) string {
	limit := max(width-1, 10)
	if r := []rune(line); len(r) > limit {
		return string(r[:limit-1]) + "…"
	}
	return line
}

func (p *progress) endLine() {
	if p.pending {
		fmt.Fprintln(p.w)
		p.pending = false
	}
}

func (p *progress) phase(who, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	fmt.Fprintf(p.w, "== %s: %s\n", who, msg)
}

func (p *progress) status(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		line = fit(line, p.columns())
		// \r and erase to the end of the line: no padding that could wrap a narrow terminal.
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.pending = true
		return
	}
	if time.Since(p.lastPrint) >= 5*time.Second {
		fmt.Fprintln(p.w, line)
		p.lastPrint = time.Now()
	}
}

func (p *progress) done(who string, r *VariantResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
	fmt.Fprintf(p.w, "== %s: produced %d, delivered %d unique (+%d duplicates), parked %d, lost %d in %.0fs\n",
		who, r.Produced, r.DeliveredUnique, r.Duplicates, r.Parked, r.Lost, r.Seconds)
}

func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLine()
}

// ticking prints msg as a phase line, then, until the returned stop is called, a status line
// with the time spent every few seconds (rewritten in place on a terminal): long silent steps
// such as the first build of the bootstraps show they are alive.
func (p *progress) ticking(msg string) (stop func()) {
	p.phase("build", msg)
	// The status lines repeat what is being built, not the phase line's explanation.
	short, _, _ := strings.Cut(msg, " (")
	start := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if !p.tty && time.Since(start) < 5*time.Second {
					// Off a terminal a status line is printed as a line of its own: not for
					// a step that may well end first (the phase line says what it is).
					continue
				}
				p.status(fmt.Sprintf("[build %4ds] %s", int(time.Since(start).Seconds()), short))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		p.mu.Lock()
		p.endLine()
		p.mu.Unlock()
		p.phase("build", fmt.Sprintf("done in %.0fs", time.Since(start).Seconds()))
	}
}
