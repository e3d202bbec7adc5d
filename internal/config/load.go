package config

import "strings"

// LoadOption adjusts what LoadConsumer and LoadReconciler require.
type LoadOption func(*parser)

// OwnProcess says the function runs its own Process rather than the default bridge (package
// process), the only one that forwards to TARGET_QUEUE_URL: the variable becomes optional (read
// when set). Every other variable is required and validated as without it.
func OwnProcess() LoadOption { return func(p *parser) { p.ownProcess = true } }

func newParser(getenv func(string) string, opts []LoadOption) parser {
	p := parser{getenv: getenv}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// target reads TARGET_QUEUE_URL: required for the default Process, optional with OwnProcess.
func (p *parser) target() string {
	if p.ownProcess {
		return strings.TrimSpace(p.getenv(EnvTargetQueueURL))
	}
	return p.required(EnvTargetQueueURL)
}
