package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/timing"
)

// Mutex is a named mutual-exclusion lock shared by every process that uses
// the same lock blob. A held [Lock]'s lease is renewed automatically; its
// context ends, with a cause, when the lock is lost or its validity passes.
//
// Guarantees: never two holders; each term's fencing epoch above the last
// ([Token]). Waiters are served in the order storage gave their tickets
// ([InspectQueue]); Unlock hands the lease to the next in line, never free
// in between. A waiter whose ctx ends leaves the queue; a dead or paused one
// is passed over by the one behind it (once: it is first when back).
//
// Cost with the defaults: waiters look often while a hold is young, rarely
// once it is old; waiting fails no request (a race for a free lock can).
// Measured on a loopback emulator (bench/results.md has more):
//
//	hold, waiters    requests/s while waiting, all   Unlock call to next Lock, p50
//	10 ms, 1         (hand-offs only)                5 ms
//	1 s, 1 / 50      19.5 / 54                       101 / 119 ms
//	10 min, 1 / 50   0.7 / 3.5 (last minute 0.55 / 1.2)  under 2 s
//
// Safe for concurrent use: each Lock is a holder. Unordered turns the queue off.
type Mutex struct {
	t   target
	cfg holdConfig
	// seen is the highest epoch any of this Mutex's locks has seen, so that
	// epochs keep growing even if the lock blob is created again.
	seen atomic.Uint64
	// health follows whether its requests reach storage, across its locks
	// (and, for a Semaphore's slot, across the Semaphore's slots).
	health *storageHealth
	// fair is its waiting queue, unless MutexOptions.Unordered (nil for a
	// Semaphore's slot: the Semaphore has the queue).
	fair *fairLock
}

// NewMutex returns a Mutex on the lock blob name in the container cc points
// at. It makes no request.
func NewMutex(cc *container.Client, name string, opts *MutexOptions) (*Mutex, error) {
	t, err := newTarget(cc, name, "name")
	if err != nil {
		return nil, err
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	m := &Mutex{t: t, cfg: cfg, health: new(storageHealth)}
	if !cfg.unordered {
		m.fair = &fairLock{
			name: name, q: newQueue(t, []string{t.blob}, cfg.lease, m.health), cfg: cfg, slots: []*Mutex{m},
			look: func(ctx context.Context, budget time.Duration) ([]Status, error) {
				st, err := m.newLease().inspect(ctx, time.Now().Add(budget))
				return []Status{st}, err
			},
			unreachable: m.unreachable,
			what:        fmt.Sprintf("lock %s/%s", t.container, t.blob),
		}
	}
	return m, nil
}

// Lock is a held Mutex: one term of its lease. It embeds the [Term], whose
// context is cancelled when the lock is lost or unlocked, and whose token
// fences the holder's writes.
//
// The zero Lock is not held: its Term methods report [ErrNotHeld] and
// Unlock returns an error.
type Lock struct {
	*Term
	k     *keeper
	lease *Lease

	fair     *fairState  // set when taken through a fair lock: Unlock hands it to the next waiter
	mu       sync.Mutex  // serialises Unlock
	stopped  bool        // the term has ended and its renewals stopped
	released bool        // the lease was released, or is known to be gone
	lost     error       // the loss that ended the term while held, if any
	err      error       // the result of the last Unlock
	maxHold  *time.Timer // takes the lock away after MutexOptions.MaxHold
	// maxHoldFired is closed when maxHold's function has returned.
	maxHoldFired chan struct{}
}

// TryLock takes the mutex if it is free, without waiting for a holder: ok is
// false and err is nil when it is held elsewhere, a normal outcome. A fair
// Mutex (the default) never jumps its queue: it takes a free mutex only if
// nobody waits (a read, then a listing of the queue), and costs one read
// when the mutex is held. When the mutex is free and someone waits, it
// watches whether the first in line takes it, for as long as that waiter may
// take to (see [Mutex]), and passes it over if it does not (a dead waiter),
// within 2 × AttemptTimeout in all; waiters passed over do not count. With
// MutexOptions.Unordered it acquires directly (one request, refused when
// held). Transient failures are retried briefly, for at most 2 ×
// AttemptTimeout (6 s by default) and never past ctx's deadline; failures
// that persist return an error that carries the last one.
//
// The Lock's context ends when the lock is lost; it carries ctx's values but
// not its cancellation: cancel work through the Lock, or Unlock it.
func (m *Mutex) TryLock(ctx context.Context) (lock *Lock, ok bool, err error) {
	if err := m.initErr(); err != nil {
		return nil, false, err
	}
	if m.fair != nil {
		lk, _, err := m.fair.tryFree(ctx, true)
		return lk, lk != nil, err
	}
	l := m.newLease()
	return m.tryLock(ctx, l, 2*l.cfg.attemptTimeout, nil)
}

// initErr is ErrNotInitialized, naming the constructor, for a zero or nil
// Mutex.
func (m *Mutex) initErr() error {
	if m == nil || m.t.cc == nil {
		return fmt.Errorf("%w: a zero or nil azlease.Mutex cannot be used; use NewMutex", ErrNotInitialized)
	}
	return nil
}

// newLease returns a Lease for one Lock, sharing the Mutex's memory of epochs.
func (m *Mutex) newLease() *Lease {
	l := newLease(m.t, m.cfg.lease)
	l.seen, l.health = &m.seen, m.health
	return l
}

// tryLock tries once with l, which Lock reuses across its tries (a lease ID
// refused with a definitive answer is proposed again by the next try).
// seen, when not nil, is what a look just before found (see bumpEpoch).
func (m *Mutex) tryLock(ctx context.Context, l *Lease, budget time.Duration, seen *Status) (lock *Lock, ok bool, err error) {
	tok, err := l.acquireWithin(ctx, budget, seen)
	switch {
	case errors.Is(err, ErrLeaseHeld):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return m.newLock(ctx, l, tok), true, nil
}

// newLock starts holding the term tok that l just began: its keeper, and
// the MaxHold timer.
func (m *Mutex) newLock(ctx context.Context, l *Lease, tok Token) (lock *Lock) {
	k := hold(context.WithoutCancel(ctx), l, tok, m.cfg.renewEvery, nil)
	l.cfg.log.Info("azlease: locked", slog.Uint64("epoch", tok.Epoch))
	lock = &Lock{Term: k.term, k: k, lease: l}
	if d := m.cfg.maxHold; d > 0 {
		fired := make(chan struct{})
		lock.maxHoldFired = fired
		lock.maxHold = time.AfterFunc(d, func() {
			defer close(fired)
			if k.term.Err() == nil {
				l.cfg.log.Warn("azlease: lock held longer than MaxHold; taking it away (its lease is no longer renewed)",
					slog.Uint64("epoch", tok.Epoch), slog.Duration("max_hold", d))
			}
			k.stop(ErrMaxHoldExceeded)
		})
	}
	return lock
}

// Lock waits until it takes the mutex or ctx ends. It takes a free mutex
// nobody waits for at once; otherwise it waits in the queue, in the order
// of asking, and takes the lock when the holder hands it over (see [Mutex]
// for the waiting and what it costs); a Lock whose ctx ends leaves the
// queue. The lock it returns is valid: a term that ended before it could
// be returned (storage slow to answer) is given back, and it waits again.
// No request it makes while waiting fails while the mutex is held.
// With MutexOptions.Unordered, each poll, every PollInterval (with jitter),
// reads the lock blob (one Get Blob Properties request) and tries to
// acquire only when the read finds the lease free; the acquisition then
// costs what a TryLock's does (the read stands in for the one its epoch
// write would make). Errors that persist are returned, except transient
// ones, which it keeps retrying until ctx ends, or until every request has
// failed for MutexOptions.UnreachableTimeout (1 minute by default): then it
// returns an error wrapping [ErrUnreachable].
func (m *Mutex) Lock(ctx context.Context) (*Lock, error) {
	if err := m.initErr(); err != nil {
		return nil, err
	}
	if m.fair != nil {
		start := time.Now()
		lk, err := m.fair.lock(ctx)
		outcome := "acquired"
		switch {
		case err != nil && ctx.Err() != nil:
			outcome = "canceled"
		case err != nil:
			outcome = "error"
		}
		m.newLease().tm.waited(time.Since(start), outcome)
		return lk, err
	}
	l := m.newLease()
	start := time.Now()
	var last error // the last failure, kept for the final error
	gaveUp := func() (*Lock, error) {
		l.tm.waited(time.Since(start), "canceled")
		if last == nil {
			return nil, fmt.Errorf("azlease: lock %s/%s: %w", m.t.container, m.t.blob, context.Cause(ctx))
		}
		return nil, fmt.Errorf("azlease: lock %s/%s: %w; last attempt: %w", m.t.container, m.t.blob, context.Cause(ctx), lastAttempt(last))
	}
	for {
		lock, ok, err := m.lookThenLock(ctx, l, l.cfg.duration)
		if err != nil {
			last = err
		}
		switch {
		case ok:
			l.tm.waited(time.Since(start), "acquired")
			return lock, nil
		case ctx.Err() != nil:
			return gaveUp()
		case err != nil && !errors.Is(err, ErrTransient):
			l.tm.waited(time.Since(start), "error")
			return nil, err
		case err != nil:
			m.cfg.lease.log.Debug("azlease: lock attempt failed; retrying", slog.Any("error", err))
		}
		if err := m.unreachable(); err != nil {
			l.tm.waited(time.Since(start), "error")
			return nil, err
		}
		if !sleepCtx(ctx, timing.Jitter(m.cfg.poll, m.cfg.jitter, mrand.Float64())) {
			return gaveUp()
		}
	}
}

// lookThenLock is one poll of Lock: it reads the lock blob, retrying
// transient failures for at most budget, and tries to acquire (for at most
// budget) only if the lease is free (available, expired or broken; a
// missing blob is created). ok is false and err nil when the lease is held.
func (m *Mutex) lookThenLock(ctx context.Context, l *Lease, budget time.Duration) (lock *Lock, ok bool, err error) {
	st, err := l.inspect(ctx, time.Now().Add(budget))
	if err != nil || st.Leased {
		return nil, false, err
	}
	return m.tryLock(ctx, l, budget, &st)
}

// unreachable is the error that ends Lock's wait once every request to
// storage has failed for MutexOptions.UnreachableTimeout, or nil.
func (m *Mutex) unreachable() error {
	if err := m.health.unreachable(time.Now(), m.cfg.unreachable, m.t.endpoint()); err != nil {
		return fmt.Errorf("azlease: lock %s/%s: %w", m.t.container, m.t.blob, err)
	}
	return nil
}

// Unlock ends the lock's term (its context ends, cause [ErrStopped]). With
// nobody waiting it releases the lease, marked clean in the lock blob
// ([Status.Released]). Otherwise it hands the lease to the first in line,
// never free in between, and returns once that waiter's hand-off is written
// (two requests, three with a renewal): it passes nobody over. Only when
// the next two in line may both sleep past the lease (after the queue stood
// still for minutes) does it wait, keeping the lease alive until one of
// them takes it, at most as long as a waiter sleeps; ctx bounds that wait
// (Unlock then returns ctx's error, not [ErrLeaseLost]: the term was
// exclusive), and the lease expires as a crashed holder's would.
//
// It returns an error wrapping [ErrLeaseLost] if the lock was lost while
// held or its validity passed before the call (a process paused past it):
// the critical section may not have been exclusive to its end; a newer
// holder is never affected. With ctx already ended (a deferred Unlock at
// shutdown) it makes one attempt bounded by AttemptTimeout. If the release
// fails, the lease expires on its own and calling Unlock again retries;
// after a success, later calls return the same result without a request.
func (lk *Lock) Unlock(ctx context.Context) error {
	if lk == nil || lk.k == nil {
		return fmt.Errorf("azlease: Unlock of a Lock that Mutex.Lock or TryLock did not return: %w", ErrNotHeld)
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.stopLocked()
	if lk.released {
		return lk.err
	}
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), lk.lease.cfg.attemptTimeout)
		defer cancel()
	}
	if lk.fair != nil && lk.lost == nil {
		// A fair lock: hand the lease to the first waiter in line.
		if handed, err := lk.unlockFair(rctx); handed {
			lk.released, lk.err = true, err
			return err
		}
	}
	// Only this term's own lease ID is released: a Lease held again (by
	// Lease.Hold) after this lock's term ended has a newer term, which
	// this Unlock must never release.
	gone, err := lk.lease.releaseTerm(rctx, lk.Token().LeaseID)
	if gone {
		lk.released, lk.err = true, lk.lost
		lk.lease.cfg.log.Debug("azlease: unlock of a term whose lease was already given up; nothing to release", slog.Uint64("epoch", lk.Epoch()))
		return lk.err
	}
	lk.released = err == nil || errors.Is(err, ErrLeaseLost)
	switch {
	case lk.lost != nil:
		lk.err = lk.lost
	case errors.Is(err, ErrLeaseLost):
		lk.err = err
	case err != nil:
		lk.lease.cfg.log.Warn("azlease: release failed; the lock frees itself when its lease expires, or at a later Unlock", slog.Any("error", err))
		lk.err = err
	default:
		lk.err = nil
		lk.lease.cfg.log.Info("azlease: unlocked", slog.Uint64("epoch", lk.Epoch()))
	}
	return lk.err
}

// stopLocked ends the lock's term and its renewals, once, and records a
// loss that ended it first; lk.mu is held.
func (lk *Lock) stopLocked() {
	if lk.stopped {
		return
	}
	// A term whose validity passed before this call ended then, even if
	// no azlease goroutine has run since (its process was paused, and the
	// deadline timer has not fired yet): Err ends it with
	// ErrDeadlinePassed, so that it counts as lost below, not stopped.
	_ = lk.Term.Err()
	if lk.maxHold != nil && !lk.maxHold.Stop() {
		<-lk.maxHoldFired // it fired: wait for it, as for every goroutine azlease starts
	}
	lk.k.stop(ErrStopped)
	lk.stopped = true
	if lost := lk.Term.Err(); !errors.Is(lost, ErrStopped) {
		lk.lost = lost
	}
}

// Do runs fn while holding the mutex and always unlocks afterwards: the
// equivalent of a deferred Unlock. It waits for the mutex as Lock does. fn gets
// the lock's context, which ends if the lock is lost, and the Lock itself,
// for its fencing token and the state it fences ([Term.Read], [Term.Write]).
// Do returns fn's error; if fn succeeded but the lock was lost meanwhile, it
// returns the loss (an error wrapping [ErrLeaseLost]).
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context, lock *Lock) error) error {
	if err := m.initErr(); err != nil {
		return err
	}
	if fn == nil {
		return optionErr("fn", "nil function")
	}
	lock, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer lock.Unlock(context.WithoutCancel(ctx)) // also if fn panics
	ferr := fn(lock.Context(), lock)
	uerr := lock.Unlock(context.WithoutCancel(ctx))
	if ferr != nil {
		return ferr
	}
	return uerr
}

// Claim takes the first of the named locks that nobody holds, in order, and
// returns its name and Lock: a job reservation, where several workers split
// a list of jobs. When every lock is held it returns an error wrapping
// [ErrLeaseHeld]. Each name is a lock blob in the container cc points at.
//
// It looks before it acquires: one List Blobs request (per 5,000 blobs under
// the names' longest common prefix) shows which names are free (available,
// expired, broken, or not created yet), and Claim tries only those, in
// order; a name taken meanwhile is refused (one request) and Claim goes on.
// So a Claim over names that are all held costs one request, none failing,
// and taking a free one costs what a TryLock costs. Names without a common
// prefix make it list the whole container: give them one ("jobs/…").
// Transient failures are retried for at most 2 × AttemptTimeout per request;
// a listing that fails returns its error.
func Claim(ctx context.Context, cc *container.Client, names []string, opts *MutexOptions) (string, *Lock, error) {
	if len(names) == 0 {
		return "", nil, optionErr("names", "empty list")
	}
	mutexes := make([]*Mutex, len(names))
	for i, name := range names {
		m, err := NewMutex(cc, name, opts)
		if err != nil {
			return "", nil, err
		}
		mutexes[i] = m
	}
	cfg := mutexes[0].cfg
	budget := 2 * cfg.lease.attemptTimeout
	prefix := commonPrefix(names)
	listed, err := newListLease(mutexes[0].t, prefix, cfg.lease).listPrefix(ctx, prefix, time.Now().Add(budget))
	if err != nil {
		return "", nil, fmt.Errorf("azlease: claim: %w", err)
	}
	seen := make(map[string]Status, len(listed))
	for _, st := range listed {
		seen[st.Name] = st
	}
	var errs []error
	for i, m := range mutexes {
		st, ok := seen[names[i]]
		if !ok {
			st = Status{Name: names[i]} // not created yet: free
		}
		if st.Leased {
			continue
		}
		l := m.newLease()
		l.see(st.Epoch)
		lock, ok, err := m.tryLock(ctx, l, budget, &st)
		if ok {
			return names[i], lock, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) > 0 {
		return "", nil, errors.Join(errs...)
	}
	return "", nil, fmt.Errorf("%w: all %d locks are held", ErrLeaseHeld, len(names))
}

// commonPrefix is the longest prefix every name shares, cut back to a whole
// UTF-8 character so that it is a valid listing prefix.
func commonPrefix(names []string) string {
	p := names[0]
	for _, n := range names[1:] {
		i := 0
		for i < len(p) && i < len(n) && p[i] == n[i] {
			i++
		}
		p = p[:i]
	}
	for len(p) > 0 && !utf8.ValidString(p) {
		p = p[:len(p)-1]
	}
	return p
}
