package weir

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirq/weir/weirdriver"
)

// checkTime refuses a time outside the years 1..9999 UTC: the range RFC 3339 (and
// so JSON, in which the PostgreSQL driver sends times) can write, which holds
// every real schedule, and to which the PostgreSQL schema's CHECK constraints
// hold the database, so that reading a row never fails.
func checkTime(field, what string, t time.Time) error {
	if !weirdriver.TimeInRange(t) {
		return invalidf(field, "%s %s is out of range: it must fall in the years 1..9999 UTC", what, formatTime(t))
	}
	return nil
}

// formatTime writes t as RFC 3339 in UTC, also outside the years 0..9999, which
// time.Format writes but MarshalText refuses.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// jsonChecker finds what PostgreSQL's jsonb cannot store, or stores differently
// from SQLite, in valid JSON text: NUL characters (\u0000), invalid UTF-8 and
// unpaired UTF-16 surrogate escapes, and objects with a key twice (jsonb keeps
// the last, SQLite's text keeps both); and numbers outside float64's range
// (1e400), which both store but no Go handler can decode. It reads the bytes
// once and keeps its buffers from call to call, so that checking a 100k-job
// batch allocates little.
type jsonChecker struct {
	frames []jsonFrame
}

// jsonFrame is an open object or array.
type jsonFrame struct {
	object    bool
	expectKey bool
	keys      [][]byte            // the keys seen, unescaped, while there are few
	many      bool                // set once there are many: the keys are in set
	set       map[string]struct{} // kept from object to object
}

// manyKeys is the number of keys from which an object's keys go into a map
// instead of being compared one by one.
const manyKeys = 16

// check checks b, which must be valid JSON. replaced says that an escaped
// U+FFFD (\ufffd) is what encoding/json writes for invalid UTF-8 in a Go string,
// and so is refused too.
func (c *jsonChecker) check(b []byte, replaced bool) error {
	c.frames = c.frames[:0]
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			if len(c.frames) < cap(c.frames) {
				c.frames = c.frames[:len(c.frames)+1]
			} else {
				c.frames = append(c.frames, jsonFrame{})
			}
			f := &c.frames[len(c.frames)-1]
			f.object, f.expectKey, f.keys, f.many = b[i] == '{', b[i] == '{', f.keys[:0], false
		case '}', ']':
			if len(c.frames) > 0 {
				c.frames = c.frames[:len(c.frames)-1]
			}
		case ',':
			if n := len(c.frames); n > 0 && c.frames[n-1].object {
				c.frames[n-1].expectKey = true
			}
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			end, err := scanNumber(b, i)
			if err != nil {
				return err
			}
			i = end - 1
		case '"':
			end, escaped, err := scanString(b, i, replaced)
			if err != nil {
				return err
			}
			if n := len(c.frames); n > 0 && c.frames[n-1].expectKey {
				if err := c.frames[n-1].addKey(b[i:end+1], escaped); err != nil {
					return err
				}
			}
			i = end
		}
	}
	return nil
}

// addKey records the key raw (quoted) in f, or says that f has it already.
func (f *jsonFrame) addKey(raw []byte, escaped bool) error {
	f.expectKey = false
	key := raw[1 : len(raw)-1]
	if escaped {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("a key that does not decode (%s): %v", truncate(string(raw)), err)
		}
		key = []byte(s)
	}
	if f.many {
		if _, dup := f.set[string(key)]; dup {
			return fmt.Errorf("the key %q twice in one object", truncate(string(key)))
		}
		f.set[string(key)] = struct{}{}
		return nil
	}
	for _, k := range f.keys {
		if string(k) == string(key) {
			return fmt.Errorf("the key %q twice in one object", truncate(string(key)))
		}
	}
	f.keys = append(f.keys, key)
	if len(f.keys) >= manyKeys {
		f.many = true
		if f.set == nil {
			f.set = make(map[string]struct{}, 2*manyKeys)
		}
		clear(f.set)
		for _, k := range f.keys {
			f.set[string(k)] = struct{}{}
		}
	}
	return nil
}

// scanString reads the string that starts with the quote at b[start] and returns
// the index of its closing quote and whether it holds escapes.
func scanString(b []byte, start int, replaced bool) (end int, escaped bool, err error) {
	for i := start + 1; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return i, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 < len(b) && b[i+1] == 'u' && i+6 <= len(b) {
				r := hex4(b[i+2 : i+6])
				switch {
				case r == 0:
					return 0, false, fmt.Errorf("a NUL character (\\u0000) at byte %d, which PostgreSQL cannot store", i)
				case r == utf8.RuneError && replaced:
					return 0, false, fmt.Errorf("invalid UTF-8 at byte %d (encoding/json wrote it as \\ufffd)", i)
				case 0xD800 <= r && r < 0xDC00:
					// A high surrogate must be followed by a low one.
					if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
						return 0, false, fmt.Errorf("an unpaired UTF-16 surrogate escape at byte %d", i)
					}
					if low := hex4(b[i+8 : i+12]); low < 0xDC00 || low > 0xDFFF {
						return 0, false, fmt.Errorf("an unpaired UTF-16 surrogate escape at byte %d", i)
					}
					i += 12
					continue
				case 0xDC00 <= r && r <= 0xDFFF:
					return 0, false, fmt.Errorf("an unpaired UTF-16 surrogate escape at byte %d", i)
				}
				i += 6
				continue
			}
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			i += size
		}
	}
	return 0, false, errors.New("an unterminated string")
}

// maxPlainDigits is the length up to which a number without an exponent is
// within float64's range: the largest float64 has 309 digits before its point.
const maxPlainDigits = 308

// scanNumber reads the number that starts at b[start] and returns the index
// just after it, or an error when it is outside float64's range, so that
// encoding/json would refuse to decode it into a float64 (or an any).
// Numbers that underflow decode, as 0 or a subnormal.
func scanNumber(b []byte, start int) (end int, err error) {
	exponent := false
	end = start
	for ; end < len(b); end++ {
		c := b[end]
		if c == 'e' || c == 'E' {
			exponent = true
		} else if c != '-' && c != '+' && c != '.' && (c < '0' || c > '9') {
			break
		}
	}
	if !exponent && end-start <= maxPlainDigits {
		return end, nil
	}
	if _, err := strconv.ParseFloat(string(b[start:end]), 64); errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("the number %s at byte %d, outside float64's range (about ±1.8e308), which a Go handler cannot decode",
			truncate(string(b[start:end])), start)
	}
	return end, nil
}

// hex4 decodes four hex digits; JSON that is valid has nothing else there.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// storableText returns s with NUL characters and invalid UTF-8 replaced by
// U+FFFD, so that both stores can keep it as text: a handler's error message is
// whatever the handler returned, and a write that fails on it would lose the
// outcomes of every job written with it.
func storableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
