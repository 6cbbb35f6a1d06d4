package weirbench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// peakRSS returns this process's peak resident set size in bytes: VmHWM, the
// high-water mark of its own address space. (The kernel's maxrss, which wait4
// reports, is no use for a re-executed process: exec carries the parent's
// high-water mark over into it.)
func peakRSS() (int64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, false
			}
			return kib * 1024, true
		}
	}
	return 0, false
}
