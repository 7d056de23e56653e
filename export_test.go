package azlease

// SetBeforeRenew installs a hook that runs before each renewal of e's
// leases, so tests can make the renewer oversleep as if its process had been
// paused. Test-only: this file is compiled only into the package's tests.
func SetBeforeRenew(e *Elector, f func()) { e.beforeRenew = f }

// SetAlwaysReread makes every acquisition read the lock blob's record again
// under its new lease, ignoring what a waiter's look saw, as before issue
// 19, so that a benchmark can measure both side by side. It returns a
// function that restores the previous setting.
func SetAlwaysReread(on bool) (restore func()) {
	prev := alwaysReread.Swap(on)
	return func() { alwaysReread.Store(prev) }
}
