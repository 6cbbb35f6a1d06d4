package main

import (
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

// TestMain runs the tests against the test database (internal/dbtest).
func TestMain(m *testing.M) { dbtest.Main(m) }
