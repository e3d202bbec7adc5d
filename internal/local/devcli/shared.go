package devcli

import "github.com/gapless-dev/gapless/internal/cli"

// The command line's shared helpers, under the names the commands' files use.
var (
	usagef          = cli.Usagef
	setHelp         = cli.SetHelp
	parseFlags      = cli.ParseFlags
	parseArgs       = cli.ParseArgs
	durationFlag    = cli.DurationFlag
	functionTimeout = cli.FunctionTimeout
	readEnvSection  = cli.ReadEnvSection
	readStackEnv    = cli.ReadStackEnv
	fileExists      = cli.FileExists
	relToWD         = cli.RelToWD
	errUsage        = cli.ErrUsage
)

// run is the developer tool's command line: the operator commands and this package's.
var run = cli.Run

// register adds one of the developer tool's commands.
func register(name, summary string, run cli.RunFunc) { cli.Register(name, summary, run) }
