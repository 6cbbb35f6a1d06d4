//go:build !unix

package soak

import "os"

// pauseSignals is empty where processes cannot be frozen: the soak's pause
// fault is refused there.
var pauseSignals []os.Signal
