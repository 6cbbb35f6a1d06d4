package weir

import (
	"errors"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirmigrate"
)

var (
	// ErrInvalid is wrapped by every error about bad input: args, options, names,
	// configuration. Nothing was written when it is returned.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound means the job does not exist.
	ErrNotFound = weirdriver.ErrNotFound
	// ErrJobRunning means the operation needs a job that is not running.
	ErrJobRunning = weirdriver.ErrJobRunning
	// ErrJobFinal means the operation needs a job that is not final.
	ErrJobFinal = weirdriver.ErrJobFinal
	// ErrUniqueConflict means the change would give two jobs the same unique key.
	ErrUniqueConflict = weirdriver.ErrUniqueConflict
	// ErrNotMigrated means the schema lacks migrations this weir needs; the error
	// names them.
	ErrNotMigrated = weirmigrate.ErrNotMigrated
	// ErrSchemaIncompatible means the schema has migrations this weir does not
	// know and one of them is not marked compatible; the error names them.
	ErrSchemaIncompatible = weirmigrate.ErrIncompatible
)
