package weirui

import "testing"

// The hash an unknown user is checked against must parse, or an unknown
// name would answer faster than a known one.
func TestUnknownUserHashParses(t *testing.T) {
	t.Parallel()
	h, err := parseHash(unknownUserHash)
	if err != nil {
		t.Fatal(err)
	}
	if h.iter != defaultIterations {
		t.Errorf("iterations %d, want %d", h.iter, defaultIterations)
	}
}
