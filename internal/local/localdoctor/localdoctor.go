// Package localdoctor answers gapless doctor's control-plane questions on the local stack, from
// the emulated event-source mapping's configuration (internal/local/esm).
package localdoctor

import (
	"context"

	"github.com/gapless-dev/gapless/internal/doctor"
	"github.com/gapless-dev/gapless/internal/local/esm"
)

// ControlPlane answers gapless doctor's control-plane questions for a local run. The local
// stack has no Lambda, EventBridge or CloudWatch, so what those services would say comes from
// the harness: the emulated mapping's configuration (Mapping), the variables the local
// functions run with (events/env.json), the queues the harness feeds to the reconciler, and the
// schedule and alarms it stands in for. The data plane (the stream's retention, the ledger's
// TTL, the checkpoint table) is read from the local stack itself by doctor.Collect.
type ControlPlane struct {
	// Mapping is the emulated mapping's configuration (ConfigFromTemplate plus the harness's
	// OnFailureQueueURL).
	Mapping esm.Config
	// State is the mapping's state as Lambda would report it: "Enabled" while the harness runs
	// it, "Disabled" when it is stopped.
	State string
	// Metrics are the mapping's MetricsConfig metric groups as the template configures them
	// (the emulated mapping emits no CloudWatch metrics; what Lambda would be told is checked).
	Metrics []string
	// ConsumerEnv and ReconcilerEnv are the functions' environment variables.
	ConsumerEnv, ReconcilerEnv map[string]string
	// ReconcilerQueues are the queue URLs the harness delivers to the reconciler.
	ReconcilerQueues []string
	// Schedule is the reconciler schedule the harness stands in for; nil = none.
	Schedule *doctor.Schedule
	// Alarms are the alarms the harness stands in for; nil with AlarmsKnown false = not checked.
	Alarms      []doctor.Alarm
	AlarmsKnown bool
	// Notes say where the answers come from.
	Notes []string
}

var _ doctor.ControlPlane = ControlPlane{}

// Describe implements doctor.ControlPlane.
func (c ControlPlane) Describe(context.Context) (doctor.ControlPlaneView, error) {
	cfg := c.Mapping
	m := &doctor.Mapping{
		StartingPosition:        cfg.StartingPosition,
		ReportBatchItemFailures: cfg.ReportBatchItemFailures,
		MaximumRetryAttempts:    cfg.MaximumRetryAttempts,
		MaximumRecordAge:        cfg.MaximumRecordAge,
		ParallelizationFactor:   max(cfg.ParallelizationFactor, 1),
		BatchingWindow:          cfg.BatchingWindow,
		OnFailure:               cfg.OnFailureQueueURL, // a queue is named by its URL locally
		State:                   c.State,
		Filters:                 cfg.FilterCriteria,
		Metrics:                 c.Metrics,
	}
	if cfg.MaximumRecordAge <= 0 { // Config: 0 or negative is infinite, Lambda's -1
		m.MaximumRecordAge = -1
	}
	timeout := cfg.FunctionTimeout
	if timeout == 0 {
		timeout = esm.DefaultConfig().FunctionTimeout
	}
	return doctor.ControlPlaneView{
		Mapping: m, ConsumerTimeout: timeout,
		ConsumerEnv: c.ConsumerEnv, ReconcilerEnv: c.ReconcilerEnv,
		ReconcilerQueues: c.ReconcilerQueues, Schedule: c.Schedule,
		Alarms: c.Alarms, AlarmsKnown: c.AlarmsKnown,
		Notes: append([]string{"local: the mapping, schedule and alarms are the harness's (the local stack has no Lambda, EventBridge or CloudWatch)"}, c.Notes...),
	}, nil
}
