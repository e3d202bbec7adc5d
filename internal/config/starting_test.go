package config

import (
	"errors"
	"strings"
	"testing"
)

// TestLoadReconcilerStartingPosition: STARTING_POSITION takes what template.yaml's
// StartingPosition allows (empty: TRIM_HORIZON); anything else fails naming it.
func TestLoadReconcilerStartingPosition(t *testing.T) {
	tests := []struct {
		value, want string
		wantErr     bool
	}{
		{"", StartingTrimHorizon, false},
		{"TRIM_HORIZON", StartingTrimHorizon, false},
		{"LATEST", StartingLatest, false},
		{" LATEST ", StartingLatest, false},
		{"latest", "", true},
		{"AT_TIMESTAMP", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			m := base()
			m[EnvStartingPosition] = tt.value
			r, err := LoadReconciler(env(m))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvStartingPosition) {
					t.Fatalf("err %v, want one naming %s", err, EnvStartingPosition)
				}
				return
			}
			if err != nil || r.StartingPosition != tt.want {
				t.Fatalf("StartingPosition %q, %v; want %q", r.StartingPosition, err, tt.want)
			}
		})
	}
}
