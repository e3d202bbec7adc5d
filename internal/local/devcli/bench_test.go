package devcli

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gapless-dev/gapless/internal/local/bench"
)

func TestParseBenchFlags(t *testing.T) {
	t.Parallel()
	t.Run("defaults: the issue's matrix and every side measurement", func(t *testing.T) {
		o, err := parseBenchFlags(nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := o.cfg
		if !slices.Equal(c.BatchSizes, []int{10, 100, 1000, 10000}) || !slices.Equal(c.PFs, []int{1, 4}) || !slices.Equal(c.Handlers, bench.Handlers) {
			t.Errorf("matrix %v × %v × %v", c.Handlers, c.BatchSizes, c.PFs)
		}
		if c.IdempotentMaxRound != 10000 || c.MemoryRecords != 10000 || c.ReconcileRecords != 10000 || c.ColdStartReps != 3 || !c.Arm64Sizes {
			t.Errorf("side measurements %+v", c)
		}
		if c.ConsumerPackage != "./functions/consumer" {
			t.Errorf("consumer package %q", c.ConsumerPackage)
		}
	})
	t.Run("quick shortens everything, explicit flags still win", func(t *testing.T) {
		o, err := parseBenchFlags([]string{"--quick", "--coldstart-reps", "0", "--budget", "1s"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c := o.cfg
		if c.Limits.Budget != time.Second || c.IdempotentMaxRound != 1000 || c.ReconcileRecords != 2000 || c.ColdStartReps != 0 || c.Arm64Sizes {
			t.Errorf("%+v", c)
		}
		if !strings.Contains(o.argsShown, "--quick") {
			t.Errorf("command shown %q", o.argsShown)
		}
	})
	for _, args := range [][]string{
		{"--pf", "11"}, {"--pf", "0"}, {"--batch-sizes", "10,x"}, {"--batch-sizes", "10001"},
		{"--handlers", "bare,nope"}, {"--memory-records", "20000"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if _, err := parseBenchFlags(args, io.Discard); err == nil {
				t.Errorf("%v accepted", args)
			}
		})
	}
	if _, err := parseBenchFlags([]string{"extra"}, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("positional argument: %v", err)
	}
}
