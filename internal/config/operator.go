package config

import (
	"fmt"
	"time"
)

// The ranges the functions accept. The operator CLI holds the flags that set the same values
// (replay's and redrive's --max-attempts and --ledger-ttl, status's --settle) to the same rules,
// so a value the functions would refuse at cold start is refused on the command line too.
const (
	MinMaxRecordAttempts = 1
	MaxMaxRecordAttempts = 1000
	// MinLedgerTTL: a ledger entry must outlive the record it covers, in the stream (at least
	// 24 h of retention) and in the settle window after it.
	MinLedgerTTL = 25 * time.Hour
)

// MaxRecordAttemptsRule says why n is refused as MAX_RECORD_ATTEMPTS ("" when it is accepted).
func MaxRecordAttemptsRule(n int) string {
	if n < MinMaxRecordAttempts || n > MaxMaxRecordAttempts {
		return fmt.Sprintf("must be an integer from %d to %d", MinMaxRecordAttempts, MaxMaxRecordAttempts)
	}
	return ""
}

// LedgerTTLRule says why d is refused as LEDGER_TTL ("" when it is accepted).
func LedgerTTLRule(d time.Duration) string {
	switch {
	case d <= 0:
		return positiveDuration
	case d < MinLedgerTTL:
		return "must cover the stream retention (at least 24h) plus the settle window: use 25h or more"
	}
	return ""
}

// SettleAfterRule says why d is refused as SETTLE_AFTER ("" when it is accepted).
func SettleAfterRule(d time.Duration) string {
	if d <= 0 {
		return positiveDuration
	}
	return ""
}

const positiveDuration = "must be a positive Go duration like 30m or 192h"

// Operator is what the operator CLI takes from the functions' environment as its defaults.
type Operator struct {
	MaxRecordAttempts int
	LedgerTTL         time.Duration
	SettleAfter       time.Duration
	OnPark            string
}

// LoadOperator reads the variables the operator CLI shares with the functions (unset ones take
// the functions' defaults) under the functions' rules: a shell set up like the function gets
// the function's values, and a value the function would refuse is an error naming the variable,
// never silently replaced by a default.
func LoadOperator(getenv func(string) string) (Operator, error) {
	p := newParser(getenv, nil)
	o := Operator{
		MaxRecordAttempts: p.intIn(EnvMaxRecordAttempts, DefaultMaxRecordAttempts, MinMaxRecordAttempts, MaxMaxRecordAttempts),
		LedgerTTL:         p.duration(EnvLedgerTTL, DefaultLedgerTTL),
		SettleAfter:       p.duration(EnvSettleAfter, DefaultSettleAfter),
		OnPark:            p.oneOf(EnvOnPark, OnParkContinue, OnParkContinue, OnParkHoldKey),
	}
	p.ledgerTTL(o.LedgerTTL)
	return o, p.err()
}

// ledgerTTL applies LedgerTTLRule to the LEDGER_TTL read (when it was set).
func (p *parser) ledgerTTL(d time.Duration) {
	if v := p.getenv(EnvLedgerTTL); v != "" && d > 0 {
		if why := LedgerTTLRule(d); why != "" {
			p.fail(EnvLedgerTTL, v, why)
		}
	}
}
