package main

import (
	"encoding/json"
	"fmt"
	"io"
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
// Stored data (kinds, queues, tags, args, metadata, errors, traces, the names
// in the migration table) is written by whoever can insert or run a job or
// write to the schema; every table and text that shows it goes through
// termSafe, and every JSON output through writeJSON.
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

// writeJSON prints v as indented JSON in which every character that termSafe
// escapes is a JSON escape: encoding/json escapes the C0 controls and the line
// and paragraph separators, but writes DEL, the C1 controls and the
// bidirectional marks, embeddings, overrides and isolates as they are, and a
// person may read the output on a terminal. The JSON's value is unchanged.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, jsonSafe(string(b))+"\n")
	return err
}

// jsonSafe returns the JSON text s with each character from DEL on that
// unsafeRune flags written as a \uNNNN escape. Outside strings JSON text is
// ASCII (its line breaks and indents are whitespace, not escaped), so such a
// character occurs only inside a string, where the escape means the same
// character; encoding/json has escaped the C0 controls in strings already.
func jsonSafe(s string) string {
	unsafe := func(r rune) bool { return r >= 0x7f && unsafeRune(r) }
	i := strings.IndexFunc(s, unsafe)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if unsafe(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
