package weirbench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress writes what a run is doing. On a terminal, a status line updates in
// place under the lines already written; elsewhere only whole lines are
// written, and status updates are left out.
type progress struct {
	mu       sync.Mutex
	w        io.Writer // nil: nothing is written
	tty      bool
	status   string // the status line on screen (tty)
	lastDraw time.Time
	partial  []byte // the unfinished line of Write
}

// statusWidth bounds the status line, so that it never wraps on a terminal of
// 100 columns: a wrapped line cannot be redrawn in place.
const statusWidth = 99

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// Status replaces the status line; on a terminal at most ten times a second.
func (p *progress) Status(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w == nil || !p.tty || time.Since(p.lastDraw) < 100*time.Millisecond {
		return
	}
	p.status = fmt.Sprintf(format, args...)
	if r := []rune(p.status); len(r) > statusWidth {
		p.status = string(r[:statusWidth-1]) + "…"
	}
	p.lastDraw = time.Now()
	fmt.Fprint(p.w, "\r\x1b[K"+p.status)
}

// Linef writes a line above the status line.
func (p *progress) Linef(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.line(fmt.Sprintf(format, args...))
}

func (p *progress) line(s string) {
	if p.w == nil {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K"+s+"\n"+p.status)
		return
	}
	fmt.Fprintln(p.w, s)
}

// Write writes b's lines above the status line; a line's start waits for its
// end. Loggers and the worker process write here.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// Clear removes the status line.
func (p *progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil && p.tty && p.status != "" {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	p.status = ""
}
