//go:build unix

package soak

import (
	"os"
	"syscall"
)

// pauseSignals are the signals that freeze a worker process and let it go on,
// for the soak's pause fault.
var pauseSignals = []os.Signal{syscall.SIGSTOP, syscall.SIGCONT}
