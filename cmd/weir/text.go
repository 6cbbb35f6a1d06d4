package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/weirq/weir/internal/safetext"
)

// termSafe returns s with everything a terminal would act on, rather than
// show, escaped: C0 and C1 control characters and DEL (an ESC starts a
// sequence that can move the cursor, rewrite the screen or set the window
// title), the marks, embeddings, overrides and isolates of bidirectional text
// (which reorder what follows them), the line and paragraph separators, and
// bytes that are not UTF-8. Each becomes a Go escape: \n, \t, \r, \xNN below
// U+0080 and for a bad byte, \uNNNN above. Everything else is left as it is,
// backslashes included, so ordinary text reads as it was written.
//
// Stored job data (kinds, queues, tags, args, metadata, errors, traces) is
// written by whoever can insert or run a job; every table and text that shows
// it goes through termSafe. JSON output needs no escaping beyond encoding/json's.
func termSafe(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || unsafeRune(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports whether a terminal acts on r rather than showing it: the
// rule the dashboard's pages share.
func unsafeRune(r rune) bool { return safetext.Unsafe(r) }

// termSafeBlock is termSafe for text shown over several lines, such as an
// error and its trace: it keeps the line breaks and tabs (a trace indents
// with them), which start no sequence, and escapes the rest.
func termSafeBlock(s string) []string {
	var lines []string
	for line := range strings.SplitSeq(s, "\n") {
		parts := strings.Split(line, "\t")
		for i, p := range parts {
			parts[i] = termSafe(p)
		}
		lines = append(lines, strings.Join(parts, "\t"))
	}
	return lines
}
