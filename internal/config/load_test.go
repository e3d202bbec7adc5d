package config

import (
	"errors"
	"strings"
	"testing"
)

// TestOwnProcessMakesTargetOptional: TARGET_QUEUE_URL is required for the default Process and
// optional (read when set) for a function that brings its own; the other variables are
// required either way.
func TestOwnProcessMakesTargetOptional(t *testing.T) {
	m := base()
	delete(m, EnvTargetQueueURL)
	if _, err := LoadConsumer(env(m)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvTargetQueueURL) {
		t.Fatalf("default Process without %s: err = %v", EnvTargetQueueURL, err)
	}
	if _, err := LoadReconciler(env(m)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvTargetQueueURL) {
		t.Fatalf("reconciler, default Process without %s: err = %v", EnvTargetQueueURL, err)
	}
	if c, err := LoadConsumer(env(m), OwnProcess()); err != nil || c.TargetQueueURL != "" {
		t.Fatalf("own Process without %s: %q, %v", EnvTargetQueueURL, c.TargetQueueURL, err)
	}
	if r, err := LoadReconciler(env(base()), OwnProcess()); err != nil || r.TargetQueueURL != "http://q/target" {
		t.Fatalf("own Process with %s: %q, %v", EnvTargetQueueURL, r.TargetQueueURL, err)
	}
	delete(m, EnvDedupeTable)
	if _, err := LoadConsumer(env(m), OwnProcess()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), EnvDedupeTable) {
		t.Fatalf("own Process without %s: err = %v", EnvDedupeTable, err)
	}
}
