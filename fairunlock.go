package azlease

// A fair lock's Unlock (issue 35): the holder hands the lease to the first
// in line (a Change to its hand-off ID, then the marker that names it,
// succession.go's handOnEach) and returns, waiting for nobody, when the
// successor or the waiter behind it surely looks while the lease lasts
// (sleepsUntil); otherwise, after the queue stood still for minutes, it
// keeps the lease alive until one of them takes it. It passes nobody over:
// that is the watcher's (fairwatch.go).

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/azlease/azlease/internal/timing"
)

// unlockFair is Unlock for a Lock of a fair lock whose term ended cleanly:
// it hands the lease to the first waiter in line (Change Lease, then the
// marker) and returns (issue 35): it waits for nobody and passes nobody
// over. Watching for a successor that does not come is the job of the
// waiter right behind it (next: the watcher rule), which is looking anyway.
// handed is false when the caller should release as an unordered lock does
// (nobody waits, the queue could not be listed, or the term's validity
// passed before the hand-off could begin).
func (lk *Lock) unlockFair(ctx context.Context) (handed bool, err error) {
	fs := lk.fair
	f := fs.f
	began := time.Now()        // before the Change is sent: a join placed from this hand-off counts from here (fairjoin.go)
	held := began.Sub(fs.took) // the pace this hand-off publishes (metaHolds)
	// The listing that made this holder first in line, when it is recent
	// (reuseListing), shows a waiter behind it, nobody ahead and nobody
	// marked missed (a Mutex: one slot), saves a listing (a hot lock's, an
	// acquisition): whoever joined since is behind everyone it shows. One
	// it shows that has left since is handed the lock all the same, and
	// passed over (the waiter behind it takes the lease over: takeLeft).
	// One marked missed may have come back since, and come first: listed.
	v := fs.seen
	reuse := len(f.slots) == 1 && fs.key != "" && !v.sent.IsZero() && time.Since(v.sent) < reuseAge(v) &&
		!slices.ContainsFunc(v.ws, func(w waiter) bool { return w.Ticket < fs.ticket || w.Missed }) &&
		slices.ContainsFunc(v.ws, func(w waiter) bool { return w.Ticket > fs.ticket })
	if !reuse {
		var err error
		if v, err = f.q.list(ctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err != nil {
			lk.lease.cfg.log.Debug("azlease: could not list the lock's queue; releasing", slog.Any("error", err))
			return false, nil
		}
	}
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
	slot := slices.IndexFunc(f.slots, func(m *Mutex) bool { return m.t.blob == lk.Name() })
	// A successor is never passed over; one that leaves the queue (its ctx
	// ended, or a Semaphore's waiter served by another slot) is, and the
	// lease goes to the first in line as the queue is then. Bounded.
	tried := map[uint64]bool{}
	left := len(pending) + 4
	out, err := lk.lease.handOnEach(ctx, lk.Token().LeaseID, func() (successor, bool) {
		if len(tried) > 0 {
			if nv, err := f.q.list(ctx, time.Now().Add(f.cfg.lease.attemptTimeout)); err == nil {
				v, pending = nv, candidates(nv, false)
			}
		}
		i := slices.IndexFunc(pending, func(w waiter) bool { return !tried[w.Ticket] })
		if i < 0 || left == 0 {
			return successor{}, false
		}
		left--
		w := pending[i]
		tried[w.Ticket] = true
		s := successor{key: w.key, id: w.id, holder: w.Holder, handed: func() { f.wake(w.key) }, publish: true, hold: held}
		// Someone in the queue looks at the lock, and takes the lease
		// over or renews it, by the longest either the successor or the
		// waiter behind it may still sleep (timing.SleepBound, from when
		// its entry was written, as this listing shows it): the hand-off
		// ends once the marker is written when the lease outlasts that.
		behind := pending[i+1:]
		s.due = func(marker time.Time) time.Time {
			by := f.sleepsUntil(w, v, marker)
			if len(behind) > 0 {
				if b := f.sleepsUntil(behind[0], v, marker); !b.IsZero() && (by.IsZero() || b.Before(by)) {
					by = b
				}
			}
			return by
		}
		// Otherwise (a successor asleep far back after a long
		// stand-still) Unlock keeps the lease alive until it (or a
		// watcher) takes it, or until a renewal makes the lease outlast
		// the queue's next look, and passes nobody over; its looks list
		// the queue with the lock, and move on when the successor has
		// left it. Decided (issue 35): this rare wait stays in Unlock,
		// where the caller's ctx bounds it, rather than on a goroutine
		// that would need a Close to be waited for.
		_, poll := w.paces(f.cfg)
		s.wait = 2 * timing.MaxQueueLook(poll)
		if slot >= 0 {
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
	})
	switch {
	case errors.Is(err, ErrNotHeld):
		// Its validity passed before the hand-off began (nothing was
		// sent): release what may still be held, as an unordered lock.
		return false, nil
	case err != nil:
		return true, err
	}
	lk.logHandOff(out)
	f.noteHandOff(time.Now(), began, v, fs.ticket)
	return true, nil
}

// reuseListing is how old the listing that made a holder first in line may
// be for its Unlock to hand on from it, beyond its round trips (reuseAge):
// a hot lock's is a few round trips old (a look, the take) and a few
// milliseconds of sleep; with holds of 10 ms on loopback, about 20 ms.
const reuseListing = 50 * time.Millisecond

// reuseAge is how old v may be for an Unlock to hand on from it:
// reuseListing and 8 of v's own round trips (the look and the take between
// the listing and the Unlock are round trips too: with 5 ms requests the
// listing was over 50 ms old at most contended Unlocks, which listed
// again), at most 10 × reuseListing.
func reuseAge(v queueView) time.Duration {
	return min(reuseListing+8*max(v.got.Sub(v.sent), 0), 10*reuseListing)
}

// logHandOff tells how a fair lock's hand-off ended.
func (lk *Lock) logHandOff(out handOnOutcome) {
	log, epoch := lk.lease.cfg.log, slog.Uint64("epoch", lk.Epoch())
	switch {
	case out.handed != "":
		log.Info("azlease: unlocked; handed to the first waiter in line", epoch)
	case out.taker != "":
		log.Info("azlease: unlocked; handed to the first waiter in line, which took it", epoch)
	case out.lost != "":
		log.Info("azlease: unlocked; the lease was "+out.lost+" during the hand-off, nobody took it: the queue's first takes the free lock", epoch)
	default:
		log.Info("azlease: unlocked; released", epoch)
	}
}

// sleepsUntil is the latest w (as listing v shows it) may look at the lock
// after a marker written at marker, had it followed its schedule: marker
// plus the longest it may still sleep then (timing.SleepBound), its age
// counted from when its entry was written (its join, its head mark, or its
// return after it was missed: the waiter counts its age from then at the
// latest), as the entry's Last-Modified against the listing's Date tell
// (storage's clock, whole seconds: a second earlier). Zero when the
// listing does not tell.
func (f *fairLock) sleepsUntil(w waiter, v queueView, marker time.Time) time.Time {
	since := writtenBy(v.sent, v.date, w.modified)
	if since.IsZero() {
		return time.Time{}
	}
	head, poll := w.paces(f.cfg)
	return marker.Add(timing.SleepBound(max(marker.Sub(since), 0), head, poll, w.Head))
}
