package esm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Template parameter names whose Default values configure the mapping (template.yaml feeds
// them to the consumer's Kinesis event).
const (
	ParamBatchSize                  = "BatchSize"
	ParamBatchingWindowSeconds      = "BatchingWindowSeconds"
	ParamParallelizationFactor      = "ParallelizationFactor"
	ParamMaximumRetryAttempts       = "MaximumRetryAttempts"
	ParamMaximumRecordAgeSeconds    = "MaximumRecordAgeSeconds"
	ParamBisectBatchOnFunctionError = "BisectBatchOnFunctionError"
	ParamStartingPosition           = "StartingPosition"
	ParamConsumerTimeoutSeconds     = "ConsumerTimeoutSeconds"
	// ParamRecordFilter is the pattern of the mapping's FilterCriteria (empty: none).
	ParamRecordFilter = "RecordFilter"
)

// ConfigFromTemplate reads the mapping's settings from the Default values of an AWS SAM
// template's Parameters (see the Param* names). Parameters that are absent keep DefaultConfig's
// value. ReportBatchItemFailures is true when a function's Kinesis event lists it in
// FunctionResponseTypes, and FunctionName is that function's logical id. StreamName,
// OnFailureQueueURL and PollInterval are deployment details the caller sets.
//
// CloudFormation short-form intrinsics (!Ref, !Sub, !GetAtt, …) are YAML tags: the template is
// read as a node tree, where they are ordinary tagged nodes.
func ConfigFromTemplate(path string) (Config, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("esm: read template: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return cfg, fmt.Errorf("esm: parse template %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return cfg, fmt.Errorf("esm: template %s is empty", path)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return cfg, fmt.Errorf("esm: template %s is not a mapping", path)
	}
	params := lookup(root, "Parameters")
	def := func(name string) (string, bool) {
		p := lookup(params, name)
		d := lookup(p, "Default")
		if d == nil || d.Kind != yaml.ScalarNode {
			return "", false
		}
		return d.Value, true
	}
	bad := func(name, v string, err error) error {
		return fmt.Errorf("%w: template %s: parameter %s default %q: %v", ErrConfig, path, name, v, err)
	}
	ints := []struct {
		name string
		set  func(int)
	}{
		{ParamBatchSize, func(n int) { cfg.BatchSize = n }},
		{ParamBatchingWindowSeconds, func(n int) { cfg.BatchingWindow = time.Duration(n) * time.Second }},
		{ParamParallelizationFactor, func(n int) { cfg.ParallelizationFactor = n }},
		{ParamMaximumRetryAttempts, func(n int) { cfg.MaximumRetryAttempts = n }},
		{ParamMaximumRecordAgeSeconds, func(n int) {
			cfg.MaximumRecordAge = -1
			if n > 0 {
				cfg.MaximumRecordAge = time.Duration(n) * time.Second
			}
		}},
		{ParamConsumerTimeoutSeconds, func(n int) { cfg.FunctionTimeout = time.Duration(n) * time.Second }},
	}
	for _, p := range ints {
		v, ok := def(p.name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return cfg, bad(p.name, v, err)
		}
		p.set(n)
	}
	if v, ok := def(ParamBisectBatchOnFunctionError); ok {
		bv, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return cfg, bad(ParamBisectBatchOnFunctionError, v, err)
		}
		cfg.BisectBatchOnFunctionError = bv
	}
	if v, ok := def(ParamStartingPosition); ok {
		cfg.StartingPosition = strings.TrimSpace(v)
	}
	if v, ok := def(ParamRecordFilter); ok && strings.TrimSpace(v) != "" {
		cfg.FilterCriteria = []string{v}
	}
	cfg.FunctionName, cfg.ReportBatchItemFailures = kinesisFunction(lookup(root, "Resources"))
	return cfg, nil
}

// kinesisFunction finds the first resource with a Kinesis event (SAM Events, Type: Kinesis)
// and reports its logical id and whether the event lists ReportBatchItemFailures.
func kinesisFunction(resources *yaml.Node) (string, bool) {
	if resources == nil || resources.Kind != yaml.MappingNode {
		return "", false
	}
	for i := 0; i+1 < len(resources.Content); i += 2 {
		name, res := resources.Content[i].Value, resources.Content[i+1]
		evs := lookup(lookup(res, "Properties"), "Events")
		if evs == nil || evs.Kind != yaml.MappingNode {
			continue
		}
		for j := 1; j < len(evs.Content); j += 2 {
			ev := evs.Content[j]
			if t := lookup(ev, "Type"); t == nil || t.Value != "Kinesis" {
				continue
			}
			report := false
			if frt := lookup(lookup(ev, "Properties"), "FunctionResponseTypes"); frt != nil {
				for _, item := range frt.Content {
					report = report || item.Value == "ReportBatchItemFailures"
				}
			}
			return name, report
		}
	}
	return "", false
}

// lookup returns the value node of key in a mapping node, or nil.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
