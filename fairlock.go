package azlease

// Fair locks: a Mutex or Semaphore whose waiters are served in the order
// they asked (the default; MutexOptions.Unordered turns it off). The queue
// is in queue.go, the hand-off from holder to waiter in succession.go; this
// file is the waiting and the unlocking.
//
// A waiter that finds the lock free and nobody waiting takes it, as an
// unordered one does. Otherwise it takes a ticket, joins the queue, and
// waits:
//   - the first in line polls the lock (one request; a Semaphore's slots
//     with one listing) every HeadPollInterval: it takes the lock when the
//     holder hands it over (the hand-off marker names its ticket), or when
//     the lock is free (the holder crashed and its lease expired, or it
//     released while the queue looked empty);
//   - the one behind it polls the lock too, every head poll while the
//     queue has just moved and less and less while it does not, and fast
//     while it sees the lock handed to the first (timing.SecondWait): it
//     notices when the first is served, takes the lock soon after a holder
//     passes a dead first over and hands it on, and notices when the lock
//     stays free while the first does not take it (then the first is dead,
//     and it removes it);
//   - the others list the queue, less often the further back they are.
// A contended Unlock never frees the lease: it hands it to the first in
// line (succession.go), so a waiter that arrives later, ordered or not,
// cannot take it first.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
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
	budget := f.slots[0].cfg.lease.duration
	var last error
	gaveUp := func() (*Lock, error) {
		if last == nil {
			return nil, fmt.Errorf("azlease: %s: %w", f.what, context.Cause(ctx))
		}
		return nil, fmt.Errorf("azlease: %s: %w; last attempt: %w", f.what, context.Cause(ctx), lastAttempt(last))
	}
	// The lock free and nobody waiting: take it, as an unordered waiter.
	for {
		lk, queued, err := f.tryFree(ctx, budget)
		if lk != nil {
			return lk, nil
		}
		if err != nil && errors.Is(err, ErrTransient) {
			last = err
		}
		if ctx.Err() != nil {
			return gaveUp()
		}
		if err == nil && queued {
			break
		}
		if err != nil && !errors.Is(err, ErrTransient) {
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
		w, err := f.join(ctx, budget)
		switch {
		case ctx.Err() != nil:
			return gaveUp()
		case err != nil && !errors.Is(err, ErrTransient):
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

// fairHook, when tests set it, is told of a waiter's events, on the
// waiter's goroutine: "ticket" (its ticket taken), "joined" (its blob
// created), "served", "left" (its ctx ended or it failed), "removed" (a
// holder removed it; it joins again) and "back" (it found itself missed
// and cleared the mark); and, on the goroutine of whoever passed it over,
// "missed" (its turn came and it did not take the lock) and "evicted" (a
// holder removed it, missed and silent).
var fairHook = func(event, lock string, ticket uint64) {}

// tryFree takes a free slot if nobody waits: one look, and when a slot is
// free, one listing of the queue. queued is true when the caller should
// join the queue (everything held, or someone waits).
func (f *fairLock) tryFree(ctx context.Context, budget time.Duration) (lk *Lock, queued bool, err error) {
	try := 2 * f.cfg.lease.attemptTimeout
	sts, err := f.look(ctx, try)
	if err != nil {
		return nil, false, err
	}
	free := -1
	for i, st := range sts {
		if !st.Leased {
			free = i
			break
		}
	}
	if free < 0 {
		return nil, true, nil
	}
	ws, err := f.q.waiters(ctx, time.Now().Add(try))
	if err != nil {
		return nil, false, err
	}
	if len(ws) > 0 {
		return nil, true, nil
	}
	for i := free; i < len(sts); i++ {
		if sts[i].Leased {
			continue
		}
		m := f.slots[i]
		l := m.newLease()
		l.see(sts[i].Epoch)
		lk, ok, err := m.tryLock(ctx, l, try, &sts[i])
		switch {
		case ok:
			lk.fair = &fairState{f: f, took: time.Now()}
			return lk, false, nil
		case err != nil:
			return nil, false, err
		}
	}
	return nil, true, nil
}

// join takes a ticket and puts the waiter in the queue.
func (f *fairLock) join(ctx context.Context, budget time.Duration) (waiter, error) {
	limit := time.Now().Add(budget)
	ticket, err := f.q.take(ctx, limit)
	if err != nil {
		return waiter{}, fmt.Errorf("azlease: %s: joining the queue: %w", f.what, err)
	}
	fairHook("ticket", f.name, ticket)
	w, err := f.q.join(ctx, limit, ticket, newLeaseID(), f.cfg.lease.identity)
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
}

// wait waits in the queue until w gets the lock, ctx ends, or something
// fails for good; last keeps the last transient failure.
func (f *fairLock) wait(ctx context.Context, w waiter, last *error) (*Lock, error) {
	var (
		pl      = polling{moved: time.Now()}
		pos     = -1
		first   uint64 // the first waiter's ticket, at the last listing
		marked  bool
		nearAt  time.Time // when it last came to be first or second in line
		lastErr = func(err error) { *last = err }
	)
	var recent [4]time.Time // when the last four rounds began
	for round := 0; ; round++ {
		// A guard against spinning: four rounds within one head poll (the
		// paths below wait on their own; this only catches a round that
		// returns at once again and again) wait a head poll.
		if round >= len(recent) && time.Since(recent[round%len(recent)]) < f.cfg.headPoll && !sleepCtx(ctx, f.cfg.headPoll) {
			return nil, context.Cause(ctx)
		}
		recent[round%len(recent)] = time.Now()
		ws, err := f.q.waiters(ctx, time.Now().Add(2*f.cfg.lease.attemptTimeout))
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, ErrTransient) {
				return nil, err
			}
			lastErr(err)
			if err := f.unreachable(); err != nil {
				return nil, err
			}
			if !sleepCtx(ctx, timing.Jitter(f.cfg.headPoll, f.cfg.jitter, mrand.Float64())) {
				return nil, context.Cause(ctx)
			}
			continue
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
				lk.fair = &fairState{f: f, key: w.key, took: time.Now(), wasHead: time.Since(nearAt)}
				f.leave(ctx, w) // served: out of the queue
				return lk, nil
			}
			if err != nil {
				return nil, err
			}
		case 1:
			lk, err := f.next(ctx, w, ws[0], &pl, last)
			if lk != nil {
				lk.fair = &fairState{f: f, key: w.key, took: time.Now(), wasHead: time.Since(nearAt)}
				f.leave(ctx, w)
				return lk, nil
			}
			if err != nil {
				return nil, err
			}
		default:
			if !sleepCtx(ctx, timing.QueueWait(p, time.Since(pl.moved), f.cfg.headPoll, f.cfg.poll)) {
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
	for time.Now().Before(until) {
		sts, err := f.look(ctx, 2*f.cfg.lease.attemptTimeout)
		if err == nil {
			cur := make([]uint64, len(sts))
			for i, st := range sts {
				cur[i] = st.Epoch
			}
			lk, passedOver, err := f.takeTurn(ctx, w, sts, budget, &pl.retried)
			switch {
			case lk != nil:
				return lk, nil
			case err != nil && ctx.Err() == nil && !errors.Is(err, ErrTransient):
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
		} else if ctx.Err() == nil && !errors.Is(err, ErrTransient) {
			return nil, err
		} else {
			*last = err
		}
		if err := f.unreachable(); err != nil {
			return nil, err
		}
		// Never later than HeadPollInterval: jitter only shortens it.
		if !sleepCtx(ctx, time.Duration(float64(f.cfg.headPoll)*(1-f.cfg.jitter/2*mrand.Float64()))) {
			return nil, context.Cause(ctx)
		}
	}
	return nil, nil
}

// takeRetries is how many more times takeTurn tries to take over a lease
// whose marker names its waiter but which is not under the hand-off's ID
// yet (the holder's Change follows its marker by a round trip), a quarter
// head poll apart; only the first time it finds that hand-off (a holder
// that died between the two requests leaves it so until the lease expires,
// and each try is a request that fails).
const takeRetries = 2

// takeTurn takes the lock if sts show it handed to w, or a slot free. It
// reports passedOver when a slot names another successor than w (the
// holder moved on, or w's place is in doubt).
func (f *fairLock) takeTurn(ctx context.Context, w waiter, sts []Status, budget time.Duration, retried *string) (lk *Lock, passedOver bool, err error) {
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
				// hand-off's ID: the holder writes the marker, then
				// changes the lease, and w looked in between. Try again
				// soon rather than after a head poll.
				if !sleepCtx(ctx, f.cfg.headPoll/4) {
					return nil, false, context.Cause(ctx)
				}
				continue
			case errors.Is(err, ErrLeaseHeld):
				return nil, true, nil
			default:
				return nil, false, err
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
		case err != nil:
			return nil, false, err
		}
	}
	for _, st := range sts {
		if st.Leased && st.Next != "" && st.Next != w.key {
			return nil, true, nil
		}
	}
	return nil, false, nil
}

// next is the polling of the waiter right behind the first: it returns the
// lock (handed to it: the first left), an error, or neither when the queue
// should be listed again (it moved, or the first seems dead and was
// removed).
//
// It looks as timing.SecondWait says: every quarter head poll for a while
// when it sees the lock handed to another waiter (the first, which may be
// dead; pl.handing); for 10 head polls after the queue moved, every head
// poll counted from its last look at the lock (pl.looked, which it
// updates), so that a listing in between does not delay it; then less and
// less often.
func (f *fairLock) next(ctx context.Context, w, first waiter, pl *polling, last *error) (*Lock, error) {
	budget := f.slots[0].cfg.lease.duration
	var (
		epochs    []uint64
		freeSince time.Time
	)
	for polls := 0; ; polls++ {
		wait, fast := timing.SecondWait(time.Now(), pl.moved, pl.looked, pl.handing.since, f.cfg.headPoll, f.cfg.poll, minHandOffMargin)
		if !sleepCtx(ctx, wait) {
			return nil, context.Cause(ctx)
		}
		if polls >= nextPollsPerListing-1 && !fast {
			return nil, nil // this look is a listing of the queue
		}
		pl.looked = time.Now()
		sts, err := f.look(ctx, 2*f.cfg.lease.attemptTimeout)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrTransient) {
				return nil, err
			}
			*last = err
			if err := f.unreachable(); err != nil {
				return nil, err
			}
			continue
		}
		for _, st := range sts {
			if st.Leased && st.Next == w.key {
				lk, _, err := f.takeTurn(ctx, w, sts, budget, &pl.retried)
				if lk != nil || err != nil {
					return lk, err
				}
				return nil, nil
			}
		}
		cur := make([]uint64, len(sts))
		allFree := true
		for i, st := range sts {
			cur[i] = st.Epoch
			allFree = allFree && !st.Leased
		}
		pl.handing.saw(sts)
		if epochs != nil && !equalEpochs(epochs, cur) {
			pl.moved = time.Now()
			return nil, nil // someone took a slot: the first, probably
		}
		epochs = cur
		switch {
		case !allFree:
			freeSince = time.Time{}
		case freeSince.IsZero():
			freeSince = time.Now()
		case time.Since(freeSince) > 2*f.cfg.headPoll+minHandOffMargin:
			// The lock stayed free while the first waiter, which polls
			// every HeadPollInterval, did not take it: it is dead (or cut
			// off, or has not noticed yet that it is first). Mark it
			// missed, so that this waiter acts as the first.
			f.cfg.lease.log.Debug("azlease: the first waiter does not take a free lock; passing it over", slog.Uint64("ticket", first.Ticket))
			if marked, _, _ := f.q.miss(ctx, first); marked {
				fairHook("missed", f.name, first.Ticket)
			}
			return nil, nil
		}
	}
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
// when the caller should release as an unordered lock does.
func (lk *Lock) unlockFair(ctx context.Context) (handed bool, err error) {
	fs := lk.fair
	f := fs.f
	ws, now, err := f.q.waitersAt(ctx, time.Now().Add(f.cfg.lease.attemptTimeout))
	if err != nil {
		lk.lease.cfg.log.Debug("azlease: could not list the lock's queue; releasing", slog.Any("error", err))
		return false, nil
	}
	held := time.Since(fs.took)
	// candidates are the waiters a hand-off may go to, first in line first:
	// all but this holder's own entry and those marked missed (evicting,
	// from the first listing, those missed and silent for long).
	candidates := func(ws []waiter, now time.Time) []waiter {
		out := make([]waiter, 0, len(ws))
		for _, w := range ws {
			switch {
			case w.key == fs.key:
				// this holder's own entry, not removed yet
			case w.Missed:
				// Passed over before and silent since: dead once it has
				// not looked for longer than any live waiter goes without.
				if !now.IsZero() && !w.modified.IsZero() && now.Sub(w.modified) > 2*timing.MaxQueueLook(f.cfg.poll) {
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
	pending := candidates(ws, now)
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
			if ws, err := f.q.waiters(ctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err == nil {
				pending = candidates(ws, time.Time{})
			}
		}
		for _, w := range pending {
			if etag, ok := tried[w.Ticket]; (ok && etag == w.etag) || left == 0 {
				continue
			}
			left--
			tried[w.Ticket] = w.etag
			wait := f.cfg.headPoll
			if !w.Head {
				wait = timing.HandOffWait(held, fs.wasHead, f.cfg.headPoll, f.cfg.poll)
			}
			return successor{key: w.key, id: w.id, wait: wait, passed: func() { lk.passOver(ctx, w) }}, true
		}
		return successor{}, false
	}
	out, err := lk.lease.handOnEach(ctx, lk.Token().LeaseID, next)
	if err != nil {
		if errors.Is(err, errHandOffLost) {
			return true, err
		}
		return true, err
	}
	if out.taker != "" {
		lk.lease.cfg.log.Info("azlease: unlocked; handed to the next waiter", slog.Uint64("epoch", lk.Epoch()), slog.Int("passed_over", len(out.passed)))
	} else {
		lk.lease.cfg.log.Info("azlease: unlocked; no waiter took the lock", slog.Uint64("epoch", lk.Epoch()), slog.Int("passed_over", len(out.passed)))
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
		time.Sleep(f.cfg.headPoll + minHandOffMargin)
		cctx, cancel := context.WithTimeout(ctx, 2*f.cfg.lease.attemptTimeout)
		defer cancel()
		if st, err := lk.lease.inspect(cctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err == nil && st.Epoch > lk.Epoch() {
			return // it took the lock
		}
		_, _, _ = f.q.miss(cctx, cur)
	}
	fairHook("missed", f.name, w.Ticket) // passed over, marked or not: the holder moves on
}
