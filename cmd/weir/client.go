package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/weirq/weir"
	"github.com/weirq/weir/cmd/weir/internal/pgurl"
)

// openClient opens the database named by f and returns a client on it that
// inserts and operates but runs no jobs, and the function that closes it.
func openClient(ctx context.Context, f *dbFlags) (*weir.Client, func(), error) {
	db, err := f.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The client logs nothing in this use; a stray log line would break the
	// promise of one line on stderr per failure.
	client, err := weir.NewClient(db.driver, &weir.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return client, db.Close, nil
}

// clientErr turns an error of the client into the one weir prints. Bad input
// (a *weir.InvalidError) is a mistake in the command line, reported with the
// client's message after the command's name; the job's position in a batch is
// left out, since enqueue --count inserts identical copies. A schema that is not
// migrated is reported with the client's advice to run `weir migrate up`. Of
// other errors (a *weir.OpError) weir prints what stood in the way, after the
// client's step when it names one, under its own "weir: " that report adds,
// without any password the database URL holds, should the driver quote it.
func (f *dbFlags) clientErr(fs *flag.FlagSet, err error) error {
	if invalid, ok := errors.AsType[*weir.InvalidError](err); ok {
		return usagef("%s: %s", cmdName(fs), invalid.Message)
	}
	if msg, ok := wrapperOf(err, weir.ErrNotMigrated); ok {
		return errors.New(msg)
	}
	if op, ok := errors.AsType[*weir.OpError](err); ok {
		err = op.Err
		if op.Op != "" {
			err = fmt.Errorf("%s: %w", op.Op, op.Err)
		}
	}
	return errors.New(pgurl.Redact(err.Error(), f.url, ""))
}

// wrapperOf finds, in err's tree, the error that wraps sentinel itself and
// returns its message. That error is where the client says what was wrong;
// the errors around it only add context ("job 1 of 5: ", "insert: ") which
// repeats what the command line already says.
func wrapperOf(err, sentinel error) (string, bool) {
	if err == nil || !errors.Is(err, sentinel) {
		return "", false
	}
	var inner []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		inner = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		inner = u.Unwrap()
	}
	for _, e := range inner {
		if e == sentinel {
			return err.Error(), true
		}
	}
	for _, e := range inner {
		if msg, ok := wrapperOf(e, sentinel); ok {
			return msg, true
		}
	}
	return err.Error(), true
}
