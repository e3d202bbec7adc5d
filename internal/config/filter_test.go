package config

import (
	"errors"
	"strings"
	"testing"
)

func TestRecordFilter(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		wantErr bool
		active  bool
	}{
		{"unset", "", false, false},
		{"blank", "   ", false, false},
		{"pattern", `{"data": {"kind": ["order"]}}`, false, true},
		{"not json", `{"data":`, true, false},
		{"not data", `{"partitionKey": ["1"]}`, true, false},
		{"unsupported operator", `{"data": {"a": [{"wildcard": "*"}]}}`, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			m[EnvRecordFilter] = tt.value
			c, cerr := LoadConsumer(env(m))
			r, rerr := LoadReconciler(env(m))
			for fn, err := range map[string]error{"consumer": cerr, "reconciler": rerr} {
				if tt.wantErr {
					if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvRecordFilter) {
						t.Errorf("%s: error %v, want ErrInvalid naming %s", fn, err, EnvRecordFilter)
					}
				} else if err != nil {
					t.Errorf("%s: %v", fn, err)
				}
			}
			if tt.wantErr {
				return
			}
			if c.RecordFilter.Active() != tt.active || r.RecordFilter.Active() != tt.active {
				t.Fatalf("active = %v/%v, want %v", c.RecordFilter.Active(), r.RecordFilter.Active(), tt.active)
			}
			if tt.active && (c.RecordFilter.Keep([]byte(`{"kind":"noise"}`)) || !r.RecordFilter.Keep([]byte(`{"kind":"order"}`))) {
				t.Fatal("the parsed filter does not evaluate the pattern")
			}
		})
	}
}
