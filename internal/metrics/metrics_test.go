package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEmitWritesOneEMFLine(t *testing.T) {
	var buf bytes.Buffer
	at := time.UnixMilli(1_700_000_000_123)
	e := New(&buf, Namespace, []Dimension{{DimensionGroup, "orders"}}, WithClock(func() time.Time { return at }))
	if err := e.Emit(Metric{Name: "RecordsProcessed", Value: 7}, Metric{Name: "VerifiedLagSeconds", Value: 1.5, Unit: Seconds}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines, want 1: %q", n, buf.String())
	}
	// The exact EMF shape CloudWatch requires.
	var root map[string]any
	if err := json.Unmarshal(buf.Bytes(), &root); err != nil {
		t.Fatal(err)
	}
	aws, ok := root["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws object: %s", buf.String())
	}
	if ts, _ := aws["Timestamp"].(float64); int64(ts) != at.UnixMilli() {
		t.Errorf("Timestamp = %v, want %d", aws["Timestamp"], at.UnixMilli())
	}
	want := `[{"Dimensions":[["Group"]],"Metrics":[{"Name":"RecordsProcessed","Unit":"Count"},{"Name":"VerifiedLagSeconds","Unit":"Seconds"}],"Namespace":"Gapless"}]`
	got, _ := json.Marshal(aws["CloudWatchMetrics"])
	if string(got) != want {
		t.Errorf("CloudWatchMetrics =\n %s\nwant\n %s", got, want)
	}
	if root["Group"] != "orders" || root["RecordsProcessed"] != 7.0 || root["VerifiedLagSeconds"] != 1.5 {
		t.Errorf("root members wrong: %v", root)
	}

	l, err := Parse(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if l.Namespace != Namespace || l.Dimensions["Group"] != "orders" || l.Values["RecordsProcessed"] != 7 ||
		l.Units["VerifiedLagSeconds"] != Seconds || !l.Timestamp.Equal(at) {
		t.Errorf("Parse = %+v", l)
	}
}

func TestEmitRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		dims []Dimension
		ms   []Metric
	}{
		{"empty metric name", nil, []Metric{{Name: ""}}},
		{"reserved name", nil, []Metric{{Name: "_aws"}}},
		{"duplicate", nil, []Metric{{Name: "A"}, {Name: "A"}}},
		{"shadows dimension", []Dimension{{"Group", "g"}}, []Metric{{Name: "Group"}}},
		{"empty dimension name", []Dimension{{"", "g"}}, []Metric{{Name: "A"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := New(&buf, Namespace, tc.dims).Emit(tc.ms...)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %q on error", buf.String())
			}
		})
	}
}

func TestEmitNothing(t *testing.T) {
	var buf bytes.Buffer
	if err := New(&buf, Namespace, nil).Emit(); err != nil || buf.Len() != 0 {
		t.Fatalf("Emit() = %v, wrote %q", err, buf.String())
	}
}

func TestConcurrentEmitKeepsLinesWhole(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, Namespace, []Dimension{{DimensionGroup, "g"}})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := e.Emit(Metric{Name: "N", Value: float64(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines, want 50", len(lines))
	}
	seen := map[float64]bool{}
	for _, ln := range lines {
		l, err := Parse([]byte(ln))
		if err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		seen[l.Values["N"]] = true
	}
	if len(seen) != 50 {
		t.Errorf("%d distinct values, want 50", len(seen))
	}
}
