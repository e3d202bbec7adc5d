//go:build !gapless_chaos

package main

import "github.com/gapless-dev/gapless"

// faultOptions is empty in a deployed build: fault injection (internal/local/chaos) is linked
// only with -tags gapless_chaos (faults_chaos.go), and GAPLESS_CHAOS means nothing here.
func faultOptions(func(string) string) ([]gapless.Option, error) { return nil, nil }
