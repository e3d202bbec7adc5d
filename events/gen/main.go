// Command gen writes the fixtures in events/ (see package events/fixtures for what each one
// holds and why). Run it from the module root:
//
//	go run ./events/gen            # writes into ./events
//	go run ./events/gen -dir DIR   # writes elsewhere
//
// The output is deterministic; events/fixtures_test.go fails when the committed files differ.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gapless-dev/gapless/events/fixtures"
)

func main() {
	dir := flag.String("dir", "events", "directory to write the fixtures into")
	flag.Parse()
	if err := fixtures.Write(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
