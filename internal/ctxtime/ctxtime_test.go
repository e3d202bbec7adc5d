package ctxtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"elapsed", context.Background(), time.Millisecond, nil},
		{"zero", context.Background(), 0, nil},
		{"negative", context.Background(), -time.Second, nil},
		{"context ended first", done, time.Hour, context.Canceled},
		{"context ended, zero wait", done, 0, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Sleep(tc.ctx, tc.d); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Sleep = %v, want %v", err, tc.want)
			}
		})
	}
}
