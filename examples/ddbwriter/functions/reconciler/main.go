// Command reconciler is the ddbwriter service's reconciler: records behind the checkpoint that
// no invocation wrote are replayed through the same Process.
package main

import (
	"github.com/gapless-dev/gapless"

	"example.com/ddbwriter"
)

func main() { ddbwriter.Main(gapless.StartReconciler) }
