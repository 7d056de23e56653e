package azlease

import (
	"context"
	"time"
)

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

// HandOnEachAs runs the hand-on of the term with lease ID id on l, the
// successors given one at a time by next (its key, the lease ID it
// announced, and how long it may take), and returns the key of the one
// that took the lease ("" if none) and its error.
func HandOnEachAs(ctx context.Context, l *Lease, id string, next func() (key, announced string, wait time.Duration, ok bool)) (string, error) {
	out, err := l.handOnEach(ctx, id, func() (successor, bool) {
		key, announced, wait, ok := next()
		return successor{key: key, id: announced, wait: wait}, ok
	})
	return out.taker, err
}

// TakeOverAs takes over, on l, a lease handed to the ID l announced
// (NextLeaseID), st being the look that found the hand-off.
func TakeOverAs(ctx context.Context, l *Lease, st Status) (Token, error) {
	return l.takeOver(ctx, l.cfg.duration, &st)
}

// HandOffID is the lease ID a hand-off of the term with epoch epoch to the
// successor that announced the lease ID announced uses.
func HandOffID(announced string, epoch uint64) string { return handOffID(announced, epoch) }

// StopTimers disarms the deadline and renewal timers of lk's term, as if
// its process had been paused and none of azlease's goroutines had run
// since: the term's validity passes with nothing to notice it but the
// clock (Term.Err and Valid check it themselves).
func StopTimers(lk *Lock) {
	k := lk.k
	k.mu.Lock()
	defer k.mu.Unlock()
	k.disarm(k.deadline)
	k.disarm(k.renewal)
	if k.phase == phaseWaiting {
		k.phase = phaseIdle
	}
}

// DefaultHeadPollInterval and DefaultPollInterval are what zero
// MutexOptions.HeadPollInterval and PollInterval mean.
const (
	DefaultHeadPollInterval = defaultHeadPoll
	DefaultPollInterval     = time.Second
)

// HeavyTest runs a long single-bubble test in parallel with the others,
// at most GOMAXPROCS at once (heavy_internal_test.go).
var HeavyTest = heavyTest
