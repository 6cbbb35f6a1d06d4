// Command weir manages a weir job queue: it migrates weir's schema, enqueues
// jobs, and lets operators inspect and steer jobs and queues.
//
// Each subcommand lives in a file of its own and registers itself in commands.
// Every failure prints exactly one line, "weir: <reason>", on stderr and exits
// non-zero: 2 for a mistake in the command line, 1 for anything else. weir
// migrate status exits 3 when migrations are pending.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/weirq/weir/cmd/weir/internal/pgurl"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, e.g. the database did not answer
	exitUsage   = 2 // the command line is wrong
	exitPending = 3 // migrate status: migrations are pending
)

// env is what a subcommand may use of the outside world.
type env struct {
	stdin          io.Reader // read by enqueue --args -
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for weir's usage
	// usage prints the subcommand's help.
	usage func(w io.Writer)
	// run runs the subcommand with the arguments that follow its name.
	run func(ctx context.Context, e *env, args []string) error
}

// commands lists the subcommands in the order usage shows them. A new subcommand
// adds its file and one line here.
func commands() []*command {
	return []*command{
		demoCommand,
		migrateCommand,
		enqueueCommand,
		jobsCommand,
		queuesCommand,
		periodicCommand,
		clientsCommand,
		serveCommand,
		benchCommand,
		soakCommand,
		versionCommand,
	}
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func main() {
	invokedAs = selfCommand(os.Args[0], isClone("."))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs weir with args (without the program name) and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var err error
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		err = help(e, args[1:])
	default:
		c := lookup(name)
		if c == nil {
			if strings.HasPrefix(name, "-") {
				err = usagef("unknown flag %s before the command (run `weir help`)", name)
			} else {
				err = usagef("unknown command %q (run `weir help`)", name)
			}
			break
		}
		err = c.run(ctx, e, args[1:])
	}
	return report(stderr, err)
}

// report prints err as one line on w and returns the exit status it calls for.
func report(w io.Writer, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errAlreadyReported):
		return exitFailure
	case errors.Is(err, errPending):
		return exitPending
	}
	// An error may quote the server or stored data: escaped like any output.
	fmt.Fprintf(w, "weir: %s\n", termSafe(pgurl.OneLine(err.Error())))
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitFailure
}

func usage(w io.Writer) {
	fmt.Fprint(w, `weir is a durable job queue on PostgreSQL (or an embedded SQLite file).

Usage:

    weir <command> [arguments]

Commands:

`)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "    %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "    %s\t%s\n", "help", "print this help, or a command's with `weir help <command>`")
	tw.Flush()
	fmt.Fprint(w, `
Commands that use the database take its URL from --database-url or, failing
that, from the WEIR_DATABASE_URL environment variable.

Run "weir <command> -h" for a command's flags.
`)
}

// help prints weir's usage, or a command's, on stdout.
func help(e *env, args []string) error {
	switch len(args) {
	case 0:
		usage(e.stdout)
		return nil
	case 1:
		c := lookup(args[0])
		if c == nil {
			return usagef("unknown command %q (run `weir help`)", args[0])
		}
		c.usage(e.stdout)
		return nil
	default:
		return usagef("help takes at most one command, got %q", args)
	}
}

// errAlreadyReported is returned by a command that printed its failures itself,
// one line each, and must exit 1.
var errAlreadyReported = errors.New("failures already reported")

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// newFlagSet returns a flag set for the named command. It prints nothing by
// itself: parseFlags reports errors as one line and prints help on -h.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args, which must hold only flags. On -h it prints the
// command's help on stdout and returns flag.ErrHelp.
func parseFlags(e *env, fs *flag.FlagSet, args []string, usage func(io.Writer)) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(e.stdout)
			return err
		}
		return usagef("%s: %v (run `%s -h`)", cmdName(fs), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q (run `%s -h`)", cmdName(fs), fs.Arg(0), fs.Name())
	}
	return nil
}

// parseArgs parses args, in which flags and positional arguments may mix (as in
// "weir jobs show 12 --json"), and returns the positional ones. "--" ends the
// flags. On -h it prints the command's help on stdout and returns flag.ErrHelp.
func parseArgs(e *env, fs *flag.FlagSet, args []string, usage func(io.Writer)) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(e.stdout)
				return nil, err
			}
			// A negative number is an argument, such as a job id, that the
			// command then refuses in its own words, not an unknown flag.
			// The flag package has consumed it and the flags before it.
			rest := fs.Args()
			if consumed := len(args) - len(rest); consumed > 0 && negativeNumber.MatchString(args[consumed-1]) {
				positional = append(positional, args[consumed-1])
				args = rest
				continue
			}
			return nil, usagef("%s: %v (run `%s -h`)", cmdName(fs), err, fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// negativeNumber matches an argument that the flag package would take for a
// flag but is a negative number.
var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// cmdName is the name of fs's command for messages, which weir: already prefixes.
func cmdName(fs *flag.FlagSet) string {
	return strings.TrimPrefix(fs.Name(), "weir ")
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// splitList splits a comma-separated flag value; empty means no filter.
func splitList(fs *flag.FlagSet, flagName, value string) ([]string, error) {
	if !isSet(fs, flagName) {
		return nil, nil
	}
	var out []string
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, usagef("%s: --%s %q has an empty item", cmdName(fs), flagName, value)
		}
		out = append(out, item)
	}
	return out, nil
}

// printDefaults prints fs's flags on w.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
