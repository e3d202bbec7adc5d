// Command consumer is the ddbwriter service's function behind the Kinesis event-source mapping.
package main

import (
	"github.com/gapless-dev/gapless"

	"example.com/ddbwriter"
)

func main() { ddbwriter.Main(gapless.StartConsumer) }
