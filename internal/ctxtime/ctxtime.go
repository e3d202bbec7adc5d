// Package ctxtime waits for a duration or a context, whichever ends first: the one wait the
// reconciler's redrive, the local event-source mapping and the demo share.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends. It returns ctx's error when ctx ended first (at once when
// ctx is already done, even for d <= 0), nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
