package dbtest_test

import (
	"testing"

	"github.com/weirq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }
