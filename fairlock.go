package azlease

// Fair locks: a Mutex or Semaphore whose waiters are served in the order
// they asked (the default; MutexOptions.Unordered turns it off). The queue
// is in queue.go, the hand-off from holder to waiter in succession.go; this
// file is the waiting and the unlocking. docs/design/fair-locks.md explains
// the mechanism: who looks at what, when, and how a dead waiter is passed
// over.
//
// A waiter that finds the lock free and nobody waiting takes it, as an
// unordered one does. Otherwise it takes a ticket, joins the queue, and
// waits: the first in line polls the lock every HeadPollInterval and takes
// it when it is handed to it or free; the one behind it polls the lock
// too, to take a hand-off passed on to it soon; the others list the queue
// (with the lock's own blobs), less often the further back they are. Any
// waiter, and a TryLock, that sees a slot of the lock stay free for longer
// than the first in line takes to react passes the first over (marks it
// missed), so the queue never sticks behind dead waiters. A contended
// Unlock never frees the lease: it hands it to the first in line
// (succession.go), so a waiter that arrives later, ordered or not, cannot
// take it first.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/azlease/azlease/internal/timing"
)

// fairLock is the waiting of a fair Mutex (one slot: its lock blob) or
// Semaphore (its slots).
type fairLock struct {
	name  string
	q     *queue
	cfg   holdConfig
	slots []*Mutex
	// look reads every slot's status, in slot order: the first waiter's
	// poll (one Get Blob Properties for a Mutex, one List Blobs for a
	// Semaphore).
	look func(ctx context.Context, budget time.Duration) ([]Status, error)
	// unreachable is the caller's ErrUnreachable bound (Mutex, Semaphore).
	unreachable func() error
	// what names the lock in errors ("lock locks/x", "semaphore s (3 slots)").
	what string
	// local are the waiters of this Mutex or Semaphore value in this
	// process, by ticket key: an Unlock that hands the lock to one of them
	// wakes it (wake), so that it takes the lock without waiting for its
	// next look. The queue's order decides who is handed the lock, local
	// or not.
	localMu sync.Mutex
	local   map[string]chan struct{}
}

// waitLocal registers a waiter of this process under its ticket key; the
// channel is signalled when an Unlock hands it the lock. done forgets it.
func (f *fairLock) waitLocal(key string) (wake chan struct{}, done func()) {
	wake = make(chan struct{}, 1)
	f.localMu.Lock()
	if f.local == nil {
		f.local = map[string]chan struct{}{}
	}
	f.local[key] = wake
	f.localMu.Unlock()
	return wake, func() {
		f.localMu.Lock()
		delete(f.local, key)
		f.localMu.Unlock()
	}
}

// wake signals the waiter of this process with ticket key, if there is one
// (it looks at once).
func (f *fairLock) wake(key string) {
	f.localMu.Lock()
	defer f.localMu.Unlock()
	if c, ok := f.local[key]; ok {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// sleepWake is sleepCtx that also ends when wake is signalled (nil: never);
// false when ctx ended.
func sleepWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	ok, _ := sleepWoken(ctx, d, wake)
	return ok
}

// sleepWoken is sleepWake, also reporting whether wake ended the sleep.
func sleepWoken(ctx context.Context, d time.Duration, wake <-chan struct{}) (ok, woken bool) {
	if wake == nil {
		return sleepCtx(ctx, d), false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return true, false
	case <-wake:
		return true, true
	}
}

// fairState is what a Lock taken through a queue knows for its Unlock.
type fairState struct {
	f       *fairLock
	key     string        // its own ticket's key, or "" (it took a free lock without queuing)
	took    time.Time     // when it took the lock
	wasHead time.Duration // how long it was first or second in line before (the queue's recent pace)
}

// errRequeue means a waiter found itself no longer in the queue (a holder
// removed it after it missed its turn twice): it joins again.
var errRequeue = errors.New("azlease: removed from the queue")

// lock waits for the lock in the queue's order; see the top of this file.
func (f *fairLock) lock(ctx context.Context) (*Lock, error) {
	// A lease this waiter may have been granted when its wait ends (its
	// take-over's Change Lease applied, its epoch not written yet) is
	// given back even after ctx has ended: the queue waits for that lock.
	ctx = context.WithValue(ctx, giveBackKey{}, true)
	var last error
	gaveUp := func() (*Lock, error) {
		if last == nil {
			return nil, fmt.Errorf("azlease: %s: %w", f.what, context.Cause(ctx))
		}
		return nil, fmt.Errorf("azlease: %s: %w; last attempt: %w", f.what, context.Cause(ctx), lastAttempt(last))
	}
	// The lock free and nobody waiting: take it, as an unordered waiter.
	for {
		lk, queued, err := f.tryFree(ctx, false)
		if lk != nil {
			return lk, nil
		}
		if err != nil && retryable(err) {
			last = err
		}
		if ctx.Err() != nil {
			return gaveUp()
		}
		if err == nil && queued {
			break
		}
		if err != nil && !retryable(err) {
			return nil, err
		}
		if err := f.unreachable(); err != nil {
			return nil, err
		}
		if !sleepCtx(ctx, timing.Jitter(f.cfg.headPoll, f.cfg.jitter, mrand.Float64())) {
			return gaveUp()
		}
	}
	for {
		w, err := f.join(ctx, f.slots[0].cfg.lease.duration)
		switch {
		case ctx.Err() != nil:
			return gaveUp()
		case err != nil && !retryable(err):
			return nil, err
		case err != nil:
			last = err
			if err := f.unreachable(); err != nil {
				return nil, err
			}
			if !sleepCtx(ctx, timing.Jitter(f.cfg.headPoll, f.cfg.jitter, mrand.Float64())) {
				return gaveUp()
			}
			continue
		}
		fairHook("joined", f.name, w.Ticket)
		lk, err := f.wait(ctx, w, &last)
		if lk != nil {
			fairHook("served", f.name, w.Ticket)
			return lk, nil
		}
		f.leave(ctx, w)
		switch {
		case errors.Is(err, errRequeue):
			fairHook("removed", f.name, w.Ticket)
			f.cfg.lease.log.Info("azlease: removed from the lock's queue after missing its turn; joining again at the back", slog.Uint64("ticket", w.Ticket))
			continue
		case ctx.Err() != nil:
			fairHook("left", f.name, w.Ticket)
			return gaveUp()
		}
		fairHook("left", f.name, w.Ticket)
		return nil, err
	}
}

// retryable reports whether a failure met while waiting for a fair lock
// leaves the waiter waiting: transient failures (retried until ctx ends or
// storage has been unreachable for UnreachableTimeout), and a lock taken or
// lost under a take-over (it looks again). Refusals for good
// (ErrPermanent), ErrUnreachable and anything unexpected end the wait.
func retryable(err error) bool {
	return !errors.Is(err, ErrUnreachable) &&
		(errors.Is(err, ErrTransient) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrLeaseHeld) || errors.Is(err, errHandOffGone))
}

// fairHook, when tests set it, is told of a waiter's events, on the
// waiter's goroutine: "ticket" (its ticket taken), "joined" (its blob
// created), "served", "left" (its ctx ended or it failed), "removed" (a
// holder removed it; it joins again) and "back" (it found itself missed
// and cleared the mark); and, on the goroutine of whoever passed it over,
// "missed" (its turn came and it did not take the lock) and "evicted" (a
// holder removed it, missed and silent).
var fairHook = func(event, lock string, ticket uint64) {}

// tryFree takes a free slot if nobody waits: one look, and when a slot is
// free, one listing of the queue (which shows the slots too). queued is
// true when the caller should join the queue (everything held, or someone
// waits). With unstick (TryLock), a slot that is free while someone waits
// is watched a little longer: if it stays free for longer than the first
// waiter takes to react, the first is passed over (missed) and the queue
// looked at again, all within 2 × AttemptTimeout and ctx's deadline (a
// first waiter whose reaction time does not fit is left to waiters, or a
// later TryLock). Waiters marked missed do not count as waiting.
func (f *fairLock) tryFree(ctx context.Context, unstick bool) (lk *Lock, queued bool, err error) {
	try := 2 * f.cfg.lease.attemptTimeout
	// Watching stops in time for the requests that follow (a look, a
	// listing, the mark or the acquisition): within 2 × AttemptTimeout,
	// and before ctx's deadline, so that a watch never ends in ctx's error.
	end := time.Now().Add(try)
	if d, ok := ctx.Deadline(); ok && d.Add(-4*awaitLook).Before(end) {
		end = d.Add(-4 * awaitLook)
	}
	var fw freeWatch
	for {
		sts, err := f.look(ctx, try)
		if err != nil {
			return nil, false, err
		}
		if !slices.ContainsFunc(sts, func(st Status) bool { return !st.Leased }) {
			return nil, true, nil
		}
		v, err := f.q.list(ctx, time.Now().Add(try))
		if err != nil {
			return nil, false, err
		}
		if ws := effective(v.ws, noTicket); len(ws) > 0 {
			if !unstick {
				return nil, true, nil
			}
			// Someone waits while a slot is free: the first takes it
			// within its reaction time if it is there.
			passed, due := f.passStuck(ctx, ws[0], v.locks, v.sent, v.got, &fw)
			switch {
			case passed:
				continue
			case due.IsZero() || due.After(end):
				return nil, true, nil
			}
			if !sleepCtx(ctx, time.Until(due)) {
				return nil, false, context.Cause(ctx)
			}
			continue
		}
		for i := range v.locks {
			st := v.locks[i]
			if st.Leased {
				continue
			}
			m := f.slots[i]
			l := m.newLease()
			l.see(st.Epoch)
			lk, ok, err := m.tryLock(ctx, l, try, &st)
			switch {
			case ok:
				lk.fair = &fairState{f: f, took: time.Now()}
				if !v.tickets {
					// The queue has never given a ticket: its first
					// generation, made by the one holder rather than
					// raced by the waiters that come (one request, once
					// per lock; a failure leaves it to them).
					_, _ = f.q.createGeneration(ctx, time.Now().Add(f.cfg.lease.attemptTimeout), 0)
				}
				return lk, false, nil
			case err != nil:
				return nil, false, err
			}
		}
		return nil, true, nil
	}
}

// join takes a ticket and puts the waiter in the queue.
func (f *fairLock) join(ctx context.Context, budget time.Duration) (waiter, error) {
	limit := time.Now().Add(budget)
	ticket, err := f.q.take(ctx, limit)
	if err != nil {
		return waiter{}, fmt.Errorf("azlease: %s: joining the queue: %w", f.what, err)
	}
	fairHook("ticket", f.name, ticket)
	w, err := f.q.join(ctx, limit, ticket, newLeaseID(), f.cfg.lease.identity, f.cfg.headPoll, f.cfg.poll)
	if err != nil {
		return waiter{}, fmt.Errorf("azlease: %s: joining the queue: %w", f.what, err)
	}
	return w, nil
}

// leave takes w out of the queue, within what ctx leaves (one attempt if it
// has ended): a waiter that did not get the lock.
func (f *fairLock) leave(ctx context.Context, w waiter) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.lease.attemptTimeout)
	defer cancel()
	_ = f.q.remove(cctx, w, false)
}

// polling is what a waiter's looks remember from one round of wait to the
// next (head, next, takeTurn).
type polling struct {
	moved   time.Time // when the queue last moved, as far as it saw
	looked  time.Time // when it last looked at the lock right behind the first
	handing handWatch // the hand-offs to others it saw right behind the first
	retried string    // the last hand-off to it that it tried to take more than once (takeTurn)
	free    freeWatch // the slots it saw free behind the first (passStuck)
	hold    holdWatch // the hold it waits behind as the first in line (head)
	// wake is signalled when an Unlock in this process hands it the lock
	// (fairLock.local): its sleeps between looks end at once.
	wake <-chan struct{}
}

// holdWatch is the age of the hold the first in line waits behind, as it
// saw it: since its first look at the slots' epochs as they are now (when
// it saw the lock change hands, or when it came first in line, whichever
// is later), by its own clock. That is never more than the hold's true
// age, so the first never looks less often than timing.HeadLook allows
// for the hold, and a holder that waits HeadLook of its own hold for it
// (unlockFair) waits long enough.
type holdWatch struct {
	epochs []uint64
	since  time.Time
}

// saw notes a look at the slots' epochs at now (a Get Blob Properties of
// the lock, or the lock's blobs as a listing of the queue showed them; nil:
// no look, the age only), and returns the hold's age.
func (h *holdWatch) saw(epochs []uint64, now time.Time) time.Duration {
	if h.since.IsZero() || (epochs != nil && !equalEpochs(h.epochs, epochs)) {
		h.epochs, h.since = epochs, now
	}
	return now.Sub(h.since)
}

// wait waits in the queue until w gets the lock, ctx ends, or something
// fails for good; last keeps the last transient failure.
func (f *fairLock) wait(ctx context.Context, w waiter, last *error) (*Lock, error) {
	wake, done := f.waitLocal(w.key)
	defer done()
	var (
		pl     = polling{moved: time.Now(), wake: wake}
		pos    = -1
		first  uint64 // the first waiter's ticket, at the last listing
		marked bool
		nearAt time.Time // when it last came to be first or second in line
	)
	budget := f.slots[0].cfg.lease.duration
	served := func(lk *Lock) *Lock {
		var wasHead time.Duration
		if !nearAt.IsZero() {
			wasHead = time.Since(nearAt)
		}
		lk.fair = &fairState{f: f, key: w.key, took: time.Now(), wasHead: wasHead}
		f.leave(ctx, w) // served: out of the queue
		return lk
	}
	// retry keeps a failure that leaves the waiter waiting and pauses a
	// head poll; it returns the error that ends the wait, if any.
	retry := func(err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !retryable(err) {
			return err
		}
		*last = err
		if err := f.unreachable(); err != nil {
			return err
		}
		if !sleepCtx(ctx, timing.Jitter(f.cfg.headPoll, f.cfg.jitter, mrand.Float64())) {
			return context.Cause(ctx)
		}
		return nil
	}
	var recent [4]time.Time // when the last four rounds began
	for round := 0; ; round++ {
		// A guard against spinning: four rounds within one head poll (the
		// paths below wait on their own; this only catches a round that
		// returns at once again and again) wait a head poll.
		if round >= len(recent) && time.Since(recent[round%len(recent)]) < f.cfg.headPoll && !sleepCtx(ctx, f.cfg.headPoll) {
			return nil, context.Cause(ctx)
		}
		recent[round%len(recent)] = time.Now()
		v, err := f.q.list(ctx, time.Now().Add(2*f.cfg.lease.attemptTimeout))
		if err != nil {
			if err := retry(err); err != nil {
				return nil, err
			}
			continue
		}
		ws := v.ws
		if v.locks != nil {
			eps := make([]uint64, len(v.locks))
			for i, st := range v.locks {
				eps[i] = st.Epoch
			}
			pl.hold.saw(eps, time.Now())
		}
		p := -1
		for _, x := range ws {
			if x.Ticket == w.Ticket {
				w = x
				p = 0
				break
			}
		}
		if p < 0 {
			return nil, errRequeue
		}
		if w.Missed {
			// Passed over while it did not look: show it is here (the head
			// mark clears the missed one) to take its place again.
			if err := f.q.clearMissed(ctx, w); err == nil {
				fairHook("back", f.name, w.Ticket)
				marked = false
				continue
			}
		}
		ws = effective(ws, w.Ticket)
		for i, x := range ws {
			if x.Ticket == w.Ticket {
				p = i
				break
			}
		}
		if p != pos || ws[0].Ticket != first {
			pl.moved, pos, first = time.Now(), p, ws[0].Ticket
		}
		switch {
		case p > 1:
			nearAt = time.Time{}
		case nearAt.IsZero():
			nearAt = time.Now()
		}
		if p > 1 && slices.ContainsFunc(v.locks, func(st Status) bool { return st.Leased && st.Next == w.key }) {
			// Handed the lock while it saw others ahead (they were passed
			// over without its knowing): take it.
			lk, _, err := f.takeTurn(ctx, w, v.locks, budget, &pl.retried)
			if lk != nil {
				return served(lk), nil
			}
			if err != nil {
				if err := retry(err); err != nil {
					return nil, err
				}
			}
			continue
		}
		var due time.Time
		if p > 0 {
			// Behind the first: pass it over if it leaves a free slot
			// free for longer than it takes to react.
			var passed bool
			if passed, due = f.passStuck(ctx, ws[0], v.locks, v.sent, v.got, &pl.free); passed {
				continue
			}
		}
		switch p {
		case 0:
			if !marked {
				marked = true
				if err := f.q.markHead(ctx, w); err != nil {
					f.cfg.lease.log.Debug("azlease: could not mark this waiter first in line", slog.Any("error", err))
				}
			}
			lk, err := f.head(ctx, w, &pl, last)
			if lk != nil {
				return served(lk), nil
			}
			if err != nil {
				if err := retry(err); err != nil {
					return nil, err
				}
			}
		case 1:
			lk, err := f.next(ctx, w, ws[0], &pl, last)
			if lk != nil {
				return served(lk), nil
			}
			if err != nil {
				if err := retry(err); err != nil {
					return nil, err
				}
			}
		default:
			d := timing.QueueWait(p, time.Since(pl.moved), f.cfg.headPoll, f.cfg.poll)
			if !due.IsZero() {
				d = min(d, max(time.Until(due), 0))
			}
			if !sleepWake(ctx, d, pl.wake) {
				return nil, context.Cause(ctx)
			}
		}
	}
}

// relistEvery is how long the first waiter polls the lock before it lists
// the queue again, to notice a change the lock does not show (a holder
// removed it). It lists at once when it sees another holder take the lock
// (a slot's epoch changes): it may have been passed over.
const relistEvery = 30 * time.Second

// nextPollsPerListing is how many times the waiter right behind the first
// looks between two listings of the queue, the listing included: the
// listing shows it when the first left without being served (its ctx
// ended).
const nextPollsPerListing = 3

// head is the first waiter's polling: it returns the lock, an error, or
// neither when the queue should be listed again.
func (f *fairLock) head(ctx context.Context, w waiter, pl *polling, last *error) (*Lock, error) {
	budget := f.slots[0].cfg.lease.duration
	until := time.Now().Add(relistEvery)
	var epochs []uint64
	age := pl.hold.saw(nil, time.Now()) // the hold's age at the last look (nil: keep what it saw)
	for time.Now().Before(until) {
		sts, err := f.look(ctx, 2*f.cfg.lease.attemptTimeout)
		if err == nil {
			cur := make([]uint64, len(sts))
			for i, st := range sts {
				cur[i] = st.Epoch
			}
			age = pl.hold.saw(cur, time.Now())
			lk, passedOver, err := f.takeTurn(ctx, w, sts, budget, &pl.retried)
			switch {
			case lk != nil:
				return lk, nil
			case err != nil && (ctx.Err() != nil || !retryable(err)):
				return nil, err
			case err != nil:
				*last = err
			case passedOver:
				// The lock is handed to someone else: list the queue
				// again (is this waiter still first? was it passed
				// over?), after a head poll, not at once: the hand-off
				// may name a waiter that left after the holder listed
				// it, and then it does so until the holder moves on.
				if !sleepCtx(ctx, time.Duration(float64(f.cfg.headPoll)*(1-f.cfg.jitter/2*mrand.Float64()))) {
					return nil, context.Cause(ctx)
				}
				return nil, nil
			case epochs != nil && !equalEpochs(epochs, cur):
				// Another holder took the lock (or a slot) since the
				// last look: list the queue again (was this waiter
				// passed over while it could not look?).
				return nil, nil
			}
			epochs = cur
		} else if ctx.Err() != nil || !retryable(err) {
			return nil, err
		} else {
			*last = err
		}
		if err := f.unreachable(); err != nil {
			return nil, err
		}
		// The cost follows the hold: every HeadPollInterval while the
		// hold is young, then 4 % of its age, up to PollInterval
		// (timing.HeadLook); jitter only shortens it.
		if !sleepWake(ctx, time.Duration(float64(f.headLook(age))*(1-f.cfg.jitter/2*mrand.Float64())), pl.wake) {
			return nil, context.Cause(ctx)
		}
	}
	return nil, nil
}

// headLook is how long the first in line sleeps between two looks at the
// lock when the hold it waits behind has lasted age as it saw it
// (timing.HeadWait): from timing.LookFloor while the hold has just begun,
// so that a short hold is handed on within milliseconds, and never longer
// than what a holder waits for it (timing.HeadLook with HeadPollInterval as
// the floor: unlockFair).
func (f *fairLock) headLook(age time.Duration) time.Duration {
	return timing.HeadWait(age, f.cfg.headPoll, f.cfg.poll)
}

// takeRetries is how many more times takeTurn tries to take over a lease
// whose marker names its waiter but which is not under the hand-off's ID
// yet (the holder's Change follows its marker by a round trip), a quarter
// head poll apart; only the first time it finds that hand-off (a holder
// that died between the two requests leaves it so until the lease expires,
// and each try is a request that fails).
const takeRetries = 2

// takeTurn takes the lock if sts show it handed to w, or a slot free: each
// slot handed to w in slot order, then the free ones. It reports
// passedOver when it took none and a slot names another successor than w
// (the holder moved on, or w's place is in doubt), or names w but could not
// be taken yet (its holder has not changed the lease to the hand-off's ID).
func (f *fairLock) takeTurn(ctx context.Context, w waiter, sts []Status, budget time.Duration, retried *string) (lk *Lock, passedOver bool, err error) {
	notYet := false
	var failed error // the last failure of a slot handed to w
	for i := range sts {
		st := sts[i]
		if !st.Leased || st.Next != w.key {
			continue
		}
		m := f.slots[i]
		tries := 0 // more tries: only on the first look that finds this hand-off
		if key := fmt.Sprintf("%d/%d", i, st.Epoch); *retried != key {
			*retried, tries = key, takeRetries
		}
		for try := 0; ; try++ {
			l := m.newLease()
			l.nextID = w.id
			tok, err := l.takeOver(ctx, budget, &st)
			switch {
			case err == nil:
				return m.newLock(ctx, l, tok), false, nil
			case errors.Is(err, errHandOffGone):
				sts[i].Leased = false // free now: take it below
			case errors.Is(err, errPassedOver) && try < tries:
				// The marker names w, but the lease is not under the
				// hand-off's ID: a chain passed w over (it changed the
				// lease on to the next waiter and has not rewritten the
				// marker yet), or a holder older than issue 35 wrote the
				// marker before its Change. Try again soon rather than
				// after a head poll.
				if !sleepCtx(ctx, f.cfg.headPoll/4) {
					return nil, false, context.Cause(ctx)
				}
				continue
			case errors.Is(err, ErrLeaseHeld):
				notYet = true // another slot may be handed to w, or free
			case ctx.Err() != nil:
				return nil, false, err
			default:
				failed = err // another slot may still be taken
			}
			break
		}
	}
	for i := range sts {
		if sts[i].Leased {
			continue
		}
		m := f.slots[i]
		l := m.newLease()
		l.see(sts[i].Epoch)
		lk, ok, err := m.tryLock(ctx, l, budget, &sts[i])
		switch {
		case ok:
			return lk, false, nil
		case err != nil && ctx.Err() != nil:
			return nil, false, err
		case err != nil:
			failed = err
		}
	}
	if failed != nil {
		return nil, false, failed
	}
	for _, st := range sts {
		if st.Leased && st.Next != "" && st.Next != w.key {
			return nil, true, nil
		}
	}
	return nil, notYet, nil
}

// next is the polling of the waiter right behind the first: it returns the
// lock (handed to it: the first left), an error, or neither when the queue
// should be listed again (it moved, or the first seems dead and was
// passed over).
//
// It looks as timing.SecondWait says: every quarter head poll for a while
// when it sees the lock handed to another waiter (the first, which may be
// dead; pl.handing); for 10 head polls after the queue moved, every head
// poll counted from its last look at the lock (pl.looked, which it
// updates), so that a listing in between does not delay it; then less and
// less often; and when a slot shows free, again once the first has had its
// time to take it (passStuck).
func (f *fairLock) next(ctx context.Context, w, first waiter, pl *polling, last *error) (*Lock, error) {
	budget := f.slots[0].cfg.lease.duration
	var epochs []uint64
	due := pl.free.due(first, f.cfg)
	for polls := 0; ; polls++ {
		wait, fast := timing.SecondWait(time.Now(), pl.moved, pl.looked, pl.handing.since, f.cfg.headPoll, f.cfg.poll, minHandOffMargin)
		if !due.IsZero() {
			wait, fast = min(wait, max(time.Until(due), 0)), true
		}
		ok, woken := sleepWoken(ctx, wait, pl.wake)
		if !ok {
			return nil, context.Cause(ctx)
		}
		if polls >= nextPollsPerListing-1 && !fast && !woken {
			return nil, nil // this look is a listing of the queue
		}
		pl.looked = time.Now()
		sent := time.Now()
		sts, err := f.look(ctx, 2*f.cfg.lease.attemptTimeout)
		if err != nil {
			if ctx.Err() != nil || !retryable(err) {
				return nil, err
			}
			*last = err
			if err := f.unreachable(); err != nil {
				return nil, err
			}
			continue
		}
		got := time.Now()
		if slices.ContainsFunc(sts, func(st Status) bool { return st.Leased && st.Next == w.key }) {
			lk, _, err := f.takeTurn(ctx, w, sts, budget, &pl.retried)
			return lk, err
		}
		cur := make([]uint64, len(sts))
		for i, st := range sts {
			cur[i] = st.Epoch
		}
		pl.hold.saw(cur, got)
		pl.handing.saw(sts)
		if epochs != nil && !equalEpochs(epochs, cur) {
			pl.moved = time.Now()
			return nil, nil // someone took a slot: the first, probably
		}
		epochs = cur
		var passed bool
		if passed, due = f.passStuck(ctx, first, sts, sent, got, &pl.free); passed {
			return nil, nil
		}
	}
}

// freeWatch is what a waiter (or a TryLock) behind the first in line
// saw of the lock's free slots while that waiter was first: since when
// each was free at the epoch it had (passStuck).
type freeWatch struct {
	first uint64 // the first waiter's ticket
	slots map[string]freeSeen
}

// freeSeen is a slot seen free: at which epoch, and the end of the first
// look that saw it so.
type freeSeen struct {
	epoch uint64
	since time.Time
}

// saw records a look at the slots, sent at sent and answered at got, while
// first was first in line, and returns how long one of them has surely
// stayed free since a look saw it free, at one epoch (no term began on it
// in between): from the end of that look to the start of this one.
func (fw *freeWatch) saw(first uint64, sts []Status, sent, got time.Time) time.Duration {
	if fw.slots == nil || fw.first != first {
		*fw = freeWatch{first: first, slots: map[string]freeSeen{}}
	}
	var longest time.Duration
	for _, st := range sts {
		prev, ok := fw.slots[st.Name]
		switch {
		case st.Leased:
			delete(fw.slots, st.Name)
		case ok && prev.epoch == st.Epoch:
			longest = max(longest, sent.Sub(prev.since))
		default:
			fw.slots[st.Name] = freeSeen{epoch: st.Epoch, since: got}
		}
	}
	return longest
}

// due is when a look would find a slot free for longer than first's
// reaction time (its paces, or cfg's when its entry does not say), or zero
// when no slot was seen free while it was first.
func (fw *freeWatch) due(first waiter, cfg holdConfig) time.Time {
	if fw.first != first.Ticket {
		return time.Time{}
	}
	var at time.Time
	for _, s := range fw.slots {
		if d := s.since.Add(first.reaction(cfg) + time.Millisecond); at.IsZero() || d.Before(at) {
			at = d
		}
	}
	return at
}

// reaction is how long a slot may stay free while w, first in line, is
// there and does not take it (timing.PassOverFree, with w's paces).
func (w waiter) reaction(cfg holdConfig) time.Duration {
	head, poll := w.paces(cfg)
	return timing.PassOverFree(head, poll, minHandOffMargin, w.Head)
}

// passStuck is the rule that keeps a fair queue from sticking behind dead
// waiters, applied by whoever is behind the first in line (or a TryLock):
// sts, a look at the lock's slots sent at sent and answered at got, is fed
// to fw; once a slot has stayed free for longer than first's reaction time
// while it was first, first is passed over (marked missed, conditional on
// its entry as listed: one that has written since is there, and keeps its
// place) and passed reports it, for the caller to look at the queue again.
// Otherwise due is when to look again to tell (zero: no slot is free).
func (f *fairLock) passStuck(ctx context.Context, first waiter, sts []Status, sent, got time.Time, fw *freeWatch) (passed bool, due time.Time) {
	if fw.saw(first.Ticket, sts, sent, got) <= first.reaction(f.cfg) {
		return false, fw.due(first, f.cfg)
	}
	f.cfg.lease.log.Debug("azlease: the first waiter does not take a free lock; passing it over", slog.Uint64("ticket", first.Ticket))
	if marked, _, _ := f.q.miss(ctx, first); marked {
		fairHook("missed", f.name, first.Ticket)
	}
	*fw = freeWatch{}
	return true, time.Time{}
}

// handWatch is what the waiter right behind the first knows of the
// hand-offs to other waiters it sees (timing.SecondWait).
type handWatch struct {
	since time.Time // when it first saw the hand-offs it sees now (zero: none)
	seen  string    // which they are: each slot's epoch and successor
}

// saw notes the hand-offs to other waiters that sts show: since is kept
// while they are the same ones, so that fast looks end even if one stays
// (its holder cut off); a new one (another epoch, or handed on to
// another successor) starts them again.
func (h *handWatch) saw(sts []Status) {
	var b strings.Builder
	for i, st := range sts {
		if st.Leased && st.Next != "" {
			fmt.Fprintf(&b, "%d/%d/%s;", i, st.Epoch, st.Next)
		}
	}
	switch seen := b.String(); {
	case seen == "":
		*h = handWatch{}
	case seen != h.seen:
		*h = handWatch{since: time.Now(), seen: seen}
	}
}

func equalEpochs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// maxExtraHandOffs bounds how many more hand-offs than waiters listed at
// first one Unlock makes (to waiters that joined meanwhile, or came back
// after being passed over).
const maxExtraHandOffs = 4

// unlockFair is Unlock for a Lock of a fair lock whose term ended cleanly:
// it hands the lease to the first waiter in line (and on, to the next, if
// one does not take it), or releases it when nobody waits. handed is false
// when the caller should release as an unordered lock does (nobody waits,
// the queue could not be listed, or the term's validity passed before the
// hand-off could begin).
func (lk *Lock) unlockFair(ctx context.Context) (handed bool, err error) {
	fs := lk.fair
	f := fs.f
	v, err := f.q.list(ctx, time.Now().Add(f.cfg.lease.attemptTimeout))
	if err != nil {
		lk.lease.cfg.log.Debug("azlease: could not list the lock's queue; releasing", slog.Any("error", err))
		return false, nil
	}
	held := time.Since(fs.took)
	slot := slices.IndexFunc(f.slots, func(m *Mutex) bool { return m.t.blob == lk.Name() })
	// candidates are the waiters a hand-off may go to, first in line first:
	// all but this holder's own entry and those marked missed (evicting,
	// from the first listing, those missed and silent for long: longer
	// than their own pace lets a live waiter be).
	candidates := func(v queueView, evict bool) []waiter {
		out := make([]waiter, 0, len(v.ws))
		for _, w := range v.ws {
			switch {
			case w.key == fs.key:
				// this holder's own entry, not removed yet
			case w.Missed:
				_, poll := w.paces(f.cfg)
				if evict && !v.date.IsZero() && !w.modified.IsZero() && v.date.Sub(w.modified) > 2*timing.MaxQueueLook(poll) {
					if f.q.remove(ctx, w, true) == nil {
						fairHook("evicted", f.name, w.Ticket)
					}
				}
			default:
				out = append(out, w)
			}
		}
		return out
	}
	pending := candidates(v, true)
	if len(pending) == 0 {
		return false, nil
	}
	// After a waiter is passed over, the next is the first in line as the
	// queue is then: one passed over before may be back (it cleared its
	// missed mark: its entry changed), and is first again; one handed the
	// lock already is not again while its entry is unchanged. The chain is
	// bounded.
	tried := map[uint64]azcore.ETag{}
	left := len(pending) + maxExtraHandOffs
	next := func() (successor, bool) {
		if len(tried) > 0 {
			if v, err := f.q.list(ctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err == nil {
				pending = candidates(v, false)
			}
		}
		for _, w := range pending {
			if etag, ok := tried[w.Ticket]; (ok && etag == w.etag) || left == 0 {
				continue
			}
			left--
			tried[w.Ticket] = w.etag
			head, poll := w.paces(f.cfg)
			// A first in line that said so looks within HeadLook of the
			// hold's age as it saw it, never older than this term.
			wait := timing.HeadLook(held, head, poll)
			if !w.Head {
				wait = timing.HandOffWait(held, fs.wasHead, head, poll)
			}
			s := successor{key: w.key, id: w.id, holder: w.Holder, wait: wait, passed: func() { lk.passOver(ctx, w) }, handed: func() { f.wake(w.key) }}
			if len(f.slots) > 1 && slot >= 0 {
				// A Semaphore's waiter may be served by another slot
				// meanwhile (two holders unlocking at once hand theirs to
				// the same first waiter): the holder's looks list the
				// slots and the queue, and move on as soon as the
				// waiter's entry is gone, without marking it.
				s.look = func(ctx context.Context, limit time.Time) (Status, bool, error) {
					v, err := f.q.list(ctx, limit)
					if err != nil {
						return Status{}, false, err
					}
					here := slices.ContainsFunc(v.ws, func(x waiter) bool { return x.Ticket == w.Ticket })
					return v.locks[slot], !here, nil
				}
			}
			return s, true
		}
		return successor{}, false
	}
	out, err := lk.lease.handOnEach(ctx, lk.Token().LeaseID, next)
	switch {
	case errors.Is(err, ErrNotHeld):
		// Its validity passed before the hand-off began (nothing was
		// sent): release what may still be held, as an unordered lock.
		return false, nil
	case err != nil:
		return true, err
	}
	log, epoch, passed := lk.lease.cfg.log, slog.Uint64("epoch", lk.Epoch()), slog.Int("passed_over", len(out.passed))
	switch {
	case out.taker != "":
		log.Info("azlease: unlocked; handed to the next waiter", epoch, passed)
	case out.lost == lostHeld:
		log.Warn("azlease: unlocked; the hand-off ended with the lease under an ID no term shows (a waiter took it and did not start its term): the lock frees itself when the lease expires", epoch, passed)
	case out.lost != "":
		log.Info("azlease: unlocked; the lease was "+out.lost+" during the hand-off, nobody took it: the queue's first takes the free lock", epoch, passed)
	default:
		log.Info("azlease: unlocked; no waiter took the lock", epoch, passed)
	}
	return true, nil
}

// passOver marks w missed: handed the lock, it did not take it in time (see
// unlockFair), and the holder moves on. The mark is conditional on w's entry
// as the holder listed it. When the entry has changed since (and not by an
// earlier attempt of this write, whose answer was lost), w wrote it (its
// head mark): it is there, and looks every head poll from then on, so it
// gets that long more (the hand-off is still under its ID: the holder moves
// on only after this returns, and finds the lease taken if w took it
// meanwhile), and is then marked missed on its entry as it is then, unless
// it took the lock.
func (lk *Lock) passOver(ctx context.Context, w waiter) {
	f := lk.fair.f
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, 2*f.cfg.lease.attemptTimeout)
	defer cancel()
	if marked, cur, changed := f.q.miss(cctx, w); !marked && changed {
		head, _ := w.paces(f.cfg)
		time.Sleep(head + minHandOffMargin)
		cctx, cancel := context.WithTimeout(ctx, 2*f.cfg.lease.attemptTimeout)
		defer cancel()
		if st, err := lk.lease.inspect(cctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err == nil && st.Epoch > lk.Epoch() {
			return // it took the lock
		}
		_, _, _ = f.q.miss(cctx, cur)
	}
	fairHook("missed", f.name, w.Ticket) // passed over, marked or not: the holder moves on
}
