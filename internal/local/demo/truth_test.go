package demo

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The progress line fits the terminal at every width, 80 columns included, keeps the figures
// that matter when it has to shorten, and says what a quiet stretch after production waits for.
func TestStatusLineFitsTheTerminal(t *testing.T) {
	t.Parallel()
	st := statusFigures{name: "gapless", elapsed: 213 * time.Second, produced: 2500, total: 2500, invocations: 418,
		delivered: 2366, parked: 13, givenUp: 1064, gapless: true, reconcilerRuns: 65, failureMsgs: 344, verified: 2, shards: 4}
	for _, width := range []int{200, 120, 80, 60, 40} {
		line := st.line(width)
		if n := utf8.RuneCountInString(line); n >= width {
			t.Errorf("width %d: the line has %d columns: %q", width, n, line)
		}
		if width >= 80 && (!strings.Contains(line, "2366") || !strings.Contains(line, "2/4")) {
			t.Errorf("width %d: delivered or verified missing: %q", width, line)
		}
		if width >= 120 && !strings.Contains(line, "wait") {
			t.Errorf("width %d: no word of what the run waits for: %q", width, line)
		}
	}
	if w := st.waiting(); !strings.Contains(w, "reconciler") {
		t.Errorf("waiting = %q, want the reconciler named", w)
	}
	for _, c := range []struct {
		env  string
		tty  int
		want int
	}{{"", 0, 80}, {"132", 0, 132}, {"", 100, 100}, {"x", 90, 90}, {"50", 120, 50}} {
		if got := columns(c.env, c.tty); got != c.want {
			t.Errorf("columns(%q, %d) = %d, want %d", c.env, c.tty, got, c.want)
		}
	}
}

// A run cut before every record is accounted for says INCOMPLETE with the count and where the
// records are, never "lost".
func TestIncompleteRunIsNotCalledLost(t *testing.T) {
	t.Parallel()
	g := &VariantResult{Name: VariantGapless, Produced: 100, DeliveredUnique: 95, Pending: 5, Incomplete: true,
		PendingWhere: map[string]int{pendingReconciler: 3, pendingTail: 2}}
	res := &Result{Gapless: g, Variants: []string{VariantGapless}, Produced: 100, DeliveredUnique: 95, Pending: 5, Incomplete: true}
	if res.OK() {
		t.Fatal("an incomplete run is OK")
	}
	md := Markdown(res)
	if !strings.Contains(md, "gapless INCOMPLETE") || !strings.Contains(md, "5 records not yet accounted for") ||
		!strings.Contains(md, "3 "+pendingReconciler) || !strings.Contains(md, "2 "+pendingTail) {
		t.Errorf("verdict does not say INCOMPLETE with where the records are:\n%s", firstLines(md, 3))
	}
	if strings.Contains(firstLines(md, 3), "lost") && !strings.Contains(firstLines(md, 3), "none is known lost") {
		t.Errorf("an incomplete run is reported as a loss:\n%s", firstLines(md, 3))
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

// percentile is the nearest rank.
func TestPercentile(t *testing.T) {
	t.Parallel()
	var recs []SlowRecord
	for i := 1; i <= 100; i++ {
		recs = append(recs, SlowRecord{Seconds: float64(i)})
	}
	if p50, p99 := percentile(recs, 0.5), percentile(recs, 0.99); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v p99 %v, want 50 and 99", p50, p99)
	}
	if p := percentile(recs[:1], 0.99); p != 1 {
		t.Errorf("one record: p99 %v", p)
	}
}
