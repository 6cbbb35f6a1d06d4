package weirotel

import (
	"bytes"
	"encoding/json"

	"go.opentelemetry.io/otel/propagation"
)

// metadataKeyJSON is MetadataKey as a JSON object key.
var metadataKeyJSON = []byte(`"` + MetadataKey + `"`)

// carrierOf reads the trace context a job's metadata carries: the object under
// the top-level key MetadataKey, written without escapes as the insert
// middleware writes it; nil if none. It runs at every attempt, so metadata
// without the key is not decoded at all, and the common shape (an object of
// plain strings) is read by hand; anything else goes through encoding/json. A
// job inserted by SQL may carry anything: what is not a carrier is none.
func carrierOf(meta json.RawMessage) propagation.MapCarrier {
	if !bytes.Contains(meta, metadataKeyJSON) || !json.Valid(meta) {
		return nil
	}
	if c, ok := scanCarrier(meta); ok {
		return c
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) != nil || fields[MetadataKey] == nil {
		return nil
	}
	var c propagation.MapCarrier
	if json.Unmarshal(fields[MetadataKey], &c) != nil {
		return nil
	}
	return c
}

// scanCarrier reads MetadataKey's object from meta, valid JSON, when its keys
// and values are strings without escapes. ok is false when meta is
// anything else, and the caller decodes it in full; a carrier found is the
// same as encoding/json would give for valid JSON (TestScanCarrier).
func scanCarrier(meta []byte) (c propagation.MapCarrier, ok bool) {
	s := &jsonScan{b: meta}
	if !s.next('{') {
		return nil, false
	}
	if s.next('}') {
		return nil, true
	}
	for {
		key, ok := s.plainString()
		if !ok || !s.next(':') {
			return nil, false
		}
		if key == MetadataKey {
			c, ok = s.stringObject()
			if !ok {
				return nil, false
			}
		} else if !s.skipValue() {
			return nil, false
		}
		if s.next('}') {
			// Trailing bytes other than white space make it invalid JSON.
			s.space()
			return c, s.i == len(s.b)
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// jsonScan reads JSON text from b at i.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// next skips white space and then c, if c comes next.
func (s *jsonScan) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes (a trace
// context's fields are); anything else goes to encoding/json, which also
// replaces invalid UTF-8.
func (s *jsonScan) plainString() (string, bool) {
	if !s.next('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return string(s.b[start : s.i-1]), true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", false
		}
		s.i++
	}
	return "", false
}

// stringObject reads an object whose keys and values are plain strings.
func (s *jsonScan) stringObject() (propagation.MapCarrier, bool) {
	if !s.next('{') {
		return nil, false
	}
	c := propagation.MapCarrier{}
	if s.next('}') {
		return c, true
	}
	for {
		k, ok := s.plainString()
		if !ok || !s.next(':') {
			return nil, false
		}
		v, ok := s.plainString()
		if !ok {
			return nil, false
		}
		if _, twice := c[k]; twice {
			return nil, false // encoding/json keeps the last; leave it to it
		}
		c[k] = v
		if s.next('}') {
			return c, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// skipValue skips a value other than the carrier: a plain string, or an
// object, array, number or literal whose strings hold no escapes. What it
// cannot skip so, it leaves to encoding/json.
func (s *jsonScan) skipValue() bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.plainString()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.plainString(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // a number or a literal (the text is valid): up to the next delimiter
		start := s.i
		for s.i < len(s.b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(s.b[s.i])) {
			s.i++
		}
		return s.i > start
	}
}
