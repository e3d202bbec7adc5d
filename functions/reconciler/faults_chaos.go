//go:build gapless_chaos

package main

import "github.com/gapless-dev/gapless/internal/local/chaos"

// faultOptions puts GAPLESS_CHAOS's faults around Process and its batch form (the default bridge
// stays batched, as deployed). This file is compiled only with
// -tags gapless_chaos: the local harness (gapless demo, gapless invoke) builds it; sam build and
// make build do not, so a deployed function has no fault injection to switch on.
var faultOptions = chaos.Options
