//go:build !linux

package weirbench

// peakRSS reports that a process's own peak resident set size is not known
// here; the parent reads the kernel's maxrss instead.
func peakRSS() (int64, bool) { return 0, false }
