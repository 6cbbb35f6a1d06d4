package weirotel

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/propagation"
)

// referenceCarrier is what carrierOf must give: with encoding/json, the
// object under the top-level key "weirotel", written without escapes.
func referenceCarrier(meta []byte) propagation.MapCarrier {
	if !bytes.Contains(meta, []byte(`"weirotel"`)) {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(meta, &fields) != nil {
		return nil
	}
	var c propagation.MapCarrier
	if json.Unmarshal(fields["weirotel"], &c) != nil {
		return nil
	}
	return c
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
		got, want := carrierOf(json.RawMessage(meta)), referenceCarrier([]byte(meta))
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
		got, want := carrierOf(json.RawMessage(meta)), referenceCarrier([]byte(meta))
		if !maps.Equal(got, want) {
			t.Errorf("%q: carrier %v, want %v", meta, got, want)
		}
	})
}
