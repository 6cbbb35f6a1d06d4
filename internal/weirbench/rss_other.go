//go:build !unix

package weirbench

import "os"

// maxRSS reports that the peak resident set size is not known here.
func maxRSS(*os.ProcessState) (int64, bool) { return 0, false }
