package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// pathKey carries an invocation's *callLog in its context.
type pathKey struct{}

// callLog collects the [start, end] of every DynamoDB call one invocation makes. With a floor,
// every call lasts at least that long (the response is held back), as in a region where each
// round trip costs that much.
type callLog struct {
	floor time.Duration
	mu    sync.Mutex
	spans [][2]time.Time
}

func withCallLog(ctx context.Context, l *callLog) context.Context {
	return context.WithValue(ctx, pathKey{}, l)
}

// pathOptions adds a middleware timing each logical DynamoDB call (retries included) into the
// calling invocation's callLog, when its context has one.
func pathOptions() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bench.CriticalPath",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					l, _ := ctx.Value(pathKey{}).(*callLog)
					start := time.Now()
					out, md, err := next.HandleInitialize(ctx, in)
					if l != nil && l.floor > 0 {
						time.Sleep(time.Until(start.Add(l.floor)))
					}
					if l != nil {
						l.mu.Lock()
						l.spans = append(l.spans, [2]time.Time{start, time.Now()})
						l.mu.Unlock()
					}
					return out, md, err
				}), middleware.Before)
		})
	}
}

// criticalPath is the number of DynamoDB calls the invocation made one after another: the
// longest chain of calls each starting after the previous one ended (calls that overlap, like
// the in-flight marker written beside the ledger query, count once). The largest set of
// pairwise non-overlapping intervals is found by taking them in order of end time.
//
// Time overlap stands in for causality, so it is read from probe invocations with a latency
// floor (pathFloor): against a local emulator a call takes a millisecond or two, less than the
// CPU work between issuing two parallel calls (encoding a 1,000-record ledger entry under -race
// on a loaded machine), and the second would then start after the first ended and count as
// sequential. With every call held to pathFloor, only work longer than the floor can do that.
func (l *callLog) criticalPath() int {
	l.mu.Lock()
	spans := slices.Clone(l.spans)
	l.mu.Unlock()
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[1].Compare(b[1]) })
	n := 0
	var end time.Time
	for _, s := range spans {
		if n == 0 || !s[0].Before(end) {
			n++
			end = s[1]
		}
	}
	return n
}

// pathFloor is the latency every DynamoDB call of a critical-path probe is held to, and
// pathProbes the number of probe batches per case (the median is reported).
const (
	pathFloor  = 100 * time.Millisecond
	pathProbes = 3
)
