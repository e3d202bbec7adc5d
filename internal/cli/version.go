package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	module "github.com/gapless-dev/gapless"
)

func init() {
	commands["version"] = command{"print the gapless release and how this binary was built", runVersion}
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("gapless version", flag.ContinueOnError)
	short := fs.Bool("short", false, "print the release only (e.g. "+module.Version+")")
	setHelp(fs, "version", "Prints the gapless release this binary is (module.Version, the first entry of\nCHANGELOG.md), the commit it was built from when known, and the Go version.")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *short {
		fmt.Fprintln(stdout, module.Version)
		return nil
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine is "gapless v0.1.0 (commit 1234567abcde, modified; go1.26.8 linux/amd64)".
func versionLine() string {
	build := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			build = "commit " + rev[:min(12, len(rev))]
			if modified == "true" {
				build += ", modified"
			}
			build += "; "
		}
	}
	return fmt.Sprintf("gapless %s (%s%s %s/%s)", module.Version, build, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
