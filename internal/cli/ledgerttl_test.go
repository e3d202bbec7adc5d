package cli

import (
	"io"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/config"
)

// Entries a replay or redrive writes must live as long as the functions' (LEDGER_TTL), or the
// reconciler would replay those records again once they expire early.
func TestOpsLedgerTTL(t *testing.T) {
	tests := []struct {
		name string
		env  string
		args []string
		want time.Duration
	}{
		{"default", "", nil, config.DefaultLedgerTTL},
		{"from the functions' variable", "400h", nil, 400 * time.Hour},
		{"flag wins", "400h", []string{"--ledger-ttl", "500h"}, 500 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(config.EnvLedgerTTL, tt.env)
			fs, o := opsFlags("replay", io.Discard, true)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if o.ledgerTTL != tt.want {
				t.Fatalf("ledger TTL %v, want %v", o.ledgerTTL, tt.want)
			}
		})
	}
}
