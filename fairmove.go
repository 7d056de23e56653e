package azlease

// When a fair lock's waiter far back counts the queue's last move from
// (movedAt). Its sleeps grow with how long the queue has stood still
// (timing.BackWait); a waiter that slept minutes behind a long hold and
// then saw one hand-off counted that stand-still from its own sight of the
// move, and so, like every waiter far back, looked often again for
// minutes, behind a hold that was as long (issue 35: about 3.7 requests a
// second from 50 waiters over a second 10-minute hold, against 1.2 over the
// first). A move that was a take is dated from storage instead.

import (
	"slices"
	"time"
)

// movedAt is the instant a waiter at position p (behind the first) counts
// the queue's stand-still from, having seen in v that the queue moved since
// its listing prev; last is what it counted from before. It is now, or,
// for a Mutex whose only moves since prev were takes (each entry gone ahead
// of the waiter is a holder of a term begun since, and as many terms began),
// the last write of the lock blob dated late (storage's whole seconds, and
// 2 × AttemptTimeout for the taker's entry removal, sent beside that
// write), never before prev was answered nor before last. So the waiter's
// stand-still is never longer than the queue's since its last change (what
// its watcher allows it, timing.SuccessorDue, and Unlock: sleepsUntil).
func (f *fairLock) movedAt(p int, ticket uint64, prev, v queueView, last time.Time) time.Time {
	now := time.Now()
	if p < 2 || len(f.slots) != 1 || len(prev.locks) != 1 || len(v.locks) != 1 || prev.got.IsZero() || v.got.IsZero() {
		return now
	}
	was, is := prev.locks[0], v.locks[0]
	if is.Epoch <= was.Epoch || is.modified.IsZero() || is.listed.IsZero() {
		return now
	}
	var holders []string // of the terms begun since prev (History: the latest first)
	for _, h := range is.History {
		if h.Epoch > was.Epoch {
			holders = append(holders, h.Holder)
		}
	}
	if uint64(len(holders)) != is.Epoch-was.Epoch {
		return now // terms not all known (a history too short, one unrecorded)
	}
	gone := 0
	for _, x := range prev.ws {
		if x.Ticket >= ticket || slices.ContainsFunc(v.ws, func(y waiter) bool { return y.Ticket == x.Ticket }) {
			continue
		}
		i := slices.Index(holders, x.Holder)
		if i < 0 || x.Holder == "" {
			return now // one ahead left, or was removed: not dated by the lock
		}
		holders = slices.Delete(holders, i, i+1)
		gone++
	}
	if gone == 0 || len(holders) != 0 {
		return now // a take by someone not in the queue, or a move not seen as one
	}
	// From the listing's answer, not its send: here the later is the safe
	// side (a shorter stand-still, shorter sleeps).
	at := writtenNoLaterThan(v.got, is.listed, is.modified).Add(2 * f.cfg.lease.attemptTimeout)
	return earlier(later(later(at, prev.got), last), now)
}
