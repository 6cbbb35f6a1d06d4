package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/weirq/weir"
)

var versionCommand = &command{
	name:    "version",
	summary: "print weir's version",
	usage:   versionUsage,
	run:     runVersion,
}

func versionUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:

    weir version

version prints "weir <release>", the release of weir the binary was built
from, followed, when the Go toolchain recorded a module version that is not
that release's tag (a build of a later commit), by that version in
parentheses.
`)
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet("weir version")
	if err := parseFlags(e, fs, args, versionUsage); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "weir %s\n", version())
	return nil
}

// version is weir's release, and the main module's version when the build
// recorded one other than the release's tag.
func version() string {
	v := weir.Version
	if info, ok := debug.ReadBuildInfo(); ok {
		if m := info.Main.Version; m != "" && m != "(devel)" && m != "v"+weir.Version {
			v += " (" + m + ")"
		}
	}
	return v
}
