package bench

import (
	"testing"
	"time"
)

func TestCriticalPath(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name  string
		spans [][2]int // [start, end] in ms
		want  int
	}{
		{"none", nil, 0},
		{"one", [][2]int{{0, 10}}, 1},
		{"two in parallel", [][2]int{{0, 10}, {1, 12}}, 1},
		{"gapless: lookup beside marker, then entry beside checkpoint", [][2]int{{0, 10}, {1, 11}, {12, 20}, {13, 22}}, 2},
		{"three in a row", [][2]int{{0, 10}, {10, 20}, {21, 30}}, 3},
		{"a long call spanning two short ones in a row", [][2]int{{0, 30}, {1, 10}, {11, 20}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l callLog
			for _, s := range tc.spans {
				l.spans = append(l.spans, [2]time.Time{at(s[0]), at(s[1])})
			}
			if got := l.criticalPath(); got != tc.want {
				t.Errorf("criticalPath = %d, want %d", got, tc.want)
			}
		})
	}
}
