package weirotel

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// referenceCarrier is what carrierOf must give: with encoding/json, the value
// under the top-level key "weirotel", written without escapes: a string is the
// traceparent, an object of strings the propagator's fields.
func referenceCarrier(meta []byte) propagation.MapCarrier {
	if !bytes.Contains(meta, []byte(`"weirotel"`)) {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) != nil {
		return nil
	}
	var tp string
	if json.Unmarshal(fields["weirotel"], &tp) == nil && bytes.HasPrefix(bytes.TrimSpace(fields["weirotel"]), []byte(`"`)) {
		return propagation.MapCarrier{"traceparent": tp}
	}
	var c propagation.MapCarrier
	if json.Unmarshal(fields["weirotel"], &c) != nil {
		return nil
	}
	return c
}

// read is what carrierOf gives, as a propagator reads it; nil for none.
func read(meta string) propagation.MapCarrier {
	c, ok := carrierOf(json.RawMessage(meta))
	if !ok {
		return nil
	}
	return c.carrier()
}

var carrierCases = []string{
	``,
	`{}`,
	`{"tenant":"acme"}`,
	`{"weirotel":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`,
	`{"tenant": "acme", "weirotel": {"traceparent": "00-ab-cd-01", "tracestate": "k=v"}}`,
	`{"a":[1,{"b":"}"},"]"],"weirotel":{"traceparent":"x"},"z":null}`,
	`{"n":-1.5e3,"t":true,"f":false,"weirotel":{}}`,
	`{"nested":{"weirotel":{"traceparent":"not top level"}}}`,
	`{"note":"weirotel"}`,
	`{"weirotel":"a string"}`,
	`{"weirotel":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
	`{"tenant":{"a":1},"weirotel" : "x" }`,
	`{"weirotel":"x","weirotel":{"traceparent":"y"}}`,
	`{"weirotel":{"traceparent":"y"},"weirotel":"x"}`,
	`{"weirotel":"a\u0041"}`,
	`{"weirotel":"cafÃ©"}`,
	`{"weirotel":1}`,
	`{"weirotel":[]}`,
	`{"weirotel":{"traceparent":1}}`,
	`{"weirotel":{"traceparent":"a\"b"}}`,
	`{"weirotel":{"trace\u0070arent":"x"}}`,
	`{"we\u0069rotel":{"traceparent":"x"},"weirotel":{"traceparent":"y"}}`,
	`{"WEIROTEL":{"traceparent":"x"}}`,
	`{"weirotel":{"traceparent":"x","traceparent":"y"}}`,
	`{"weirotel":{"traceparent":"x"},"weirotel":{"traceparent":"y"}}`,
	`{"weirotel":{"traceparent":"x"}} trailing`,
	`{"weirotel":{"traceparent":"x"}`,
	`{"weirotel":{"traceparent":"x"},}`,
	`["weirotel"]`,
	`{"a":"\\","weirotel":{"traceparent":"x"}}`,
	`{"weirotel":null}`,
	"{\"weirotel\":{\"traceparent\":\"tab\there\"}}",
}

// TestScanCarrier checks that carrierOf reads what encoding/json reads, on the
// shapes the hand-written reader takes and on those it leaves to encoding/json.
func TestScanCarrier(t *testing.T) {
	for _, meta := range carrierCases {
		got, want := read(meta), referenceCarrier([]byte(meta))
		if !maps.Equal(got, want) {
			t.Errorf("%s: carrier %v, want %v", meta, got, want)
		}
	}
}

func FuzzScanCarrier(f *testing.F) {
	for _, meta := range carrierCases {
		f.Add(meta)
	}
	f.Fuzz(func(t *testing.T, meta string) {
		got, want := read(meta), referenceCarrier([]byte(meta))
		if !maps.Equal(got, want) {
			t.Errorf("%q: carrier %v, want %v", meta, got, want)
		}
	})
}

var traceparentCases = []string{
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
	"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra",
	"fe-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
	"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
	"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
	"0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
	"",
}

// TestParseTraceparent checks that parseTraceparent reads a traceparent as
// propagation.TraceContext's Extract does.
func TestParseTraceparent(t *testing.T) {
	for _, h := range traceparentCases {
		checkTraceparent(t, h)
	}
}

func FuzzParseTraceparent(f *testing.F) {
	for _, h := range traceparentCases {
		f.Add(h)
	}
	f.Fuzz(checkTraceparent)
}

func checkTraceparent(t *testing.T, h string) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": h})
	want := trace.SpanContextFromContext(ctx)
	if got := parseTraceparent(h); !got.Equal(want) || got.IsRemote() != want.IsRemote() {
		t.Errorf("%q: %v, want %v", h, got, want)
	}
}
