package weirotel

import (
	"bytes"
	"encoding/json"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// metadataKeyJSON is MetadataKey as a JSON object key.
var metadataKeyJSON = []byte(`"` + MetadataKey + `"`)

// traceparentField is W3C Trace Context's field, which the insert middleware
// writes as a plain string when it is the propagator's only one.
const traceparentField = "traceparent"

// carried is the trace context a job's metadata carries under MetadataKey:
// either a string, the traceparent alone, or an object of the propagator's
// fields.
type carried struct {
	traceparent string
	fields      propagation.MapCarrier // nil for the string
}

// carrier returns c as a propagator reads it.
func (c carried) carrier() propagation.MapCarrier {
	if c.fields != nil {
		return c.fields
	}
	return propagation.MapCarrier{traceparentField: c.traceparent}
}

// carrierOf reads the trace context a job's metadata carries: the string or
// object of strings under the top-level key MetadataKey; ok is false if none.
// It runs at every attempt, so metadata without the key is not decoded at all,
// and the common shapes (strings without escapes) are read by hand; anything
// else goes through encoding/json. A job inserted by SQL may carry anything:
// what is not a carrier is none.
func carrierOf(meta json.RawMessage) (c carried, ok bool) {
	if !bytes.Contains(meta, metadataKeyJSON) || !json.Valid(meta) {
		return carried{}, false
	}
	if c, ok, sure := scanCarrier(meta); sure {
		return c, ok
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) != nil {
		return carried{}, false
	}
	raw := bytes.TrimSpace(fields[MetadataKey])
	switch {
	case len(raw) == 0:
		return carried{}, false
	case raw[0] == '"':
		if json.Unmarshal(raw, &c.traceparent) != nil {
			return carried{}, false
		}
		return c, true
	case raw[0] == '{':
		if json.Unmarshal(raw, &c.fields) != nil {
			return carried{}, false
		}
		return c, true
	}
	return carried{}, false
}

// scanCarrier reads MetadataKey's value from meta, valid JSON, when its
// strings hold no escapes. sure is false when meta is anything else, and the
// caller decodes it in full; what it reads is what encoding/json would give
// (TestScanCarrier).
func scanCarrier(meta []byte) (c carried, ok, sure bool) {
	s := &jsonScan{b: meta}
	if !s.next('{') {
		return carried{}, false, false
	}
	if s.next('}') {
		return carried{}, false, true
	}
	for {
		key, good := s.plainString()
		if !good || !s.next(':') {
			return carried{}, false, false
		}
		// Of a repeated key, encoding/json keeps the last value, as this does.
		switch {
		case string(key) != MetadataKey:
			good = s.skipValue()
		case s.peek('"'):
			var tp []byte
			tp, good = s.plainString()
			c = carried{traceparent: string(tp)}
			ok = good
		default:
			c = carried{}
			c.fields, good = s.stringObject()
			ok = good
		}
		if !good {
			return carried{}, false, false
		}
		if s.next('}') {
			// Trailing bytes other than white space make it invalid JSON.
			s.space()
			return c, ok, s.i == len(s.b)
		}
		if !s.next(',') {
			return carried{}, false, false
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

// peek skips white space and tells whether c comes next.
func (s *jsonScan) peek(c byte) bool {
	s.space()
	return s.i < len(s.b) && s.b[s.i] == c
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
func (s *jsonScan) plainString() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		s.i++
	}
	return nil, false
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
		if _, twice := c[string(k)]; twice {
			return nil, false // encoding/json keeps the last; leave it to it
		}
		c[string(k)] = string(v)
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

// parseTraceparent reads a W3C traceparent as propagation.TraceContext's
// Extract does from a carrier holding only that field
// (TestParseTraceparent), without the contexts Extract allocates: it runs at
// every attempt.
func parseTraceparent(h string) trace.SpanContext {
	var ver, flags [1]byte
	var scc trace.SpanContextConfig
	if !hexPart(ver[:], &h, 2) || ver[0] > maxTraceparentVersion ||
		!hexPart(scc.TraceID[:], &h, 32) || !hexPart(scc.SpanID[:], &h, 16) ||
		!hexPart(flags[:], &h, 2) {
		return trace.SpanContext{}
	}
	if ver[0] == 0 && (h != "" || flags[0] > 3) {
		return trace.SpanContext{} // version 0 has no more fields nor other flags
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// maxTraceparentVersion is the highest version a traceparent may have (ff is
// invalid).
const maxTraceparentVersion = 254

// hexPart decodes into dst the field of *h up to the next '-', which must be n
// lower-case hex digits, and leaves in *h what follows the '-'.
func hexPart(dst []byte, h *string, n int) bool {
	part, rest, _ := strings.Cut(*h, "-")
	*h = rest
	if len(part) != n {
		return false
	}
	for i := 0; i < n; i += 2 {
		hi, ok1 := hexDigit(part[i])
		lo, ok2 := hexDigit(part[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i/2] = hi<<4 | lo
	}
	return true
}

// hexDigit is the value of a lower-case hex digit.
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
