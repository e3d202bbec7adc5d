// Package metrics writes CloudWatch Embedded Metric Format (EMF) lines: one JSON object per line
// on the function's stdout, which CloudWatch Logs turns into metrics without any API call.
//
// Format (CloudWatch "Specification: Embedded metric format"): a root object holding an "_aws"
// member with Timestamp (epoch milliseconds) and CloudWatchMetrics, a list of directives
// {Namespace, Dimensions: [[dimension names...]], Metrics: [{Name, Unit}]}; each dimension and
// each metric value is a root member named like the dimension or metric.
package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Namespace is gapless's CloudWatch namespace.
const Namespace = "Gapless"

// DimensionGroup is the dimension every gapless metric carries: the consumer group.
const DimensionGroup = "Group"

// DimensionShard is the second dimension of per-shard metrics (the reconciler's
// VerifiedLagSeconds per shard): the shard id.
const DimensionShard = "ShardId"

// Unit is a CloudWatch metric unit.
type Unit string

// Units used by gapless.
const (
	Count        Unit = "Count"
	Seconds      Unit = "Seconds"
	Milliseconds Unit = "Milliseconds"
)

// ErrInvalid is returned for a metric or dimension that EMF cannot carry.
var ErrInvalid = errors.New("metrics: invalid metric")

// Metric is one value.
type Metric struct {
	Name  string
	Value float64
	Unit  Unit
}

// Dimension is one name/value pair.
type Dimension struct {
	Name, Value string
}

// Emitter writes EMF lines to w. It is safe for concurrent use; each Emit writes one line.
type Emitter struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
	dims      []Dimension
	now       func() time.Time
}

// Option configures an Emitter.
type Option func(*Emitter)

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(e *Emitter) { e.now = now } }

// New returns an Emitter writing to w (os.Stdout in a Lambda function) under namespace with the
// given dimensions on every line, e.g. New(os.Stdout, Namespace, Dimension{DimensionGroup, group}).
func New(w io.Writer, namespace string, dims []Dimension, opts ...Option) *Emitter {
	e := &Emitter{w: w, namespace: namespace, dims: append([]Dimension(nil), dims...), now: time.Now}
	for _, o := range opts {
		o(e)
	}
	return e
}

// reserved root members that a metric or dimension must not shadow.
var reserved = map[string]bool{"_aws": true}

// Emit writes one EMF line with the given metrics. Emitting no metrics writes nothing.
func (e *Emitter) Emit(ms ...Metric) error { return e.EmitWith(nil, ms...) }

// EmitWith writes one EMF line like Emit, with extra dimensions after the Emitter's own (e.g. a
// per-shard value: Dimension{DimensionShard, shardID}). The metrics of the line are a separate
// CloudWatch metric per dimension set.
func (e *Emitter) EmitWith(extra []Dimension, ms ...Metric) error {
	if len(ms) == 0 {
		return nil
	}
	all := append(append(make([]Dimension, 0, len(e.dims)+len(extra)), e.dims...), extra...)
	root := make(map[string]any, len(ms)+len(all)+1)
	dimNames := make([]string, 0, len(all))
	for _, d := range all {
		if d.Name == "" || reserved[d.Name] {
			return fmt.Errorf("%w: dimension name %q", ErrInvalid, d.Name)
		}
		if _, dup := root[d.Name]; dup {
			return fmt.Errorf("%w: dimension %q given twice", ErrInvalid, d.Name)
		}
		root[d.Name] = d.Value
		dimNames = append(dimNames, d.Name)
	}
	defs := make([]metricDef, 0, len(ms))
	for _, m := range ms {
		if m.Name == "" || reserved[m.Name] {
			return fmt.Errorf("%w: metric name %q", ErrInvalid, m.Name)
		}
		if _, dup := root[m.Name]; dup {
			return fmt.Errorf("%w: %q given twice or shadows a dimension", ErrInvalid, m.Name)
		}
		unit := m.Unit
		if unit == "" {
			unit = Count
		}
		root[m.Name] = m.Value
		defs = append(defs, metricDef{Name: m.Name, Unit: unit})
	}
	dims := [][]string{dimNames}
	if len(dimNames) == 0 {
		dims = [][]string{{}}
	}
	root["_aws"] = awsMeta{
		Timestamp: e.now().UnixMilli(),
		CloudWatchMetrics: []directive{{
			Namespace: e.namespace, Dimensions: dims, Metrics: defs,
		}},
	}
	line, err := json.Marshal(root)
	if err != nil {
		return fmt.Errorf("metrics: encode: %w", err)
	}
	line = append(line, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(line); err != nil {
		return fmt.Errorf("metrics: write: %w", err)
	}
	return nil
}

type awsMeta struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

type directive struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []metricDef `json:"Metrics"`
}

type metricDef struct {
	Name string `json:"Name"`
	Unit Unit   `json:"Unit"`
}

// Line is one decoded EMF line, for tests and tools that read metrics back from logs.
type Line struct {
	Namespace  string
	Dimensions map[string]string
	Values     map[string]float64
	Units      map[string]Unit
	Timestamp  time.Time
}

// Parse decodes one EMF line written by Emit (or any single-directive EMF line).
func Parse(line []byte) (Line, error) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(line, &root); err != nil {
		return Line{}, fmt.Errorf("metrics: parse: %w", err)
	}
	raw, ok := root["_aws"]
	if !ok {
		return Line{}, fmt.Errorf("%w: no _aws member", ErrInvalid)
	}
	var meta awsMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return Line{}, fmt.Errorf("metrics: parse _aws: %w", err)
	}
	if len(meta.CloudWatchMetrics) != 1 {
		return Line{}, fmt.Errorf("%w: %d directives, want 1", ErrInvalid, len(meta.CloudWatchMetrics))
	}
	d := meta.CloudWatchMetrics[0]
	l := Line{
		Namespace: d.Namespace, Dimensions: map[string]string{}, Values: map[string]float64{},
		Units: map[string]Unit{}, Timestamp: time.UnixMilli(meta.Timestamp),
	}
	for _, set := range d.Dimensions {
		for _, name := range set {
			var v string
			if err := json.Unmarshal(root[name], &v); err != nil {
				return Line{}, fmt.Errorf("metrics: dimension %s: %w", name, err)
			}
			l.Dimensions[name] = v
		}
	}
	for _, m := range d.Metrics {
		var v float64
		if err := json.Unmarshal(root[m.Name], &v); err != nil {
			return Line{}, fmt.Errorf("metrics: metric %s: %w", m.Name, err)
		}
		l.Values[m.Name] = v
		l.Units[m.Name] = m.Unit
	}
	return l, nil
}
