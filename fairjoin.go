package azlease

// A fair Mutex's join right after its own hand-off, placed without a
// listing (issue 35's hot lock): the holder that just handed the lock on
// knows the queue from the listing its Unlock handed on from, and its new
// ticket says how many joined since. Its first sleep toward its turn goes
// by that place, so the listing a waiter makes as it joins is saved (one
// request an acquisition of a hot lock's ten).
//
// Why a sleep from that place keeps the promises: a waiter's watchers
// count, from the first listing that shows it, that it may have been one
// place further back since its entry was written (track), and Unlock's
// bound counts every place (sleepsUntil). The place counted here is where
// it would be had nobody been served since the hand-off but the successor,
// who is counted as still waiting: within a few round trips of the hand-off
// (placedWithin), before the successor could have taken the lock and handed
// it on, and with nobody gone from the queue otherwise, that is where it
// is, or one place nearer. The place is not known for sure (a waiter whose
// ctx ended since the listing, or a ticket whose entry was never written,
// counts a place that is not there), so the waiter sleeps no longer than
// its schedule at placedSlack places nearer: 2 and a tenth of the place
// (6 at 49, the back of a queue of 50). More waiters gone than that within
// the half-second before its join can make it look late; its watcher may
// then pass it over once, as a paused waiter (it is first when back).
// Anything else (a Semaphore, a listing of another generation's tickets,
// a Lock called later, a place near the front) lists as it joins.

import (
	"time"

	"github.com/azlease/azlease/internal/timing"
)

// handedFrom is what a fair Mutex's Unlock handed on from: when it began
// (before its Change was sent: nobody could act on the hand-off earlier,
// so a window counted from there is never longer than from the Change's
// apply), the listing, and the ticket of the holder that handed on.
type handedFrom struct {
	at     time.Time
	v      queueView
	ticket uint64
}

// placedFrom is the least place (waiters ahead) a join is placed at
// without a listing: nearer the front a place counted wrong weighs more,
// and the listing costs less (the waiter lists near its turn anyway).
const placedFrom = 20

// placedSlack is how many places nearer than counted a placed waiter may
// be and still sleep within its schedule (placedSleep): 2, and a tenth of
// the place.
func placedSlack(p int) int { return 2 + p/10 }

// placedSleep is how long a waiter placed at p (≥ placedFrom) first sleeps:
// its own wait there (timing.OwnBackWait), no longer than its schedule at
// placedSlack places nearer (timing.BackWait), with poll its
// PollInterval.
func placedSleep(p int, poll time.Duration) time.Duration {
	return min(timing.OwnBackWait(p, 0, 0, poll), timing.BackWait(p-placedSlack(p), 0, 0, poll))
}

// placedWithin is how soon after its Unlock began, in round trips of the
// listing it handed on from, a Lock of the same Mutex value is placed
// without a listing: the successor looks, takes the lock, and hands it on
// (its Change and marker) before the one behind it can be served, at
// least four round trips after the hand-off.
const placedWithin = 4

// placement is where a join stands without a listing: at waiters ahead
// (0: not placed, it lists), as the listing from (its last hand-off's)
// tells.
type placement struct {
	at   int
	from queueView
}

// placed is where a waiter with ticket, whose join was asked at asked,
// stands in the queue as the last hand-off of this value tells (see the
// file's comment).
func (f *fairLock) placed(ticket uint64, asked time.Time) placement {
	if len(f.slots) != 1 {
		return placement{}
	}
	f.localMu.Lock()
	hf := f.handedFrom
	f.localMu.Unlock()
	v := hf.v
	rtt := v.got.Sub(v.sent)
	if hf.ticket == 0 || v.sent.IsZero() || rtt <= 0 || asked.Before(hf.at) || asked.Sub(hf.at) > placedWithin*rtt {
		return placement{}
	}
	ahead, newest := 0, hf.ticket
	for _, w := range v.ws {
		newest = max(newest, w.Ticket)
		if w.Ticket != hf.ticket && !w.Missed {
			ahead++
		}
	}
	// The tickets taken since the listing: ahead too. Only within one
	// generation are they consecutive.
	if ticket <= newest || (ticket-1)/ticketsPerGeneration != (newest-1)/ticketsPerGeneration {
		return placement{}
	}
	if p := ahead + int(ticket-newest-1); p >= placedFrom {
		return placement{at: p, from: v}
	}
	return placement{}
}
