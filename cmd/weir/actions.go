package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// actionGroup is a command made of actions, such as weir jobs list: one
// dispatch and one usage printer for every such command.
type actionGroup struct {
	name     string   // the command: "jobs"
	actions  []string // in the order the usage names them
	synopsis string
	// flags returns an action's flag set, for the usage.
	flags func(action string) *flag.FlagSet
	// sameFlags lists actions whose flags are those of the first one named,
	// printed once under the heading "retry, cancel and delete".
	sameFlags []string
}

// usage prints the synopsis and the flags of each action.
func (g *actionGroup) usage(w io.Writer) {
	fmt.Fprint(w, g.synopsis)
	for _, action := range g.actions {
		name := g.flags(action).Name()
		switch {
		case len(g.sameFlags) > 0 && action == g.sameFlags[0]:
			name = "weir " + g.name + " " + orList(g.sameFlags, "and")
		case len(g.sameFlags) > 0 && slices.Contains(g.sameFlags, action):
			continue
		}
		fmt.Fprintf(w, "\nFlags of %s:\n\n", name)
		printDefaults(w, g.flags(action))
	}
}

// action returns the action that args name first. A request for help prints
// the usage and returns flag.ErrHelp; a missing or unknown action is a usage
// error.
func (g *actionGroup) action(e *env, args []string) (string, error) {
	want := orList(g.actions, "or")
	if len(args) == 0 {
		return "", usagef("%s: missing action: %s (run `weir %s -h`)", g.name, want, g.name)
	}
	switch action := args[0]; {
	case action == "-h" || action == "-help" || action == "--help":
		g.usage(e.stdout)
		return "", flag.ErrHelp
	case slices.Contains(g.actions, action):
		return action, nil
	default:
		return "", usagef("%s: unknown action %q: want %s (run `weir %s -h`)", g.name, action, want, g.name)
	}
}

// orList joins words as "a, b or c".
func orList(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
