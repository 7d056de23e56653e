package azlease

// A fair Mutex's join right after its own hand-off, placed without a
// listing (issue 35's hot lock): the holder that just handed the lock on
// knows the queue from the listing its Unlock handed on from, and its new
// ticket says how many joined since. Its first sleep toward its turn goes
// by that place, so the listing a waiter makes as it joins is saved (one
// request an acquisition of a hot lock's ten).
//
// Why a sleep from that place keeps every promise: a waiter's watchers
// count, from the first listing that shows it, that it may have been one
// place further back since its entry was written (track), and Unlock's
// bound counts every place (sleepsUntil). The place counted here is where
// it would be had nobody been served since the hand-off but the successor,
// who is counted as still waiting: within a few round trips of the hand-off
// (placedWithin), before the successor could have taken the lock and handed
// it on, that is where it is, or one place nearer. Far enough back
// (placedFrom), its sleep per place (timing.OwnFloor) is short enough that
// a place or two nearer is still within what its watchers count
// (timing.BackFloor per place): OwnFloor × (p + 2) ≤ BackFloor × p.
// Anything else (a Semaphore, a listing of another generation's tickets,
// a Lock called later, a place near the front) lists as it joins.

import "time"

// handedFrom is what a fair Mutex's Unlock handed on from: when, the
// listing, and the ticket of the holder that handed on.
type handedFrom struct {
	at     time.Time
	v      queueView
	ticket uint64
}

// placedFrom is the least place (waiters ahead) a join is placed at
// without a listing: at 18 and more, two places fewer than counted are
// still slept within the watchers' schedule (9 ms × 20 ≤ 10 ms × 18).
const placedFrom = 20

// placedWithin is how soon after its hand-off, in round trips of the
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
