package gocronlock

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// runChild lets this test binary serve as a child process of the
// multi-process test (multiprocess_test.go sets it): it reports whether the
// environment asks for a child, and the child's exit status.
var runChild = func() (status int, isChild bool) { return 0, false }

func TestMain(m *testing.M) {
	// A child runs before goleak and any test, and exits with its own
	// status.
	if status, isChild := runChild(); isChild {
		os.Exit(status)
	}
	goleak.VerifyTestMain(m)
}
