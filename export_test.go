package azlease

import "context"

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

// SetFairHook installs f as the fair locks' test hook (fairHook: a waiter's
// events, by lock name and ticket) and returns a function that restores the
// previous one. Set it before the waiters start and restore it after they
// have stopped: the hook is a package variable, read without a lock.
func SetFairHook(f func(event, lock string, ticket uint64)) (restore func()) {
	prev := fairHook
	fairHook = f
	return func() { fairHook = prev }
}

// GoroutineID is the calling goroutine's id: fairHook's events about a
// waiter's own ticket run on the goroutine that called Lock.
func GoroutineID() uint64 { return goroutineID() }

// HandOnAs runs the hand-on of a succession or a fair Unlock on l for the
// term whose lease ID is id, with no successor (so it would release the
// lease), and returns its error.
func HandOnAs(ctx context.Context, l *Lease, id string) error {
	_, err := l.handOn(ctx, id, nil)
	return err
}
