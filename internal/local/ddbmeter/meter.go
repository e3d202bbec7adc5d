// Package ddbmeter counts DynamoDB round trips and estimates capacity units on the client side,
// through AWS SDK middleware, so tests and benchmarks can report what a design costs:
//
//	m := ddbmeter.New()
//	client := dynamodb.NewFromConfig(cfg, m.Options())
//	... use client ...
//	s := m.Snapshot() // s.Total.Calls, s.Total.Attempts, s.Total.WriteUnits, s.Ops["Query"], ...
//
// A logical call is one client method call (PutItem, Query, ...); an attempt is one HTTP
// round trip, so SDK retries make Attempts exceed Calls. Capacity units are computed from item
// sizes with DynamoDB's published rules (package ddbsize), not read from ConsumedCapacity, because
// the local emulators do not report it faithfully; the approximations are listed on record.
package ddbmeter

import (
	"context"
	"errors"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/gapless-dev/gapless/internal/ddbsize"
)

// OpStats are the counters of one operation (or of all of them, in Snapshot.Total).
type OpStats struct {
	Calls        int64   // logical operations: one per client method call
	Attempts     int64   // HTTP round trips, SDK retries included
	Errors       int64   // logical operations that returned an error
	ItemsRead    int64   // items returned by reads
	ItemsWritten int64   // items written (conditional failures included: they cost units too)
	BytesRead    int64   // DynamoDB size of the items returned
	BytesWritten int64   // DynamoDB size of the items written
	ReadUnits    float64 // estimated read capacity units
	WriteUnits   float64 // estimated write capacity units
}

func (s *OpStats) add(o OpStats) {
	s.Calls += o.Calls
	s.Attempts += o.Attempts
	s.Errors += o.Errors
	s.ItemsRead += o.ItemsRead
	s.ItemsWritten += o.ItemsWritten
	s.BytesRead += o.BytesRead
	s.BytesWritten += o.BytesWritten
	s.ReadUnits += o.ReadUnits
	s.WriteUnits += o.WriteUnits
}

// Snapshot is a copy of the counters at one moment.
type Snapshot struct {
	Ops   map[string]OpStats // by operation name ("PutItem", "Query", ...)
	Total OpStats
}

// Sub returns s - earlier, for measuring a span between two snapshots.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	out := Snapshot{Ops: make(map[string]OpStats, len(s.Ops))}
	neg := func(o OpStats) OpStats {
		return OpStats{-o.Calls, -o.Attempts, -o.Errors, -o.ItemsRead, -o.ItemsWritten,
			-o.BytesRead, -o.BytesWritten, -o.ReadUnits, -o.WriteUnits}
	}
	for name, o := range s.Ops {
		v := o
		v.add(neg(earlier.Ops[name]))
		out.Ops[name] = v
	}
	out.Total = s.Total
	out.Total.add(neg(earlier.Total))
	return out
}

// Meter accumulates counters from every client it is attached to. It is safe for concurrent
// use; the zero value is not usable, call New.
type Meter struct {
	mu  sync.Mutex
	ops map[string]*OpStats
}

// New returns an empty meter.
func New() *Meter { return &Meter{ops: map[string]*OpStats{}} }

// Options returns a client option that adds the meter's middleware, for
// dynamodb.NewFromConfig(cfg, m.Options()) or per call.
func (m *Meter) Options() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, m.addMiddleware)
	}
}

// APIOption is the meter's middleware for an aws.Config's APIOptions, so every client built
// from the config (one a library builds itself included) is metered; the calls of other
// services through the same config are not counted.
func (m *Meter) APIOption(stack *middleware.Stack) error {
	return m.addMiddleware(stack)
}

func (m *Meter) addMiddleware(stack *middleware.Stack) error {
	// Initialize runs once per logical call, before the retry loop, and sees the typed input
	// and output.
	if err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("ddbmeter.Call",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if awsmiddleware.GetServiceID(ctx) != dynamodb.ServiceID {
				return out, md, err
			}
			m.record(middleware.GetOperationName(ctx), in.Parameters, out.Result, err)
			return out, md, err
		}), middleware.After); err != nil {
		return err
	}
	// Finalize after the SDK's retry middleware runs once per HTTP attempt.
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("ddbmeter.Attempt",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if awsmiddleware.GetServiceID(ctx) != dynamodb.ServiceID {
				return next.HandleFinalize(ctx, in)
			}
			m.mu.Lock()
			m.stats(middleware.GetOperationName(ctx)).Attempts++
			m.mu.Unlock()
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

func (m *Meter) stats(op string) *OpStats {
	s, ok := m.ops[op]
	if !ok {
		s = &OpStats{}
		m.ops[op] = s
	}
	return s
}

func (m *Meter) record(op string, input, output any, err error) {
	d := Usage(input, output, err)
	d.Calls = 1
	if err != nil {
		d.Errors = 1
	}
	m.mu.Lock()
	m.stats(op).add(d)
	m.mu.Unlock()
}

// Snapshot copies the counters.
func (m *Meter) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{Ops: make(map[string]OpStats, len(m.ops))}
	for name, o := range m.ops {
		s.Ops[name] = *o
		s.Total.add(*o)
	}
	return s
}

// Reset zeroes every counter.
func (m *Meter) Reset() {
	m.mu.Lock()
	m.ops = map[string]*OpStats{}
	m.mu.Unlock()
}

// Usage estimates the items, bytes and capacity units of one logical call from its typed
// input and output (nil output when the call failed). Only the item and unit fields of the
// result are set. Approximations, all on the side of what the client can see:
//   - Query and Scan charge for the items read before a FilterExpression discards them; the
//     client only sees the items returned, so filtered reads are undercounted.
//   - UpdateItem charges for the larger of the item before and after the update; the client
//     sees neither, so the estimate is the key plus every expression attribute value and name
//     (or the returned attributes, when ReturnValues asked for them and they are larger).
//   - DeleteItem charges for the deleted item; estimated as the key unless ALL_OLD returned it.
//   - A conditional write whose condition fails still consumes write units (AWS docs, "DynamoDB
//     read and write operations"), so it is counted; other failed calls are not.
//   - An SDK retry after a lost response may have written twice; only one write is counted.
func Usage(input, output any, err error) OpStats {
	var u OpStats
	var ccf *types.ConditionalCheckFailedException
	condFailed := errors.As(err, &ccf)
	if err != nil && !condFailed {
		return u
	}
	write := func(size int) {
		u.ItemsWritten++
		u.BytesWritten += int64(size)
		u.WriteUnits += ddbsize.WriteUnits(size)
	}
	switch in := input.(type) {
	case *dynamodb.PutItemInput:
		write(ddbsize.ItemSize(in.Item))
	case *dynamodb.UpdateItemInput:
		size := ddbsize.ItemSize(in.Key)
		for _, v := range in.ExpressionAttributeValues {
			size += ddbsize.ValueSize(v)
		}
		for _, name := range in.ExpressionAttributeNames {
			size += len(name)
		}
		if out, ok := output.(*dynamodb.UpdateItemOutput); ok && out != nil {
			size = max(size, ddbsize.ItemSize(out.Attributes))
		}
		write(size)
	case *dynamodb.DeleteItemInput:
		size := ddbsize.ItemSize(in.Key)
		if out, ok := output.(*dynamodb.DeleteItemOutput); ok && out != nil {
			size = max(size, ddbsize.ItemSize(out.Attributes))
		}
		write(size)
	case *dynamodb.BatchWriteItemInput:
		out, _ := output.(*dynamodb.BatchWriteItemOutput)
		for table, reqs := range in.RequestItems {
			for _, r := range reqs {
				if n, ok := writeRequestSize(r); ok {
					write(n)
				}
			}
			if out == nil {
				continue
			}
			for _, r := range out.UnprocessedItems[table] { // not written: take them back
				if n, ok := writeRequestSize(r); ok {
					u.ItemsWritten--
					u.BytesWritten -= int64(n)
					u.WriteUnits -= ddbsize.WriteUnits(n)
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, ti := range in.TransactItems {
			var size int
			switch {
			case ti.Put != nil:
				size = ddbsize.ItemSize(ti.Put.Item)
			case ti.Update != nil:
				size = ddbsize.ItemSize(ti.Update.Key)
				for _, v := range ti.Update.ExpressionAttributeValues {
					size += ddbsize.ValueSize(v)
				}
			case ti.Delete != nil:
				size = ddbsize.ItemSize(ti.Delete.Key)
			case ti.ConditionCheck != nil:
				size = ddbsize.ItemSize(ti.ConditionCheck.Key)
			}
			write(size)
			u.WriteUnits += ddbsize.WriteUnits(size) // transactional writes cost two units per KB
		}
	case *dynamodb.GetItemInput:
		size := 0
		if out, ok := output.(*dynamodb.GetItemOutput); ok && out != nil && out.Item != nil {
			size = ddbsize.ItemSize(out.Item)
			u.ItemsRead++
		}
		u.BytesRead += int64(size)
		u.ReadUnits += ddbsize.ReadUnits(size, in.ConsistentRead != nil && *in.ConsistentRead)
	case *dynamodb.QueryInput:
		out, _ := output.(*dynamodb.QueryOutput)
		u.addRead(itemsOf(out), in.ConsistentRead != nil && *in.ConsistentRead)
	case *dynamodb.ScanInput:
		out, _ := output.(*dynamodb.ScanOutput)
		var items []map[string]types.AttributeValue
		if out != nil {
			items = out.Items
		}
		u.addRead(items, in.ConsistentRead != nil && *in.ConsistentRead)
	case *dynamodb.BatchGetItemInput:
		out, _ := output.(*dynamodb.BatchGetItemOutput)
		if out == nil {
			break
		}
		// Each item is its own GetItem: rounded up to 4 KB separately.
		for table, items := range out.Responses {
			consistent := false
			if ka, ok := in.RequestItems[table]; ok && ka.ConsistentRead != nil {
				consistent = *ka.ConsistentRead
			}
			for _, it := range items {
				size := ddbsize.ItemSize(it)
				u.ItemsRead++
				u.BytesRead += int64(size)
				u.ReadUnits += ddbsize.ReadUnits(size, consistent)
			}
		}
	case *dynamodb.TransactGetItemsInput:
		out, _ := output.(*dynamodb.TransactGetItemsOutput)
		if out == nil {
			break
		}
		for _, r := range out.Responses {
			size := ddbsize.ItemSize(r.Item)
			u.ItemsRead++
			u.BytesRead += int64(size)
			u.ReadUnits += 2 * ddbsize.ReadUnits(size, true)
		}
	}
	return u
}

func itemsOf(out *dynamodb.QueryOutput) []map[string]types.AttributeValue {
	if out == nil {
		return nil
	}
	return out.Items
}

// addRead charges one Query or Scan page: the sizes of all items summed, then rounded up to
// 4 KB once for the request.
func (u *OpStats) addRead(items []map[string]types.AttributeValue, consistent bool) {
	size := 0
	for _, it := range items {
		size += ddbsize.ItemSize(it)
	}
	u.ItemsRead += int64(len(items))
	u.BytesRead += int64(size)
	u.ReadUnits += ddbsize.ReadUnits(size, consistent)
}

func writeRequestSize(r types.WriteRequest) (int, bool) {
	switch {
	case r.PutRequest != nil:
		return ddbsize.ItemSize(r.PutRequest.Item), true
	case r.DeleteRequest != nil:
		return ddbsize.ItemSize(r.DeleteRequest.Key), true
	}
	return 0, false
}
