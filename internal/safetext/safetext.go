// Package safetext says which characters a terminal or a browser acts on
// rather than shows, and how weir shows them instead: the rule that the
// command's tables and the dashboard's pages share for stored job data, which
// whoever can insert or run a job writes.
package safetext

import "fmt"

// Unsafe reports whether a display acts on r rather than showing it: C0 and
// C1 control characters and DEL (an ESC starts a sequence that can move a
// terminal's cursor, rewrite its screen or set its title), the marks,
// embeddings, overrides and isolates of bidirectional text (which reorder
// what follows them, so that "invoice\u202egnp.exe" reads as
// "invoiceexe.png"), and the line and paragraph separators.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // bidi marks
		return true
	case r >= 0x202a && r <= 0x202e: // bidi embeddings and overrides
		return true
	case r >= 0x2066 && r <= 0x2069: // bidi isolates
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// Escape is what is shown in place of an unsafe r: its Go and JSON escape,
// \u and four hex digits, such as \u202e.
func Escape(r rune) string { return fmt.Sprintf(`\u%04x`, r) }
