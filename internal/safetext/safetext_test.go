package safetext_test

import (
	"testing"

	"github.com/weirq/weir/internal/safetext"
)

func TestUnsafe(t *testing.T) {
	t.Parallel()
	for _, r := range []rune{0, '\n', 0x1b, 0x7f, 0x85, 0x9f, 0x061c, 0x200e, 0x200f, 0x202a, 0x202e, 0x2066, 0x2069, 0x2028, 0x2029} {
		if !safetext.Unsafe(r) {
			t.Errorf("U+%04X is not unsafe", r)
		}
	}
	for _, r := range []rune{' ', 'a', '~', 0xa0, 0xe9, 0x200b, 0x2026, 0x2070, 0x4e2d, 0x1f600} {
		if safetext.Unsafe(r) {
			t.Errorf("U+%04X is unsafe", r)
		}
	}
	if got := safetext.Escape(0x202e); got != `\u202e` {
		t.Errorf("Escape(U+202E) = %s", got)
	}
	if got := safetext.Escape(0x1b); got != `\u001b` {
		t.Errorf("Escape(ESC) = %s", got)
	}
}
