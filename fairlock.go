package azlease

// Fair locks: a Mutex or Semaphore whose waiters are served in the order
// they asked (the default; MutexOptions.Unordered turns it off). The queue
// is in queue.go, the hand-off from holder to waiter in succession.go, the
// watcher rule in fairwatch.go, Unlock in fairunlock.go; this file is the
// waiting. docs/design/fair-locks.md and fair-locks-cost.md explain the
// mechanism.
//
// A waiter that finds the lock free and nobody waiting takes it, as an
// unordered one does. Otherwise it takes a ticket, joins the queue, and
// waits: the first in line looks at the lock by the age of the hold it
// waits behind (every few milliseconds as a hold begins, every
// PollInterval behind an old one) and takes it when it is handed to it or
// free; the one behind it looks as often while the hold is young, and
// watches a hand-off to the first; the others list the queue (with the
// lock's own blobs) toward their turn at the pace the lock record
// publishes, or the faster one they saw (ownPace), less often the longer
// the queue stands still. No holder passes a waiter over: the waiter
// behind a named successor takes the hand-off over once the successor
// surely missed it, and any waiter, or a TryLock, that sees a slot stay
// free for longer than the first in line takes to react passes the first
// over (marks it missed), so the queue never sticks behind dead waiters. A
// contended Unlock never frees the lease. A term that ended before Lock
// could return it is given back, and the waiter joins again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// handedOff is when an Unlock of this value last handed the lock to a
	// waiter (under localMu; zero: never): a Lock soon after joins the
	// queue without looking whether the lock is free (lock).
	handedOff time.Time
	// handedFrom is the listing that Unlock handed on from, and the
	// ticket of the holder that did (under localMu): a Lock right after
	// places itself in the queue from it (fairjoin.go).
	handedFrom handedFrom
}

// noteHandOff notes that an Unlock of this value, by the holder with
// ticket (zero: none), that began at began handed the lock to a waiter
// from listing v, and returned at now.
func (f *fairLock) noteHandOff(now, began time.Time, v queueView, ticket uint64) {
	f.localMu.Lock()
	f.handedOff = now
	f.handedFrom = handedFrom{at: began, v: v, ticket: ticket}
	f.localMu.Unlock()
}

// justHandedOff reports whether an Unlock of this value handed the lock to
// a waiter less than a head poll before now: the lock is held, or being
// taken, by that waiter (a look would find it leased), so Lock goes straight
// to the queue. A hot lock's contender saves a request an acquisition; if
// the successor has released it meanwhile with nobody waiting, the first
// in line takes a free lock, as ever.
func (f *fairLock) justHandedOff(now time.Time) bool {
	f.localMu.Lock()
	defer f.localMu.Unlock()
	return !f.handedOff.IsZero() && now.Sub(f.handedOff) < f.cfg.headPoll
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
	f      *fairLock
	key    string    // its own ticket's key, or "" (it took a free lock without queuing)
	ticket uint64    // its own ticket (with key)
	took   time.Time // the send of the look that gave it the lock (or when it took it free)
	// seen is the last listing of the queue its wait made (zero: none):
	// a Mutex's Unlock soon after hands on to a waiter it shows behind
	// this one rather than list the queue again (unlockFair).
	seen queueView
}

// errRequeue means a waiter found itself no longer in the queue (a holder
// removed it after it missed its turn twice): it joins again.
var errRequeue = errors.New("azlease: removed from the queue")

// errTakeFailed means a waiter's take-over failed after its Change Lease
// was granted and its entry removed (renewBeside): it joins again.
var errTakeFailed = errors.New("azlease: the take-over failed after the queue entry was removed")

// besideTakeKey marks the context of a fair lock's waiter: once its
// take-over's Change Lease is granted, renewBeside removes its queue entry
// (the *besideTake's run) beside the renewal and the epoch write, a round
// trip sooner than after them. If the renewal or the write then fails, the
// waiter is out of the queue and joins again (fairLock.wait).
type besideTakeKey struct{}

// besideTake is the removal renewBeside makes for a fair lock's waiter; it
// runs at most once per wait.
type besideTake struct {
	once   sync.Once
	remove func()      // removes the waiter's entry
	left   func()      // tells that the waiter has left the queue without the lock
	ran    atomic.Bool // remove has run
	failed atomic.Bool // and the take it went with failed: the waiter joins again
}

// run removes the waiter's entry, the first time only.
func (b *besideTake) run() {
	b.once.Do(func() {
		b.ran.Store(true)
		b.remove()
	})
}

// fail records that the take the removal went with failed: the waiter is
// out of the queue from now on.
func (b *besideTake) fail() {
	if b.ran.Load() && !b.failed.Swap(true) {
		b.left()
	}
}

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
	for !f.justHandedOff(time.Now()) {
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
		asked := time.Now()
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
		place := f.placed(w.Ticket, asked)
		if place.at > 0 {
			fairHook("placed", f.name, w.Ticket)
		}
		lk, err := f.wait(ctx, w, place, &last)
		if lk != nil && lk.Term.Err() != nil {
			// Its term ended before it could be returned: an epoch write
			// answered near its limit, then the queue entry's removal
			// (up to AttemptTimeout; after a free lock's take, since a
			// take-over removes it beside the write) and no renewal
			// granted meanwhile. A
			// Lock is never returned already lost: give it back, and wait
			// again from the back (it left the queue when served).
			last = lk.Term.Err()
			_ = lk.Unlock(ctx)
			fairHook("left", f.name, w.Ticket)
			f.cfg.lease.log.Info("azlease: the lock's term ended before Lock could return it; waiting again", slog.Any("cause", last))
			if ctx.Err() != nil {
				return gaveUp()
			}
			continue
		}
		if lk != nil {
			fairHook("served", f.name, w.Ticket)
			return lk, nil
		}
		if errors.Is(err, errTakeFailed) {
			// It left the queue when its take failed (besideTake).
			f.cfg.lease.log.Info("azlease: the lock's take-over failed after its queue entry was removed; joining again at the back", slog.Any("cause", last))
			if ctx.Err() != nil {
				return gaveUp()
			}
			continue
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
					if created, _ := f.q.createGeneration(ctx, time.Now().Add(f.cfg.lease.attemptTimeout), 0); created {
						f.q.gens.saw(0, 0, time.Now())
					}
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
	// ahead is what its listings saw of the waiters ahead of it (track):
	// the positions each held and when, for the watcher rule (next).
	ahead map[uint64]*aheadSeen
	// ids are the lease IDs the waiters of its last two listings
	// announced, by ticket key: a hand-off to one that has left since is
	// taken over by the first in line (wait).
	ids, prevIDs map[string]string
	// clean is the send of its last look (or listing) that showed no slot
	// handed to the first in line: a hand-off it sees later began after
	// it, and its lease lasts at least handOffLeaseLeft from then.
	clean time.Time
	// watch is the hand-off to the first in line it watches (watch).
	watch watchState
	// holdFrom is, per slot, when the hold there began at the earliest, on
	// this clock, as its last listing that showed no hand-off there tells:
	// the lock blob's Last-Modified (the term's epoch write) against the
	// listing's Date, storage's clock, whole seconds (a second earlier).
	holdFrom map[int]time.Time
	// paces is what its reads of the lock record bound of the published
	// pace (issue 35, design section 4): for the schedule it sleeps by
	// (pace) and the promises it computes as a watcher (paceSince).
	paces paceWatch
	// own is the pace it saw the queue move at itself (ownPace).
	own ownPace
	// sent is the send of its latest look at the lock or listing of the
	// queue: the hold it publishes once served counts from the one that
	// gave it the lock (fairState.took).
	sent time.Time
	// gone is its entry's removal beside a take-over (wait).
	gone *besideTake
}

// ownPace is how fast a waiter behind the second saw the queue move: the
// slots' epochs that passed between two of its listings, over the time
// between their sends, on its own clock. It sleeps no longer than
// PaceShare of what the queue needs at that pace to bring it right behind
// the first: shorter than its schedule (timing.BackWait) is always
// allowed, and where holds are short the published pace (the holds
// alone) leaves out the hand-offs' time, so its own floor
// (timing.OwnFloor per position) sets the queue's speed.
type ownPace struct {
	at     time.Time // the send of the listing it last counted
	epochs uint64    // the slots' epochs that listing showed, summed
	pace   time.Duration
}

// saw notes a listing (v) and returns the pace: zero while unknown, and
// when no term passed since the last listing (a pace remembered from a
// queue that moved would keep it looking often behind a long hold).
func (o *ownPace) saw(v queueView) time.Duration {
	var sum uint64
	for _, st := range v.locks {
		sum += st.Epoch
	}
	switch {
	case o.at.IsZero():
	case sum > o.epochs && sum-o.epochs <= maxOwnPaceTerms && v.sent.After(o.at):
		o.pace = v.sent.Sub(o.at) / time.Duration(sum-o.epochs)
	default:
		// No term since (the queue stands still: its schedule slows it
		// down, BackRamp), the blob made anew, or epochs that jumped.
		o.pace = 0
	}
	o.at, o.epochs = v.sent, sum
	return o.pace
}

// maxOwnPaceTerms is the most terms between two listings a waiter's own
// pace counts over; more is a blob made anew, or epochs that jumped.
const maxOwnPaceTerms = 10000

// aheadSeen is what a waiter's listings saw of one waiter ahead of it.
type aheadSeen struct {
	stays    []timing.Stay // the positions it held (the last one's To open)
	lastSent time.Time     // the send of the last listing that showed it
}

// track notes a listing (v) in which the waiters ahead are ahead, first in
// line first: where each was, and since when as far as the listings bound
// it (timing.Stay). A waiter seen for the first time may have been one
// place further back until this listing, since its join (its entry's age,
// storage's clock, whole seconds: a second earlier to be safe, counted back
// from the listing's send, for a bound that is never late; unknown for an
// entry rewritten since, with its head mark). A hold's start is bounded the
// same way.
func (pl *polling) track(ahead []waiter, v queueView) {
	if pl.ahead == nil {
		pl.ahead = map[uint64]*aheadSeen{}
	}
	seen := make(map[uint64]bool, len(ahead))
	for i, x := range ahead {
		seen[x.Ticket] = true
		a, ok := pl.ahead[x.Ticket]
		switch {
		case !ok:
			var from time.Time
			if !x.Head {
				from = writtenBy(v.sent, v.date, x.modified)
			}
			a = &aheadSeen{stays: []timing.Stay{{Pos: i, From: from}}}
			if !x.Head {
				a.stays = []timing.Stay{{Pos: i + 1, From: from, To: v.got}, {Pos: i, From: from}}
			}
			pl.ahead[x.Ticket] = a
		case a.stays[len(a.stays)-1].Pos != i:
			a.stays[len(a.stays)-1].To = v.got
			a.stays = append(a.stays, timing.Stay{Pos: i, From: a.lastSent})
		}
		a.lastSent = v.sent
	}
	for t := range pl.ahead {
		if !seen[t] {
			delete(pl.ahead, t)
		}
	}
	if pl.holdFrom == nil {
		pl.holdFrom = map[int]time.Time{}
	}
	for i, st := range v.locks {
		if from := writtenBy(v.sent, v.date, st.modified); st.Leased && st.Next == "" && !from.IsZero() {
			pl.holdFrom[i] = from
		}
	}
	if v.locks != nil {
		pl.paces.read(v.locks, v.sent, v.got)
	}
	pl.prevIDs, pl.ids = pl.ids, make(map[string]string, len(v.ws))
	for _, x := range v.ws {
		pl.ids[x.key] = x.id
	}
}

// announced is the lease ID the waiter with ticket key announced, as one of
// the last two listings showed it.
func (pl *polling) announced(key string) (string, bool) {
	if id, ok := pl.ids[key]; ok {
		return id, true
	}
	id, ok := pl.prevIDs[key]
	return id, ok
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
// fails for good; last keeps the last transient failure. A waiter placed
// without a listing (fairjoin.go) first sleeps toward its turn from there,
// and counts the queue's pace (ownPace) from the listing that placed it.
func (f *fairLock) wait(ctx context.Context, w waiter, place placement, last *error) (*Lock, error) {
	wake, done := f.waitLocal(w.key)
	defer done()
	var (
		pl     = polling{moved: time.Now(), wake: wake}
		pos    = -1
		first  uint64 // the first waiter's ticket, at the last listing
		marked bool
	)
	if place.at > 0 {
		pl.own.saw(place.from)
		if !sleepWake(ctx, placedSleep(place.at, f.cfg.poll), wake) {
			return nil, context.Cause(ctx)
		}
	}
	budget := f.slots[0].cfg.lease.duration
	var seen queueView // the last listing
	// A take-over removes w's entry beside its renewal and epoch write
	// (renewBeside); any other way of being served removes it after.
	// If that take then fails, the waiter has left the queue at once
	// (errTakeFailed): it joins again rather than look on without an entry
	// while the waiters behind it are served.
	gone := &besideTake{remove: func() { f.leave(ctx, w) }, left: func() { fairHook("left", f.name, w.Ticket) }}
	ctx = context.WithValue(ctx, besideTakeKey{}, gone)
	pl.gone = gone
	served := func(lk *Lock) *Lock {
		lk.fair = &fairState{f: f, key: w.key, ticket: w.Ticket, took: pl.sent, seen: seen}
		gone.run() // served: out of the queue
		return lk
	}
	// retry keeps a failure that leaves the waiter waiting and pauses a
	// head poll; it returns the error that ends the wait, if any.
	retry := func(err error) error {
		if gone.failed.Load() {
			*last = err
			return errTakeFailed
		}
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
		// A guard against spinning: four rounds within 4 × LookFloor (the
		// paths below wait on their own; this only catches a round that
		// returns at once again and again) wait a LookFloor. No longer: a
		// waiter behind the first sleeps from LookFloor per position
		// (timing.BackWait), and a sleep its watcher does not count would
		// have it passed over (a head poll here did, in the dead-waiter
		// bench: 6 live waiters passed over in a row).
		if round >= len(recent) && time.Since(recent[round%len(recent)]) < 4*timing.LookFloor && !sleepCtx(ctx, timing.LookFloor) {
			return nil, context.Cause(ctx)
		}
		if gone.failed.Load() {
			return nil, errTakeFailed
		}
		recent[round%len(recent)] = time.Now()
		pl.sent = time.Now()
		v, err := f.q.list(ctx, time.Now().Add(2*f.cfg.lease.attemptTimeout))
		if err != nil {
			if err := retry(err); err != nil {
				return nil, err
			}
			continue
		}
		prev := seen
		seen = v
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
				// Its own paces, as it rewrites its entry, whatever an
				// older version's rewrite left there.
				w.headPoll, w.poll = f.cfg.headPoll, f.cfg.poll
				p = 0
				break
			}
		}
		if p < 0 {
			if gone.failed.Load() {
				return nil, errTakeFailed
			}
			return nil, errRequeue
		}
		if w.Missed {
			// Passed over while it did not look: show it is here (the head
			// mark clears the missed one) to take its place again.
			if err := f.q.clearMissed(ctx, w); err == nil {
				fairHook("back", f.name, w.Ticket)
				// Its age counts from its return (a holder bounds its
				// sleeps from its entry's rewrite: unlockFair).
				marked, pl.moved = false, time.Now()
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
			pl.moved, pos, first = f.movedAt(p, w.Ticket, prev, v, pl.moved), p, ws[0].Ticket
		}
		pl.track(ws[:p], v)
		if p == 0 {
			// A slot handed to a waiter that has left the queue since
			// (its ctx ended, or a Semaphore's waiter handed two slots
			// took the other) is the first in line's to take at once: it
			// will not be taken otherwise before the lease expires.
			if lk, err := f.takeLeft(ctx, w, v, &pl, budget); lk != nil {
				return served(lk), nil
			} else if err != nil {
				if err := retry(err); err != nil {
					return nil, err
				}
				continue
			}
		}
		if slices.ContainsFunc(v.locks, func(st Status) bool { return st.Leased && st.Next == w.key }) {
			// Handed the lock: take it from the listing. The first in
			// line saves its look (a hot lock's next holder mostly finds
			// the hand-off in the listing that shows it first); one that
			// saw others ahead was handed it past them (they were passed
			// over without its knowing).
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
		if p > 1 {
			// Behind a hand-off to the first that nobody closer takes
			// over (all of them dead): the watcher rule, from here.
			lk, relist, at, err := f.watch(ctx, &pl, ws[:p], v.locks, v.sent, v.got, budget)
			switch {
			case lk != nil:
				return served(lk), nil
			case err != nil:
				if err := retry(err); err != nil {
					return nil, err
				}
				continue
			case relist:
				continue
			}
			due = at
		}
		if p > 0 {
			// Behind the first: pass it over if it leaves a free slot
			// free for longer than it takes to react.
			passed, free := f.passStuck(ctx, ws[0], v.locks, v.sent, v.got, &pl.free)
			if passed {
				continue
			}
			if due.IsZero() || (!free.IsZero() && free.Before(due)) {
				due = free
			}
		}
		switch p {
		case 0:
			// Its head mark is written after its first look, when that
			// did not give it the lock: a hot lock's first in line mostly
			// finds it handed at once (one request less an acquisition).
			mark := func() {
				if !marked {
					marked = true
					if err := f.q.markHead(ctx, w); err != nil {
						f.cfg.lease.log.Debug("azlease: could not mark this waiter first in line", slog.Any("error", err))
					}
				}
			}
			lk, err := f.head(ctx, w, &pl, last, mark)
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
			// Toward its turn at the published pace (most of the way at
			// once), and less often the longer the queue stands still
			// (timing.OwnBackWait: at most timing.BackWait, as its
			// watcher counts it). Jitter only shortens it
			// (timing.BackSpread): waiters that joined together do not
			// list together for good through a stand-still.
			d := timing.OwnBackWait(p, time.Since(pl.moved), pl.paces.last, f.cfg.poll)
			if own := pl.own.saw(v); own > 0 {
				d = min(d, max(time.Duration(float64(p-1)*float64(own)*timing.PaceShare), timing.LookFloor))
			}
			d = time.Duration(float64(d) * (1 - timing.BackSpread(p, d, f.cfg.poll, f.cfg.jitter)*mrand.Float64()))
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
// neither when the queue should be listed again. It calls mark (the head
// mark) once a look has not given it the lock, before it sleeps.
func (f *fairLock) head(ctx context.Context, w waiter, pl *polling, last *error, mark func()) (*Lock, error) {
	budget := f.slots[0].cfg.lease.duration
	until := time.Now().Add(relistEvery)
	var epochs []uint64
	age := pl.hold.saw(nil, time.Now()) // the hold's age at the last look (nil: keep what it saw)
	for time.Now().Before(until) {
		pl.sent = time.Now()
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
			case pl.gone != nil && pl.gone.failed.Load():
				if err != nil {
					*last = err
				}
				return nil, errTakeFailed // out of the queue (wait)
			case err != nil && (ctx.Err() != nil || !retryable(err)):
				return nil, err
			case err != nil:
				*last = err
			case passedOver:
				// The lock is handed to someone else: list the queue
				// again (is this waiter still first? was it passed
				// over?), after a quarter head poll: the hand-off may
				// name a waiter that left after the holder listed it,
				// which the listing shows (takeLeft takes it over).
				if !sleepCtx(ctx, time.Duration(float64(f.cfg.headPoll/4)*(1-f.cfg.jitter/2*mrand.Float64()))) {
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
		mark()
		// The cost follows the hold: every HeadPollInterval while the
		// hold is young, then 4 % of its age, up to 2 × PollInterval
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
//
// It watches a hand-off to the first in line (watch: the watcher rule).
func (f *fairLock) next(ctx context.Context, w, first waiter, pl *polling, last *error) (*Lock, error) {
	budget := f.slots[0].cfg.lease.duration
	var epochs []uint64
	due := pl.free.due(first, f.cfg)
	ahead := []waiter{first}
	for polls := 0; ; polls++ {
		wait, fast := timing.SecondWait(time.Now(), pl.moved, pl.looked, pl.handing.since, f.cfg.headPoll, f.cfg.poll, minHandOffMargin, w.Head)
		if !due.IsZero() {
			wait, fast = min(wait, max(time.Until(due), 0)), true
		}
		if at := pl.watch.wake(); !at.IsZero() {
			wait, fast = min(wait, max(time.Until(at), 0)), true
		}
		// While the hold is young it looks as the first does (the watcher
		// sees a hand-off, and a dead first's promise begins, within a few
		// milliseconds of a short hold's Unlock).
		if hw := f.headLook(pl.hold.saw(nil, time.Now())); hw < wait && hw < f.cfg.headPoll {
			wait, fast = hw, true
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
		pl.sent = sent
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
		pl.paces.read(sts, sent, got)
		if slices.ContainsFunc(sts, func(st Status) bool { return st.Leased && st.Next == w.key }) {
			lk, _, err := f.takeTurn(ctx, w, sts, budget, &pl.retried)
			return lk, err
		}
		lk, relist, _, err := f.watch(ctx, pl, ahead, sts, sent, got, budget)
		switch {
		case lk != nil:
			return lk, nil
		case err != nil:
			return nil, err
		case relist:
			return nil, nil
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
// there and does not take it (timing.PassOverFree, with w's paces and the
// time since its entry was written, as its listing bounds it).
func (w waiter) reaction(cfg holdConfig) time.Duration {
	head, poll := w.paces(cfg)
	still := time.Duration(1<<63 - 1) // unknown: as long as can be
	if !w.written.IsZero() {
		still = max(time.Since(w.written), 0)
	}
	return timing.PassOverFree(head, poll, minHandOffMargin, w.Head, still)
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
