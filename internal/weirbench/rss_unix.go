//go:build unix

package weirbench

import (
	"os"
	"runtime"
	"syscall"
)

// maxRSS returns the peak resident set size of the process that exited, in
// bytes.
func maxRSS(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, false
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss), true // bytes there
	}
	return int64(ru.Maxrss) * 1024, true // KiB on Linux and the BSDs
}
