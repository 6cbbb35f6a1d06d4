package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
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

version prints "weir <version>": the module version the binary was built from,
or (devel) for a build from a source tree.
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

// version is the main module's version, or (devel) when the build recorded none.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
