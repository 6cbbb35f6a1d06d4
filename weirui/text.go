package weirui

import (
	"bytes"
	"unicode/utf8"

	"github.com/weirq/weir/internal/safetext"
)

// shown returns b, a page or an API answer as encoded, with every character
// that a display acts on rather than shows (safetext.Unsafe: bidirectional
// controls, ESC and the other control characters) replaced by its escape,
// \u202e, but for the line breaks and tabs of the layout and of a trace.
// Stored job data is written by whoever can insert or run a job, and
// "invoice\u202egnp.exe" would otherwise read as "invoiceexe.png".
//
// On a page the escape is visible text. In JSON those characters occur only
// inside strings (encoding/json escapes the C0 ones itself), where \u202e is
// the escape that decodes to the character: the data is kept as stored.
func shown(b []byte) []byte {
	i := bytes.IndexFunc(b, hidden)
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for i >= 0 {
		r, size := utf8.DecodeRune(b[i:])
		out = append(out, b[:i]...)
		out = append(out, safetext.Escape(r)...)
		b = b[i+size:]
		i = bytes.IndexFunc(b, hidden)
	}
	return append(out, b...)
}

// hidden reports whether shown escapes r.
func hidden(r rune) bool {
	return r != '\n' && r != '\t' && r != '\r' && safetext.Unsafe(r)
}
