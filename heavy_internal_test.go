package azlease

// heavyTest: how the root package's long single-bubble tests share the
// machine. Each such test (one synctest bubble that keeps a core busy for
// seconds) runs in parallel with the others, at most GOMAXPROCS at once, so
// that on CI's two cores two of them run side by side instead of one after
// another, while the real-time tests that run in parallel beside them
// (Azurite, multi-process) are not starved by a dozen bubbles at once.
// The simulations that spread their own seeds over the cores stay serial,
// and so does a test that sets a package hook (SetFairHook,
// SetAlwaysReread) or counts the process's goroutines: a parallel test
// would see it, or add to them.

import (
	"runtime"
	"testing"
)

var heavySlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// heavyTest marks t parallel and waits for one of the heavy slots, which
// t's cleanup gives back. Call it first in the test, outside any bubble.
func heavyTest(t *testing.T) {
	t.Helper()
	t.Parallel()
	heavySlots <- struct{}{}
	t.Cleanup(func() { <-heavySlots })
}
